"""`stab watch` on the command line: alert lines (JSON Lines with --format json), the final
document as `stab analyze` prints it, and one line with exit 2 for what it cannot do."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stabilitycli.cli import app
from tests.conftest import FIXTURES, RUNS


def _invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_a_finished_log_ends_with_analyze_document_and_status(tmp_path: Path) -> None:
    log = RUNS / "spike-persistent" / "run.jsonl"
    alerts = tmp_path / "alerts.jsonl"
    args = ("--format", "json", "--fail-on", "warning")
    watched = _invoke("watch", str(log), "--idle", "0.2", "--interval", "0.1", *args,
                      "--alerts", str(alerts))  # fmt: skip
    analyzed = _invoke("analyze", str(log), *args)
    assert watched.exit_code == analyzed.exit_code == 1
    assert watched.stdout == analyzed.stdout
    lines = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert lines and {"type", "run", "step", "code", "severity", "summary"} <= set(lines[0])
    assert {a["code"] for a in lines} >= {"spike"}


def test_alert_lines_go_to_stdout_before_the_verdict(tmp_path: Path) -> None:
    log = RUNS / "spike-persistent" / "run.jsonl"
    result = _invoke("watch", str(log), "--idle", "0.2", "--interval", "0.1", "-q")
    first = result.stdout.splitlines()[0]
    assert first.startswith("ALERT spike-persistent step ") and " spike error" in first
    assert "spike-persistent" in result.stdout.splitlines()[-6:][0] or "spike-persistent" in (
        result.stdout
    )


def test_a_format_without_a_follower_is_one_line_and_exit_2() -> None:
    # a W&B CSV export is written once, whole: there is nothing to follow
    exports = [p for p in FIXTURES.rglob("*.csv") if _reader_of(p) == "wandb_csv"]
    assert exports, "no W&B CSV export among the fixtures"
    result = _invoke("watch", str(exports[0]), "--idle", "1")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "stab: error: stab watch does not follow wandb_csv inputs yet"
    ]


def _reader_of(path: Path) -> str:
    from stabilitycli.ingest import choose_reader
    from stabilitycli.ingest.options import ReadOptions

    return choose_reader(str(path), ReadOptions())[0]


def test_bad_options_are_one_line_and_exit_2() -> None:
    log = str(RUNS / "plateau" / "run.jsonl")
    for args in (
        ("--stop-signal", "NOPE"),
        ("--interval", "0"),
        ("--cpu-share", "2"),
        ("--quiet", "--verbose"),
    ):
        result = _invoke("watch", log, *args)
        assert result.exit_code == 2, args
        assert len(result.stderr.strip().splitlines()) == 1, args


def test_a_log_that_never_appears_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _invoke("watch", str(tmp_path / "later.jsonl"), "--idle", "0.2", "--interval", "0.05")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].endswith("no such file or directory")
