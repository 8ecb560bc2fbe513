"""A shift or bump a few logged points after an epoch drop of about its own size (issue 36,
targets LE1 and LS1): a 15% drop in noise of 3% of the level, then +15% of the new level.

The 8-point medians after the boundary straddle the few points of the new level and the
shifted ones, which sit about where the old epoch was: no step is read, the trailing window
keeps the old epoch, and the shift is no rise over it. The few points of the new level
show the drop (`short_drop.short_drops`): the window restarts there, and the shift is a
persistent spike over the level since the drop. After a drop the pooled noise of a sparse
window counts the changes of the old level at the new one (`pooled_noise`).

Logs are written by pandas (CSV) into tmp_path.
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity
from stabilitycli.detect.autocorr import INDEPENDENT, noise_memory_of
from stabilitycli.detect.level import level_changes
from stabilitycli.detect.pooled_noise import pooled_sigma
from stabilitycli.detect.short_drop import short_drops
from tests.detect import _lm_curves as lm
from tests.detect.test_after_change import EPOCH_POINTS, _epochs, _lift

DROP, SIGMA, SHIFT = 0.15, 0.03, 0.15  # in units of the level


def _analyze(tmp_path, run, loss, name="run"):
    return analyze(str(lm.write_csv(tmp_path / f"{name}.csv", run, loss)))


def test_a_shift_about_the_drop_s_size_is_a_persistent_spike(tmp_path):
    """4, 5 and 6 logged points after the boundary (every 10 steps), 8 seeds each: main
    found 4 of these 24 as an error at the shift's first step; now 23, each against
    the window restarted at the boundary."""
    found = 0
    for after in (4, 5, 6):
        for seed in range(8):
            run = _epochs(10, drop=DROP, sigma=SIGMA, seed=seed)
            onset = EPOCH_POINTS + after
            result = _analyze(tmp_path, run, lm.loss_of(run, _lift(run, onset, None, SHIFT)))
            step, boundary = int(run["step"][onset]), int(run["step"][EPOCH_POINTS])
            near = [f for f in result.findings if f.code == "spike" and abs(f.step - step) <= 20]
            if near and near[0].severity == Severity.ERROR:
                assert near[0].evidence["window_restart_step"] == boundary
                found += 1
    assert found >= 22, found


@pytest.mark.parametrize("every", [1, 10, 100])
@pytest.mark.parametrize("seed", range(3))
def test_the_same_epochs_without_the_shift_stay_quiet(tmp_path, every, seed):
    run = _epochs(every, drop=DROP, sigma=SIGMA, seed=seed)
    result = _analyze(tmp_path, run, lm.loss_of(run))
    alarms = [f for f in result.findings if f.severity in (Severity.WARNING, Severity.ERROR)]
    assert result.verdict.code == "healthy", [f.message for f in alarms]


def test_a_few_points_of_a_new_level_are_a_drop_and_noise_is_none():
    """A 4-point dip of 15% then back (a shift that cancels the drop) is found at its first
    point; noise alone of the same size, 2400 points with memory, holds no such drop."""
    thresholds = Thresholds()
    run = _epochs(10, drop=0.0, sigma=SIGMA, seed=1)
    quiet = lm.loss_of(run)
    assert short_drops(quiet, thresholds, noise_memory_of(quiet, thresholds)).size == 0
    dipped = lm.loss_of(run, np.where(np.arange(quiet.size) // 4 == 250, -DROP, 0.0))
    memory = noise_memory_of(dipped, thresholds)
    assert short_drops(dipped, thresholds, memory).tolist() == [1000]


def test_a_spike_right_after_the_drop_leaves_the_drop_at_the_boundary():
    """A +50% point on the second point of the new epoch: the few points from the third on
    also read as a drop, and the medians' row at the boundary stays (the spike would be
    judged against the old epoch if the change moved past it)."""
    run = _epochs(100, drop=DROP, sigma=SIGMA, seed=2)
    loss = lm.loss_of(run, _lift(run, EPOCH_POINTS + 1, 1, 0.5))
    rows = level_changes(run["step"], loss, Thresholds()).tolist()
    assert EPOCH_POINTS in rows
    assert EPOCH_POINTS + 2 not in rows


def test_the_pooled_noise_after_a_drop_is_the_new_level_s():
    """Noise of 2% of the level, a 25% drop: from 8 points after it, the pooled sigma counts
    the changes before the drop at the new level (main: a third too wide until the pooled
    points all lay after the drop)."""
    rng = np.random.default_rng(5)
    n, drop_at = 600, 300
    level = np.where(np.arange(n) < drop_at, 2.0, 1.5)
    loss = level * (1.0 + 0.02 * rng.standard_normal(n))
    sigma = pooled_sigma(loss, 100, INDEPENDENT, np.array([drop_at]), level_points=8)
    after = sigma[drop_at + 8 : drop_at + 100]
    assert np.all(np.abs(after / (0.02 * 1.5) - 1.0) < 0.2), after
    # without it (the new level read over more points than are pooled: never), a third
    # too wide; the rows before the new level is read are left as they were
    plain = pooled_sigma(loss, 100, INDEPENDENT, np.array([drop_at]), level_points=1000)
    assert np.median(plain[drop_at + 8 : drop_at + 50] / after[:42]) > 1.2
    assert np.allclose(sigma[: drop_at + 8], plain[: drop_at + 8], equal_nan=True)
