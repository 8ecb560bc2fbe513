"""Progress on long work (issue 15, item 4): on stderr, for a person only. Never beside a
machine format, never when stderr is not a terminal, never with --quiet."""

from __future__ import annotations

import contextlib
import sys

from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.commands import analyze as analyze_command
from stabilitycli.core import progress
from stabilitycli.detect.registry import load_rules
from stabilitycli.ingest.jsonl import reader as jsonl
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


def test_a_big_log_gets_a_bar_and_a_small_one_nothing(monkeypatch) -> None:
    size = RUN.stat().st_size
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", size)
    assert isinstance(analyze_command._reading(str(RUN), wanted=True), analyze_command.ReadingBar)
    assert isinstance(analyze_command._reading(str(RUN), wanted=False), contextlib.nullcontext)
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", size + 1)
    assert isinstance(analyze_command._reading(str(RUN), wanted=True), contextlib.nullcontext)


def test_the_library_tells_the_bytes_read_and_the_rules_done(monkeypatch) -> None:
    """A log read in pieces tells how far the read got after each piece, up to its size;
    then every rule done, of the rules selected. Nothing is told outside the block."""
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 4096)
    heard: list[tuple[str, int, int]] = []
    with progress.listening(lambda *said: heard.append(said)):
        analyze(RUN)
    size = RUN.stat().st_size
    read = [(done, total) for stage, done, total in heard if stage == "read"]
    assert len(read) >= size // 4096
    assert all(total == size for _, total in read)
    assert [done for done, _ in read] == sorted(done for done, _ in read)
    assert read[-1][0] == size
    rules = [(done, total) for stage, done, total in heard if stage == "rules"]
    selected = len(load_rules())
    assert rules == [(done, selected) for done in range(selected + 1)]
    # the rules come after the read
    assert [stage for stage, *_ in heard].index("rules") > len(read) - 1
    count = len(heard)
    analyze(RUN)
    assert len(heard) == count


def test_the_bar_shows_what_it_hears() -> None:
    bar = analyze_command.ReadingBar("run.jsonl", 10 << 20)
    task = bar.bar.tasks[0]
    assert task.total is None  # a pulse until a reader says how far it got
    bar.heard("read", 5 << 20, 10 << 20)
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (5 << 20, 10 << 20)
    assert task.fields["amount"] == "5 of 10 MB"
    assert task.fields["doing"] == "reading run.jsonl"
    bar.heard("rules", 3, 13)
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (3, 13)
    assert (task.fields["doing"], task.fields["amount"]) == ("checking the rules", "3 of 13 rules")


def test_no_progress_reaches_a_pipe(monkeypatch) -> None:
    monkeypatch.setattr(analyze_command, "PROGRESS_MIN_BYTES", 0)
    runner = CliRunner()
    one = runner.invoke(app, ["analyze", str(RUN)])
    many = runner.invoke(app, ["analyze", "--format", "json", str(RUN), str(RUN)])
    for result in (one, many):
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "analysing" not in result.stderr
