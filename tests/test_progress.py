"""Progress on long work (issue 15, item 4): on stderr, for a person only. Never beside a
machine format, never when stderr is not a terminal, never with --quiet."""

from __future__ import annotations

import contextlib
import sys

from typer.testing import CliRunner

from stabilitycli.cli import app
from stabilitycli.commands import analyze as analyze_command
from stabilitycli.report.formats import Format
from tests.conftest import FIXTURES

RUN = FIXTURES / "runs" / "spike-lr-jump" / "run.jsonl"


def test_progress_is_for_a_person_at_a_terminal_only(monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert analyze_command.progress_wanted(Format.terminal, quiet=False)
    assert not analyze_command.progress_wanted(Format.terminal, quiet=True)
    for machine in (Format.json, Format.junit, Format.github, Format.concise, Format.markdown):
        assert not analyze_command.progress_wanted(machine, quiet=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not analyze_command.progress_wanted(Format.terminal, quiet=False)


def test_a_big_log_gets_a_spinner_and_a_small_one_nothing(monkeypatch) -> None:
    from rich.progress import Progress

    size = RUN.stat().st_size
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", size)
    assert isinstance(analyze_command._reading(str(RUN), wanted=True), Progress)
    assert isinstance(analyze_command._reading(str(RUN), wanted=False), contextlib.nullcontext)
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", size + 1)
    assert isinstance(analyze_command._reading(str(RUN), wanted=True), contextlib.nullcontext)


def test_no_progress_reaches_a_pipe(monkeypatch) -> None:
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", 0)
    runner = CliRunner()
    one = runner.invoke(app, ["analyze", str(RUN)])
    many = runner.invoke(app, ["analyze", "--format", "json", str(RUN), str(RUN)])
    for result in (one, many):
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "analysing" not in result.stderr
