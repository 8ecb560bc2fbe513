"""The read options are declared once (`commands/read_options.py`) and every command that
reads a log takes them: `analyze`, `report` and `postmortem` all of them, `ranks` and
`compare` the ones whose flags do not mean something else there."""

from __future__ import annotations

import importlib.util
from dataclasses import fields

import pytest
import typer.main

from stabilitycli.cli import app
from stabilitycli.commands.read_options import READ_OPTIONS, ReadArgs
from tests.conftest import FIXTURES

GROUP = typer.main.get_command(app)
DB = FIXTURES / "mlflow" / "mlflow.db"
PATTERN = r"it=(?P<step>\d+)\|L=(?P<loss>\S+)"


def _options(command: str) -> set[str]:
    params = GROUP.commands[command].params  # type: ignore[attr-defined]
    return {decl for p in params for decl in p.opts if decl.startswith("--")}


def test_one_declaration_per_field() -> None:
    assert list(READ_OPTIONS) == [f.name for f in fields(ReadArgs)]


@pytest.mark.parametrize("command", ["report", "postmortem"])
def test_report_and_postmortem_take_every_read_option_analyze_takes(command: str) -> None:
    read_flags = {f"--{name.replace('_', '-')}" for name in READ_OPTIONS}
    assert read_flags <= _options("analyze")
    assert read_flags <= _options(command)


def _custom_log(tmp_path):
    path = tmp_path / "custom.log"
    path.write_text("".join(f"it={step}|L={3.0 - step / 1000:.4f}\n" for step in range(0, 400)))
    return path


def test_postmortem_reads_with_pattern_and_tracking_uri(cli, tmp_path) -> None:
    out = tmp_path / "pm.md"
    patterned = cli("postmortem", _custom_log(tmp_path), "--pattern", PATTERN, "-o", out)
    assert patterned.exception is None or isinstance(patterned.exception, SystemExit)
    assert patterned.exit_code == 0, patterned.stderr
    assert "custom.log" in out.read_text()
    tracked = cli("postmortem", "spike", "--tracking-uri", f"sqlite:///{DB}", "-o", "-")
    assert tracked.exit_code == 0, tracked.stderr
    assert "spike" in tracked.stdout
    # without the option the run name is a missing file: the option reached the reader
    assert cli("postmortem", "spike").exit_code == 2


@pytest.mark.skipif(importlib.util.find_spec("plotly") is None, reason="the report extra")
def test_report_reads_with_pattern_and_tracking_uri(cli, tmp_path) -> None:
    page = tmp_path / "r.html"
    patterned = cli("report", _custom_log(tmp_path), "--pattern", PATTERN, "-o", page)
    assert patterned.exit_code == 0, patterned.stderr
    assert "custom.log" in page.read_text()
    tracked = cli("report", "spike", "--tracking-uri", f"sqlite:///{DB}", "-o", page, "--js", "cdn")
    assert tracked.exit_code == 0, tracked.stderr
    assert "spike" in page.read_text()


def test_a_bad_read_option_is_one_line_in_report_and_postmortem(cli, tmp_path) -> None:
    log = _custom_log(tmp_path)
    for args in (("postmortem", log, "-o", "-"), ("report", log, "-o", tmp_path / "r.html")):
        result = cli(*args, "--dtype", "fp64")
        assert result.exit_code == 2
        assert "Traceback" not in result.stderr and "dtype" in result.stderr
