"""Spike baselines that follow the curve (issue 36): a level change inside the trailing
window, fast falls, recovery on a rising stretch, sparse logs, a small persistent step.

Each log is LM-shaped (warmup and decay, epoch drops, a mixture hump, AR(1) plus skewed
noise; `_lm_curves`), written by pandas or as JSONL into tmp_path and read by `analyze`.
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity
from stabilitycli.detect.level import level_changes
from tests.detect import _lm_curves as lm


def _spikes(result):
    return [f for f in result.findings if f.code == "spike"]


def _alarms(result):
    """Warning and error findings of the spike and divergence families."""
    return [
        f
        for f in result.findings
        if f.severity in (Severity.WARNING, Severity.ERROR)
        and f.code in ("spike", "recurring-spikes", "divergence", "loss-jump")
    ]


def test_level_changes_are_the_epoch_boundaries_not_the_fall():
    run = lm.epochs(seed=4)
    changes = run["step"][level_changes(run["step"], lm.loss_of(run), Thresholds())]
    assert changes.tolist() == [601, 1201]
    fall = lm.warmup(seed=5)
    assert level_changes(fall["step"], lm.loss_of(fall), Thresholds()).size == 0


@pytest.mark.parametrize("seed", range(12))
def test_a_level_change_is_the_first_row_of_the_new_level(seed):
    """A 10% drop under 1.2% noise: the medians either side pass over a few rows around it
    and the deepest was a row up to 3 early (8 of these 12 runs), leaving points of the old
    level in the restarted window; the row is where the means either side differ most."""
    run = lm.epochs(seed=seed, drop=0.1, sigma=0.012)
    changes = run["step"][level_changes(run["step"], lm.loss_of(run), Thresholds())]
    assert changes.tolist() == [601, 1201]


def test_shift_after_an_epoch_drop_is_a_persistent_spike(tmp_path):
    """A +10% shift 50 steps after the loss stepped down 15%: the window [t-100, t) holds
    both levels, so its mean and std hid the shift (the verdict was divergence); the window
    restarts at the drop."""
    run = lm.epochs(seed=0)
    loss = lm.loss_of(run, np.where(run["step"] >= 1250, 0.10, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "epochs.csv", run, loss)))
    assert result.verdict.code == "spike-persistent"
    (spike,) = _spikes(result)
    assert abs(spike.step - 1250) <= 2
    assert spike.evidence["window_restart_step"] == 1201
    assert spike.evidence["baseline_first_step"] == 1201
    assert "restarted at the level change at step 1201" in spike.message
    assert spike.evidence["spike_type"] == 2


def test_bump_after_an_epoch_drop_is_a_spike(tmp_path):
    run = lm.epochs(seed=1)
    step = run["step"]
    loss = lm.loss_of(run, np.where((step >= 1250) & (step < 1270), 0.21, 0.0))
    result = analyze(str(lm.write_jsonl(tmp_path / "epochs.jsonl", run, loss)))
    assert result.verdict.code == "spike-recoverable"
    (spike,) = _spikes(result)
    assert abs(spike.step - 1250) <= 2 and spike.evidence["recovered"]


def test_one_point_spike_in_warmup_is_large_against_the_local_level(tmp_path):
    """+50% on a warmup fall: the trailing mean sat so far above the curve that the
    point was not even flagged; against the local level it is a large spike."""
    run = lm.warmup(seed=1)
    loss = lm.loss_of(run, np.where(run["step"] == 200, 0.5, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "warmup.csv", run, loss)))
    assert result.verdict.code == "spike-recoverable"
    (spike,) = _spikes(result)
    assert spike.step == 200 and spike.evidence["z"] >= 6
    assert spike.evidence["baseline_basis"] == "local-level"
    assert "local level" in spike.message and "at step 200" in spike.message
    assert not [f for f in result.findings if f.code == "blip" and 200 in f.evidence["steps"]]


def test_grad_norm_surge_in_warmup_is_the_spike_cause(tmp_path):
    """+25% with the grad norm x35 at the same step, both falling fast: the surge is
    measured against the grad norm's local level and names the spike's cause."""
    run = lm.warmup(seed=1)
    run["grad_norm"] = run["grad_norm"].copy()
    run["grad_norm"][219] *= 35  # step 220
    loss = lm.loss_of(run, np.where(run["step"] == 220, 0.25, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "warmup.csv", run, loss)))
    (spike,) = _spikes(result)
    assert spike.step == 220 and spike.severity is Severity.WARNING
    (cause,) = spike.evidence["causes"]
    assert cause["cause"] == "long-tail-token" and cause["ratio"] >= 30
    assert cause["grad_norm_baseline_basis"] == "local-level"
    assert result.verdict.cause == "long-tail-token"


def test_spike_on_a_rising_hump_recovers_against_the_trend(tmp_path):
    """+200% for one point on a healthy upward hump, back on the curve the next step: the
    trailing mean lags below the rising curve, so it 'never came back' to mean + 0.5 sigma;
    judged against the rising trend it recovered at once."""
    run = lm.hump(seed=2)
    loss = lm.loss_of(run, np.where(run["step"] == 1100, 2.0, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "hump.csv", run, loss)))
    assert result.verdict.code == "spike-recoverable"
    (spike,) = _spikes(result)
    assert spike.evidence["recovered"] and spike.evidence["recovery_steps"] <= 5
    assert spike.evidence["recovery_slope_per_step"] > 0
    assert "rising trend of steps 1000-1099" in spike.message
    assert "reload" not in " ".join(result.verdict.remediation).lower()


def test_sparse_every_100_steps_jump_with_grad_surge_is_found(tmp_path):
    """Logged every 100 steps: +10.9% at one point with the grad norm x109 there, while the
    20-point (2,000-step) widened window still lags the fall."""
    run = lm.sparse(every=100, points=300, sigma=0.011, seed=3)
    run["grad_norm"] = run["grad_norm"].copy()
    run["grad_norm"][40] *= 109
    loss = lm.loss_of(run, np.where(run["step"] == run["step"][40], 0.109, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "sparse.csv", run, loss)))
    (spike,) = _spikes(result)
    assert spike.step == 4100
    assert spike.evidence["causes"][0]["cause"] == "long-tail-token"


def test_sparse_every_10_steps_three_point_bump_is_found(tmp_path):
    """Logged every 10 steps: a 30-step +11% bump (3 logged points) on the early fall."""
    run = lm.sparse(every=10, points=2000, sigma=0.013, seed=4)
    step = run["step"]
    loss = lm.loss_of(run, np.where((step >= 510) & (step < 540), 0.11, 0.0))
    result = analyze(str(lm.write_jsonl(tmp_path / "sparse.jsonl", run, loss)))
    assert [f.step for f in _spikes(result)] == [510]


def test_small_persistent_step_is_not_divergent(tmp_path):
    """A curriculum switch lifts the loss 3.5% for good: whatever the spike rule makes of
    it, it is not a spike that 'kept rising' (type 3) and not a divergence."""
    run = lm.warmup(steps=3000, sigma=0.008, seed=7)
    loss = lm.loss_of(run, np.where(run["step"] >= 2000, 0.035, 0.0))
    result = analyze(str(lm.write_csv(tmp_path / "curriculum.csv", run, loss)))
    assert all(f.evidence["spike_type"] != 3 for f in _spikes(result))
    assert "divergent" not in " ".join(f.message for f in _spikes(result))
    assert not [f for f in result.findings if f.code == "divergence"]


@pytest.mark.parametrize(
    "run",
    [lm.epochs(seed=4), lm.warmup(seed=5), lm.hump(seed=6), lm.epochs(seed=9, drop=0.25)],
    ids=["epochs", "warmup", "hump", "epochs-25pct"],
)
def test_healthy_lm_runs_stay_healthy(tmp_path, run):
    result = analyze(str(lm.write_csv(tmp_path / "healthy.csv", run, lm.loss_of(run))))
    assert result.verdict.code == "healthy", [f.message for f in _alarms(result)]
    assert not _alarms(result)
