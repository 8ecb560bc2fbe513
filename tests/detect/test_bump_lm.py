"""Multi-point bumps in the middle of LM-shaped runs (#36): a bump over three logged points
at the spec's bar (5 sigma and 5% of the level) logged every 10 steps on a cosine curve
with AR(1) noise is a spike, the same run without it stays quiet; a bump longer than the
recovery window that came back, or whose first three points the noise drew low, is judged
by its excess; a step that stays up is still judged by where it settled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.detect.bump_end import bump_ended
from stabilitycli.detect.bump_excess import sustained_longer
from stabilitycli.detect.pointwise import KeptAt
from tests.detect._lm_noise_curves import lm_run

EVERY = 10
AT = 1500  # the bump's first logged point: step 15,000 of a 30,000-step cosine run


def _run(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A cosine LM curve logged every 10 steps, noise 1% of the level, half of its
    variance AR(1) with phi 0.6 (the lag-1 correlation of consecutive logged points)."""
    return lm_run(seed, 3000, phi=0.6, noise=0.01, ar_share=0.5, every=EVERY)


def _analyze_csv(tmp_path, name: str, steps: np.ndarray, loss: np.ndarray):
    path = tmp_path / f"{name}.csv"
    pd.DataFrame({"step": steps, "train/loss": loss}).to_csv(path, index=False)
    return analyze(str(path))


def _spikes_near(result, step: int) -> list:
    return [
        f
        for f in result.findings
        if f.code == "spike"
        and int(f.severity) >= 1
        and f.step is not None
        and abs(f.step - step) <= 10 * EVERY
    ]


def test_a_three_point_bump_at_the_spec_bar_logged_every_10_steps_is_a_spike(tmp_path) -> None:
    """+5% (5 sigma) over three logged points: found wherever its logged points meet the
    spec's bar over the curve (the noise pulls some of them under it)."""
    judged = 0
    for seed in range(10):
        steps, level, loss = _run(seed)
        loss[AT : AT + 3] += 0.05 * level[AT : AT + 3]
        rel = float(np.mean(loss[AT : AT + 3] / level[AT : AT + 3] - 1.0))
        if rel < 0.05:
            continue  # under the spec's bar in the log itself
        judged += 1
        result = _analyze_csv(tmp_path, f"bump{seed}", steps, loss)
        found = _spikes_near(result, int(steps[AT]))
        assert found, f"seed {seed}: bump of {rel:.2%} missed"
        assert found[0].evidence["points"] >= 1
    assert judged >= 6


def test_the_same_run_without_a_bump_stays_quiet(tmp_path) -> None:
    for seed in range(10):
        steps, _, loss = _run(seed)
        result = _analyze_csv(tmp_path, f"healthy{seed}", steps, loss)
        loud = [(f.code, f.step) for f in result.findings if int(f.severity) >= 1]
        assert loud == [], f"seed {seed}: {loud}"
        assert result.verdict.code == "healthy"


def test_a_ten_point_bump_whose_first_points_the_noise_drew_low_is_a_spike(tmp_path) -> None:
    """Its first three points at 3.5, 4.9 and 3.5 sigma sum under the three-point bar; its
    ten points average 5.2 sigma (and 5.2% of the level)."""
    lift = 0.01 * np.array([3.5, 4.9, 3.5, 5.5, 6.0, 5.5, 5.2, 6.0, 5.7, 6.2])
    for seed in (1, 2, 5, 6):
        steps, level, loss = _run(seed)
        loss[AT : AT + 10] = level[AT : AT + 10] * (1.0 + lift)
        result = _analyze_csv(tmp_path, f"low{seed}", steps, loss)
        assert _spikes_near(result, int(steps[AT])), f"seed {seed}"


def _noise_free(points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(points, dtype=np.int64) * EVERY
    return steps, np.full(points, 3.0)


def test_a_bump_that_came_back_after_the_recovery_window_ended() -> None:
    """Ten points +8% logged every 10 steps (100 steps, past the 50-step recovery window),
    then back: its settle span's later half is at the level it left."""
    steps, loss = _noise_free()
    loss[100:110] *= 1.08
    assert bump_ended(100, steps, loss, 3.0, Thresholds())


def test_a_step_that_stays_up_did_not_end() -> None:
    """A +3.5% step (a curriculum switch, under the spec's 5%) whose first points sat at 5%:
    its later half stays up, over half of that."""
    steps, loss = _noise_free()
    loss[100:] *= 1.035
    loss[100:103] = 3.0 * 1.05
    assert not bump_ended(100, steps, loss, 3.0, Thresholds())


def test_a_span_the_log_cuts_short_says_nothing() -> None:
    steps, loss = _noise_free(110)
    loss[100:103] *= 1.08
    assert not bump_ended(100, steps, loss, 3.0, Thresholds())


def test_the_excess_over_more_than_three_points_reads_the_events_mean() -> None:
    thresholds = Thresholds()
    _, loss = _noise_free()
    sigma = 0.03  # 1% of the level
    lift = np.array([3.5, 4.9, 3.5, 5.5, 6.0, 5.5, 5.2, 6.0, 5.7, 6.2]) * sigma
    loss[100:110] += lift
    loss[150:153] += np.array([3.5, 4.9, 3.5]) * sigma  # three points only: the 3-point bar's
    rows = np.array([100, 150])
    reference = KeptAt(loss.size, rows, np.full(2, 3.0))
    sd = KeptAt(loss.size, rows, np.full(2, sigma))
    bar = np.full(2, 12.5)
    out = sustained_longer(rows, loss, reference, sd, bar, thresholds)
    assert out.tolist() == [True, False]
    # a non-finite point ends the stretch read: the points after it do not count
    loss[103] = np.nan
    out = sustained_longer(rows, loss, reference, sd, bar, thresholds)
    assert out.tolist() == [False, False]
