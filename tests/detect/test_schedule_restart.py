"""Issue #34 part 5: a healthy SGDR run is healthy, its restart bumps are `schedule-restart`
findings, and a restart that blows up is still reported. Logs written by real writers in
tmp_path (pyarrow Parquet, tensorboardX, JSONL)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from tests.detect._schedules import (
    sgdr,
    step_decay,
    write_jsonl,
    write_parquet,
    write_tensorboard,
    wsd,
)

WRITERS = {
    "parquet": lambda run, tmp: write_parquet(run, tmp / "run.parquet"),
    "tensorboardX": lambda run, tmp: write_tensorboard(run, tmp / "tb"),
    "jsonl": lambda run, tmp: write_jsonl(run, tmp / "run.jsonl"),
}


def _cli(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["analyze", *args, "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_the_healthy_sgdr_run_is_healthy(tmp_path, writer: str) -> None:
    """The issue's case: restarts every 1,000 steps, a +0.12 bump decaying in ~120 steps,
    logged every 10 steps."""
    path = WRITERS[writer](sgdr(), tmp_path)
    code, doc = _cli(str(path))
    assert code == 0
    verdict = doc["verdict"]
    assert verdict["code"] == "healthy" and verdict["cause"] is None
    assert "planned LR restart" in verdict["summary"]
    codes = [f["code"] for f in doc["findings"]]
    assert "spike" not in codes and "lr-jump" not in codes and "lr-increasing" not in codes
    bumps = [f for f in doc["findings"] if f["code"] == "schedule-restart"]
    assert bumps and all(f["severity"] == "info" for f in bumps)
    ev = bumps[0]["evidence"]
    assert ev["restart_step"] in (1000, 2000, 3000, 4000)
    assert ev["lr_before"] < 1e-5 and ev["lr_after"] == pytest.approx(3e-4)
    assert 0.05 < ev["bump"] < 0.3 and 0 < ev["decay_steps"] <= ev["decay_limit_steps"]
    assert doc["lr_schedule"]["period_steps"] == 1000
    assert "lr-discontinuity" not in json.dumps(doc)


def test_the_schedule_is_printed_where_the_lr_is_described(tmp_path) -> None:
    path = write_parquet(sgdr(), tmp_path / "run.parquet")
    result = CliRunner().invoke(app, ["analyze", str(path)], env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "lr schedule: warmup to 0.0003 by step 90; warm restarts to 0.0003 at steps" in (
        result.stdout
    )


@pytest.mark.parametrize("every", [1, 10])
def test_a_restart_that_blows_up_is_still_reported(tmp_path, every: int) -> None:
    path = write_parquet(sgdr(every=every, blowup_at=3000), tmp_path / "run.parquet")
    code, doc = _cli(str(path))
    assert code == 1
    assert doc["verdict"]["code"] == "spike-persistent"
    assert doc["verdict"]["cause"] == "lr-restart"
    assert any("restart" in r for r in doc["verdict"]["remediation"])
    assert not any("fix the LR schedule" in r for r in doc["verdict"]["remediation"])
    # the restarts before it decayed as planned
    assert 2000 in [f["step"] for f in doc["findings"] if f["code"] == "schedule-restart"]


def test_a_bump_that_stays_up_far_longer_than_the_earlier_ones_is_a_spike(tmp_path) -> None:
    run = sgdr(every=1)
    slow = run["step"] >= 3000
    into = run["step"] - 3000
    run["loss"] = run["loss"] + (slow * 0.25 * (into < 450))  # up for 450 steps, then back
    code, doc = _cli(str(write_parquet(run, tmp_path / "run.parquet")))
    assert doc["verdict"]["code"] != "healthy" and code == 1
    assert 3000 not in [f["step"] for f in doc["findings"] if f["code"] == "schedule-restart"]


@pytest.mark.parametrize("make", [step_decay, wsd], ids=["step-decay", "wsd"])
def test_step_decay_and_wsd_runs_stay_healthy(tmp_path, make) -> None:
    result = analyze(write_parquet(make(), tmp_path / "run.parquet"))
    assert result.verdict.code == "healthy"
    assert not {"lr-jump", "lr-increasing", "spike"} & {f.code for f in result.findings}
    assert result.extras["lr_schedule"]["summary"]


def _irregular_restarts() -> dict:
    """Rises at 1000 and 2600 to levels never seen before (x2, then x2 again): no
    auto-recognised restart, and lr-jump warnings, until the user declares them."""
    run = sgdr(steps=4000, period=10**6, bump=0.0)
    run["lr"] = run["lr"].copy()
    for at, top in ((1000, 6e-4), (2600, 1.2e-3)):
        after = run["step"] >= at
        run["lr"][after] = top * (1 - (run["step"][after] - at) / 8000)
        run["loss"] = run["loss"] + after * 0.12 * (2.718 ** (-(run["step"] - at) / 40))
    return run


def test_declared_restarts_turn_their_bumps_into_schedule_restarts(tmp_path) -> None:
    path = write_parquet(_irregular_restarts(), tmp_path / "run.parquet")
    _, before = _cli(str(path))
    assert "lr-jump" in [f["code"] for f in before["findings"]]
    for flags in (["--planned-restarts", "1000,2600"], ["--set", "lr_restarts_intended=true"]):
        code, doc = _cli(str(path), *flags)
        assert code == 0 and doc["verdict"]["code"] == "healthy", flags
        codes = [f["code"] for f in doc["findings"]]
        assert "lr-jump" not in codes and "spike" not in codes
    (tmp_path / "stab.toml").write_text("planned_lr_restart_steps = [1000, 2600]\n")
    code, doc = _cli(str(path))
    assert doc["lr_schedule"]["restarts"][0]["declared"] is True
    assert doc["settings"]["non_default"][0]["name"] == "planned_lr_restart_steps"


def test_a_bad_declared_step_list_is_one_usage_error(tmp_path) -> None:
    path = write_parquet(sgdr(steps=1500), tmp_path / "run.parquet")
    result = CliRunner().invoke(app, ["analyze", str(path), "--planned-restarts", "10x0"])
    assert result.exit_code == 2
    assert "list of steps" in result.output
