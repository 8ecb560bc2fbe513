"""detect/level_floor.py: a row it rules out is under the bar by the level itself, on
curves that fall fast, jump by many orders of magnitude, hold NaN and Inf, or are sparse;
and the spike rule's pre-screen of causes gives what reading every level gives (#40)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect import level_floor, windows
from stabilitycli.detect.level import LevelAt
from stabilitycli.detect.level_floor import asked_rows, may_reach
from stabilitycli.detect.spike_causes import lead_max
from stabilitycli.detect.windows import plan_window

# a level over values of 1e300 overflows in level.py's own squares: not this module's
pytestmark = pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")


def _series(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = 6000
    steps = np.arange(n, dtype=np.int64)
    noise = 1 + 0.1 * rng.standard_normal(n)
    if kind == "warmup-fall":  # the grad norm falling 20x in the first thousand steps
        values = (0.5 + 10.0 * np.exp(-steps / 300.0)) * np.abs(noise)
    elif kind == "surges":  # surges of 5-200x its level, some of them a few steps long
        values = np.abs(noise)
        at = rng.choice(n, 60, replace=False)
        values[at] *= rng.uniform(5, 200, at.size)
        values[at[:10] + 1] *= 40
    elif kind == "orders":  # 1e12 for a stretch, then back to 1: a mean's rounding at its worst
        values = np.abs(noise)
        values[2000:2300] *= 1e12
        values[4000] = 1e300
    elif kind == "non-finite":
        values = np.abs(noise)
        values[rng.choice(n, 300, replace=False)] = np.nan
        values[rng.choice(n, 50, replace=False)] = np.inf
        values[3000:3200] = np.nan  # a window with nothing in it
        values[3200] = 50.0
    elif kind == "zeros":  # a grad norm of 0 (frozen weights): no level to divide by
        values = np.abs(noise)
        values[1000:1500] = 0.0
        values[1500] = 3.0
    else:  # sparse and irregular: windows by step, and widened ones
        steps = np.cumsum(rng.integers(1, 40, n)).astype(np.int64)
        values = np.abs(noise)
        values[rng.choice(n, 40, replace=False)] *= 30
    return steps, values


KINDS = ["warmup-fall", "surges", "orders", "non-finite", "zeros", "sparse"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_ruled_out_is_under_the_bar_by_its_level(kind):
    thresholds = Thresholds()
    steps, values = _series(kind, np.random.default_rng(KINDS.index(kind)))
    plan = plan_window(steps, 100, thresholds.min_points_per_window, 20)
    level = LevelAt(steps, values, 100, plan, thresholds)
    exact = level._read(np.arange(values.size), lambda lv: lv.level)
    for bar in (10.0, 30.0, 2.0):
        out = ~may_reach(level, bar)
        # in chunks whose first windows reach back across the chunk before: the same rows
        with mock.patch.object(windows, "CHUNK_ROWS", 257):
            np.testing.assert_array_equal(~may_reach(level, bar), out)
        if bar >= 10:  # the screen rules most rows out
            assert out.sum() > values.size // 2
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = values[out] / exact[out]
        assert not (ratio >= bar).any()


@pytest.mark.parametrize("kind", KINDS)
def test_the_screened_causes_are_the_ones_every_level_gives(kind):
    """`maybe_cause`'s grad part with the screen: the max over the lead window reaches the
    bar at the same candidates as without it."""
    thresholds = Thresholds()
    steps, values = _series(kind, np.random.default_rng(10 + KINDS.index(kind)))
    plan = plan_window(steps, 100, thresholds.min_points_per_window, 20)
    level = LevelAt(steps, values, 100, plan, thresholds)
    exact = level._read(np.arange(values.size), lambda lv: lv.level)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(values), values / exact, np.nan)
    candidates = np.sort(np.random.default_rng(1).choice(values.size, 500, replace=False))
    lead, bar = thresholds.cause_lead_steps, 10.0
    every = lead_max(steps, ratio, lead, candidates) >= bar
    asked = asked_rows(level, steps, lead, candidates, bar)
    screened = np.zeros(candidates.size, dtype=bool)
    screened[asked] = lead_max(steps, ratio, lead, candidates[asked]) >= bar
    np.testing.assert_array_equal(screened, every)
    assert asked.sum() < candidates.size  # some candidates were ruled out


@pytest.mark.parametrize("width", [1, 2, 7, 100])
@pytest.mark.parametrize("size", [1, 2, 99, 100, 101, 5_003])
def test_the_trailing_least_value_is_polars_rolling_min(width, size) -> None:
    rng = np.random.default_rng(width * size)
    values = rng.lognormal(size=size)
    for bad in (np.nan, np.inf, -np.inf):
        values[rng.integers(0, size, size // 9 + 1)] = bad
    if size > 60:
        values[20:60] = np.nan  # a window with no value
    finite = np.where(np.isfinite(values), values, np.nan)
    shifted = pl.Series(np.concatenate(([np.nan], finite[:-1]))).fill_nan(None)
    expected = shifted.rolling_min(width, min_samples=1).fill_null(np.nan).to_numpy()
    assert level_floor._trailing_min(values, width).tobytes() == expected.tobytes()
