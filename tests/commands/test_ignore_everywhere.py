"""`--ignore CODE` removes the code everywhere: findings, spike causes, the verdict and its
cause, remedies, the post-mortem's root cause and the exit status (issue #34 part 5)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from stabilitycli.cli import app
from tests.conftest import FIXTURES, run_fixture
from tests.detect._schedules import sgdr, write_parquet


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def _json(*args: str) -> tuple[int, dict]:
    result = _run("analyze", *args, "--format", "json")
    return result.exit_code, json.loads(result.stdout)


def test_ignoring_lr_jump_drops_the_jump_and_the_spike_cause_resting_on_it() -> None:
    path = str(run_fixture("spike-lr-jump"))
    _, before = _json(path)
    assert before["verdict"]["cause"] == "lr-discontinuity"
    _, doc = _json(path, "--ignore", "lr-jump")
    text = json.dumps(doc)
    assert "lr-jump" not in [f["code"] for f in doc["findings"]]
    assert "lr-discontinuity" not in text
    assert doc["verdict"]["cause"] is None
    assert not any("LR schedule" in r for r in doc["verdict"]["remediation"])
    assert doc["ignored"] == ["lr-jump"]
    markdown = _run("analyze", path, "--ignore", "lr-jump", "--format", "markdown").stdout
    assert "lr-discontinuity" not in markdown and "_Ignored_: lr-jump" in markdown


def test_ignoring_lr_jump_changes_the_postmortem_root_cause() -> None:
    path = str(run_fixture("spike-lr-jump"))
    before = _run("postmortem", path, "-o", "-").stdout
    assert "scheduler-state bug" in before
    after = _run("postmortem", path, "-o", "-", "--ignore", "lr-jump").stdout
    assert "scheduler-state bug" not in after and "LR schedule discontinuity" not in after


def test_ignoring_lr_jump_on_the_sgdr_case_leaves_it_healthy(tmp_path) -> None:
    path = str(write_parquet(sgdr(), tmp_path / "run.parquet"))
    code, doc = _json(path, "--ignore", "lr-jump")
    assert code == 0 and doc["verdict"]["code"] == "healthy"
    assert "lr-discontinuity" not in json.dumps(doc)
    root = _run("postmortem", path, "-o", "-", "--ignore", "lr-jump").stdout
    assert "scheduler" not in root


def test_ignoring_spike_changes_the_verdict_and_the_exit_status() -> None:
    path = str(FIXTURES / "torch-runs" / "lr-jump-x10")
    code, doc = _json(path)
    assert (code, doc["verdict"]["code"]) == (1, "spike-persistent")
    code, doc = _json(path, "--ignore", "spike")
    assert code == 0 and doc["verdict"]["code"] == "healthy"
    assert not [f for f in doc["findings"] if f["code"] == "spike"]


def test_ignoring_recurring_spikes_drops_the_verdict_resting_on_them() -> None:
    path = str(FIXTURES / "rules" / "recurring-spikes" / "fires")
    _, before = _json(path)
    assert before["verdict"]["code"] == "spike-recoverable"
    _, doc = _json(path, "--ignore", "recurring-spikes")
    assert doc["verdict"]["code"] == "healthy"
    assert "recurring" not in json.dumps(doc["verdict"])


def test_ignoring_schedule_restart_hides_the_note_but_not_the_plan(tmp_path) -> None:
    path = str(write_parquet(sgdr(), tmp_path / "run.parquet"))
    code, doc = _json(path, "--ignore", "schedule-restart")
    assert code == 0 and doc["verdict"]["code"] == "healthy"
    assert "schedule-restart" not in [f["code"] for f in doc["findings"]]
    assert "spike" not in [f["code"] for f in doc["findings"]]
