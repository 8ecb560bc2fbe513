"""A divergence's fitted onset may not lie inside the curve's own fall (#36, target O2).

The power fit (`divergence_power`) carries a decay fitted before the rise on under
it; where that decay misses the shape of an early fast fall, a rise "from" a step
deep in the fall fitted the points better, and a straight ramp starting 11,500 steps
into the run was dated at step 2,870 (8,600 steps early, 5% of its length is 925)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.detect.divergence_onset import starts_in_a_deeper_fall

STEPS = np.arange(0, 30_000, 10, dtype=np.float64)
FALL = 2.0 + 8.0 * np.exp(-STEPS / 1500.0)  # the grid's curve: an exponential fall to 2.0
RISE_FROM = 11_500.0


def _ramped(size: float) -> np.ndarray:
    return FALL * (1.0 + size * np.clip((STEPS - RISE_FROM) / (STEPS[-1] - RISE_FROM), 0, 1))


def test_a_start_inside_a_fall_deeper_than_the_rise_is_no_onset():
    loss = _ramped(0.25)  # falls 8.0 to the floor, then rises 0.5
    assert starts_in_a_deeper_fall(STEPS, loss, 2_870.0)


@pytest.mark.parametrize("start", [RISE_FROM - 500.0, RISE_FROM, RISE_FROM + 2_000.0])
def test_a_start_where_the_fall_is_over_stands(start):
    assert not starts_in_a_deeper_fall(STEPS, _ramped(0.25), start)


def test_a_start_on_a_slow_decay_under_a_large_rise_stands():
    # an accelerating rise on a curve still falling slowly: the fall after the start is
    # smaller than the rise, so the start is the rise's, not the fall's
    loss = (2.0 - 0.1 * STEPS / STEPS[-1]) * (
        1.0 + 0.5 * np.clip((STEPS - RISE_FROM) / (STEPS[-1] - RISE_FROM), 0, 1) ** 2
    )
    assert not starts_in_a_deeper_fall(STEPS, loss, RISE_FROM)


def test_a_start_on_a_decay_tail_falling_more_than_the_rise_stands():
    # the LM ramps' case: after the onset a cosine tail takes the loss down 9% (3.4 to
    # 3.1) before the rise overtakes it and ends 0.23 up; deeper than the rise, but a few
    # percent of the level, no early fast fall
    x = STEPS[STEPS >= RISE_FROM] - RISE_FROM
    span = x[-1]
    loss = (
        3.1
        + 0.35 * np.clip(1.0 - x / (0.4 * span), 0.0, None)
        + 0.23 * np.clip((x - 0.4 * span) / (0.6 * span), 0.0, None) ** 2
    )
    assert not starts_in_a_deeper_fall(x, loss, 0.0)
    # the same shape with the fall a third of the level is the fall's, not the rise's
    deep = loss + 2.0 * np.clip(1.0 - x / (0.4 * span), 0.0, None)
    assert starts_in_a_deeper_fall(x, deep, 0.0)


def test_too_few_points_after_the_start_decide_nothing():
    assert not starts_in_a_deeper_fall(STEPS[:100], FALL[:100], 0.0)


# the grid cell where two of 30 straight ramps were dated ~8,600 steps early (seed 11)
CELL = "event|ramp|+25%|0.01|10|gamma|0|3000"


def test_the_grid_ramps_once_dated_in_the_fall_are_on_time(grid_synth):
    case = grid_synth.Case("ramp", "+25%", 0.25, 0.01, 10, "gamma")
    rng = np.random.default_rng(np.random.SeedSequence([11, zlib.crc32(CELL.encode())]))
    runs = [grid_synth.single_run(case, 3000, rng, None) for _ in range(11)]
    for frame, truth in (runs[2], runs[10]):
        found = [f for f in analyze(frame).findings if f.code == "divergence"]
        assert found, "the ramp is a divergence"
        assert abs(found[0].step - truth.onset) <= 0.05 * truth.length
