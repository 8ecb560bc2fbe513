"""Events right after an epoch boundary (issue 36): the first logged points after the loss
stepped down are judged against the level since the drop, with the noise of the stretch
before it scaled to that level, and the drop is placed at the first point of the new level
even when an event follows at once.

Logged every 10 steps the restarted window holds 1-9 points in the 100 steps after a
boundary, under `min_points_per_window`, and nothing was judged there; logged every 100 a
window of the last 20 points straddled both levels. Each log is a multi-epoch fine-tune
with AR(1) plus skewed noise, written by pandas or as JSONL into tmp_path.
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity
from stabilitycli.detect.after_change import after_change_baseline
from stabilitycli.detect.autocorr import INDEPENDENT
from stabilitycli.detect.level import level_changes
from tests.detect import _lm_curves as lm

EPOCH_POINTS = 800  # logged points an epoch


def _epochs(every: int, *, drop=0.15, sigma=0.01, seed=0, count=3) -> dict[str, np.ndarray]:
    """A fine-tune logged every `every` steps: a slow decay, and the loss steps down by
    `drop` at each epoch boundary (a logged step, the first of the new epoch)."""
    rng = np.random.default_rng(seed)
    step = np.arange(EPOCH_POINTS * count) * every
    epoch = np.arange(step.size) // EPOCH_POINTS
    curve = 1.4 * (1 - drop) ** epoch * (1 - 0.05 * step / step[-1])
    lr = 2e-5 * (1 - step / (step[-1] + every))
    return {"step": step, "curve": curve, "noise": lm.noise(rng, step.size, sigma), "lr": lr}


def _boundary(run, epoch=2) -> int:
    return int(run["step"][EPOCH_POINTS * (epoch - 1)])


def _lift(run, first_point: int, points: int | None, size: float) -> np.ndarray:
    """A rise of `size` (of the level) over `points` logged points from `first_point`
    (to the end when None)."""
    index = np.arange(run["step"].size)
    stop = index.size if points is None else first_point + points
    return np.where((index >= first_point) & (index < stop), size, 0.0)


def _alarms(result):
    return [f for f in result.findings if f.severity in (Severity.WARNING, Severity.ERROR)]


def _spike_at(result, step: int, every: int):
    spikes = [f for f in result.findings if f.code == "spike"]
    near = [f for f in spikes if abs(f.step - step) <= 2 * every]
    assert near, [f.message for f in result.findings]
    return near[0]


def _event_after_drop(tmp_path, every, seed, after, points, size, writer=lm.write_csv):
    """The second epoch boundary's run with a rise of `size` from `after` points after it,
    over `points` points (to the end when None), written by `writer` and analysed: the
    analysis, the event's onset step and the boundary's step."""
    run = _epochs(every, seed=seed)
    onset = EPOCH_POINTS + after
    loss = lm.loss_of(run, _lift(run, onset, points, size))
    suffix = "jsonl" if writer is lm.write_jsonl else "csv"
    result = analyze(str(writer(tmp_path / f"every{every}.{suffix}", run, loss)))
    return result, int(run["step"][onset]), _boundary(run)


@pytest.mark.parametrize("seed", range(3))
def test_shift_four_points_after_an_epoch_drop_every_10_steps(tmp_path, seed):
    """+8% (8 sigma) from 40 steps after the boundary, never back: a persistent spike at
    its first step, judged against the mean of the 4 points since the drop."""
    result, onset, boundary = _event_after_drop(tmp_path, 10, seed, 4, None, 0.08)
    assert result.verdict.code == "spike-persistent"
    spike = _spike_at(result, onset, 10)
    assert spike.evidence["window_restart_step"] == boundary
    assert spike.evidence["baseline_first_step"] == boundary
    assert spike.evidence["baseline_last_step"] == onset - 10
    assert "restarted at the level change" in spike.message


@pytest.mark.parametrize("seed", range(3))
def test_bump_right_after_an_epoch_drop_every_10_steps(tmp_path, seed):
    """A three-point +6% bump (6 sigma) from 20 steps after the boundary: a spike."""
    result, onset, _ = _event_after_drop(tmp_path, 10, seed, 2, 3, 0.06, lm.write_jsonl)
    assert result.verdict.code == "spike-recoverable"
    assert _spike_at(result, onset, 10).evidence["recovered"]


@pytest.mark.parametrize("seed", range(3))
def test_bump_at_the_point_after_an_epoch_drop_every_100_steps(tmp_path, seed):
    """Logged every 100 steps, a three-point +8% bump from the first point after the
    boundary's: one point of the new level before it is all a baseline can have. (Not
    back within the 50 steps of Q2.2: the next point is 100 steps on, and still up.)"""
    result, onset, boundary = _event_after_drop(tmp_path, 100, seed, 1, 3, 0.08)
    assert result.verdict.code == "spike-persistent"
    assert _spike_at(result, onset, 100).evidence["window_restart_step"] == boundary


@pytest.mark.parametrize("seed", range(3))
def test_shift_after_an_epoch_drop_every_100_steps(tmp_path, seed):
    """Every 100 steps, +10% from the third point after the boundary, never back."""
    result, onset, _ = _event_after_drop(tmp_path, 100, seed, 3, None, 0.10)
    assert result.verdict.code == "spike-persistent"
    _spike_at(result, onset, 100)


@pytest.mark.parametrize("every", [1, 10, 100])
@pytest.mark.parametrize("seed", range(4))
def test_healthy_epoch_drops_stay_quiet(tmp_path, every, seed):
    """Drops of 8-25% under noise of 1-3% of the level: no warning, verdict healthy."""
    rng = np.random.default_rng(100 + seed)
    run = _epochs(every, drop=rng.uniform(0.08, 0.25), sigma=rng.choice([0.01, 0.03]), seed=seed)
    result = analyze(str(lm.write_csv(tmp_path / "healthy.csv", run, lm.loss_of(run))))
    assert result.verdict.code == "healthy", [f.message for f in _alarms(result)]
    assert not _alarms(result)


def test_baseline_after_a_change_is_the_mean_since_it_with_the_noise_scaled():
    thresholds = Thresholds()
    rng = np.random.default_rng(7)
    steps = np.arange(400) * 10
    loss = np.where(np.arange(400) < 200, 2.0, 1.5) * (1 + 0.02 * rng.standard_normal(400))
    changes = level_changes(steps, loss, thresholds)
    assert changes.tolist() == [200]
    after = after_change_baseline(steps, loss, changes, thresholds, 8, 40, INDEPENDENT)
    assert after.rows.tolist() == list(range(201, 208))
    for row, level in zip(after.rows, after.level, strict=True):
        assert level == pytest.approx(loss[200:row].mean())
    before = np.diff(loss[159:200])
    noise = np.sqrt(np.mean(before * before) / 2.0)
    expected = noise * after.level / np.median(loss[192:200])
    np.testing.assert_allclose(after.sigma, np.maximum(expected, 0.01 * after.level))


@pytest.mark.parametrize("seed", range(8))
def test_a_drop_in_noise_of_3_percent_is_found(seed):
    """A 15% drop (5 sigma) under AR(1) noise of 3% of the level: the 8-point medians
    either side found it in 2 of these 8 runs, and the window straddled it; those of 16
    points find it, at the boundary."""
    run = _epochs(1, drop=0.15, sigma=0.03, seed=seed, count=2)
    rows = level_changes(run["step"], lm.loss_of(run), Thresholds())
    assert rows.tolist() == [EPOCH_POINTS]


def test_a_spike_right_after_the_drop_does_not_move_the_change_past_it():
    """Every 100 steps: the boundary's point, then a +60% spike. The means either side
    read the spike as the old level and put the change after it; the change is the
    boundary, so the spike is judged against the new level."""
    run = _epochs(100, seed=3)
    loss = lm.loss_of(run, _lift(run, EPOCH_POINTS + 1, 1, 0.6))
    rows = level_changes(run["step"], loss, Thresholds())
    assert rows.tolist() == [EPOCH_POINTS, 2 * EPOCH_POINTS]


def _shift_after_drop(tmp_path, every: int, seed: int, after: int, size: float, sigma=0.01):
    """The second boundary's run with a rise of `size` from `after` points after it to the
    end, written by pandas and analysed: (the result, its spike there, the logged loss,
    the run, the boundary's step)."""
    run = _epochs(every, seed=seed, sigma=sigma)
    onset = EPOCH_POINTS + after
    loss = lm.loss_of(run, _lift(run, onset, None, size))
    result = analyze(str(lm.write_csv(tmp_path / f"every{every}.csv", run, loss)))
    spike = _spike_at(result, int(run["step"][onset]), every)
    return result, spike, loss, run, _boundary(run)


def _sigma_from_before(spike, loss: np.ndarray, steps: np.ndarray) -> float:
    """sigma as the evidence says it was made: the noise measured before the change, scaled
    by the level since the change over the median of the last points before it."""
    boundary = int(np.searchsorted(steps, spike.evidence["window_restart_step"]))
    pre = loss[boundary - Thresholds().level_change_points : boundary]
    return spike.evidence["sigma_noise_before"] * spike.evidence["mu"] / np.median(pre)


@pytest.mark.parametrize("seed", range(2))
def test_sigma_after_a_drop_says_it_comes_from_the_differences_before_it(tmp_path, seed):
    """Every 10 steps, +8% 40 steps after the boundary: the mean is over the 4 points since
    the drop, sigma from the successive differences of the stretch before it (the sentence
    named only the restarted steps, as if sigma came from them too). (Seed 2's noise,
    scaled to the new level, is under the floor: the next test's case.)"""
    result, spike, loss, run, boundary = _shift_after_drop(tmp_path, 10, seed, 4, 0.08)
    ev = spike.evidence
    assert ev["sigma_basis"] == "before-change-differences"
    assert ev["baseline_first_step"] == boundary
    assert ev["sigma_last_step"] == boundary - 10 and ev["sigma_first_step"] < boundary - 100
    lag1 = ev["sigma_noise_lag1"]
    assert 0.1 < lag1 < 0.9  # AR(1) noise: its memory is allowed for
    assert ev["sigma"] == pytest.approx(_sigma_from_before(spike, loss, run["step"]))
    said = (
        f"sigma {ev['sigma']:.3g} (the noise over steps {ev['sigma_first_step']}-"
        f"{ev['sigma_last_step']} before the level change, {ev['sigma_noise_before']:.3g} from "
        f"the changes between successive points, allowing for their lag-1 autocorrelation "
        f"{lag1:.2f}, scaled to the level since the change)"
    )
    assert said in spike.message
    assert f"over steps {boundary}-{ev['baseline_last_step']}" in spike.message
    (q21,) = [p for p in result.verdict.path if p.question == "Q2.1"]
    assert said in q21.evidence


@pytest.mark.parametrize("seed", range(3))
def test_sigma_after_a_drop_logged_every_step_is_the_spread_around_a_line_before_it(tmp_path, seed):
    """Every step, +10% from 3 steps after the boundary, never back: the window before the
    drop gives sigma as the spread around its line."""
    _, spike, loss, run, boundary = _shift_after_drop(tmp_path, 1, seed, 3, 0.10, sigma=0.015)
    ev = spike.evidence
    assert ev["sigma_basis"] == "before-change-line"
    assert (ev["sigma_first_step"], ev["sigma_last_step"]) == (boundary - 100, boundary - 1)
    assert "sigma_noise_lag1" not in ev
    assert ev["sigma"] == pytest.approx(_sigma_from_before(spike, loss, run["step"]))
    assert (
        f"(the noise over steps {boundary - 100}-{boundary - 1} before the level change, "
        f"{ev['sigma_noise_before']:.3g} the spread around a line fitted to those points, "
        "scaled to the level since the change)"
    ) in spike.message


def test_a_floored_sigma_after_a_drop_says_it_is_the_floor(tmp_path):
    """Noise of 1% of the level: scaled to the level since the drop it is under the 1%
    floor, and the sentence says the floor set sigma, with the noise it measured."""
    _, spike, loss, run, _ = _shift_after_drop(tmp_path, 1, 0, 3, 0.10)
    ev = spike.evidence
    assert ev["sigma_basis"] == "floor"
    assert ev["sigma"] == pytest.approx(0.01 * ev["mu"])
    assert _sigma_from_before(spike, loss, run["step"]) < ev["sigma"]
    assert "(the floor, 1% of the baseline mean; the noise over steps" in spike.message


def test_a_spike_far_from_any_change_keeps_its_sigma_sentence(tmp_path):
    """No level change behind the window: no sigma_* keys, the sentence as before."""
    run = lm.warmup(steps=3000, sigma=0.006, seed=2)
    bump = np.where((run["step"] >= 2000) & (run["step"] < 2010), 0.2, 0.0)
    result = analyze(str(lm.write_csv(tmp_path / "plain.csv", run, lm.loss_of(run, bump))))
    spike = _spike_at(result, 2000, 1)
    assert not [k for k in spike.evidence if k.startswith("sigma_")]
    assert f"3*sigma {spike.evidence['sigma']:.3g}; " in spike.message
