"""throughput-drop checks the exact trailing median only on stretches of points its cheap
bound leaves open and that are long enough to be a drop: the stretches must be the ones a
scan of the whole column finds, and a series with no open point must not break it."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect import throughput


def _whole_column_low(steps, values, thresholds: Thresholds) -> np.ndarray:
    """Low points by the exact trailing median at every point, runs counted over the column."""
    window, keep = thresholds.spike_window_steps, 1 - thresholds.throughput_drop_frac
    median = (
        pl.DataFrame({"step": steps, "v": values})
        .select(pl.col("v").rolling_median_by("step", window_size=f"{window}i", closed="left"))["v"]
        .to_numpy()
    )
    with np.errstate(invalid="ignore"):
        low = values < keep * median
    # only runs of persist points or more count
    edges = np.diff(np.concatenate(([0], low.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    keep_low = np.zeros(values.size, dtype=bool)
    for start, end in zip(starts, ends, strict=True):  # a handful of runs, not rows
        if end - start >= thresholds.throughput_persist_points:
            keep_low[start:end] = True
    return keep_low


@pytest.mark.parametrize("seed", range(6))
def test_the_open_stretches_find_the_drops_a_whole_scan_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = 3000
    steps = np.arange(points, dtype=np.int64)
    values = 1000.0 * (1 + 0.03 * rng.standard_normal(points))
    for start in rng.integers(300, points - 100, size=4):  # drops of 5-60 points to 40-60%
        values[start : start + rng.integers(5, 60)] *= rng.uniform(0.4, 0.6)
    thresholds = Thresholds()
    low, _, _ = throughput._low_points(steps, values, thresholds)
    expected = _whole_column_low(steps, values, thresholds)
    assert expected.any()
    # every point of a long enough run is low in both
    assert np.array_equal(low & expected, expected)


def test_a_series_with_no_open_point_has_no_low_point() -> None:
    empty = np.zeros(0)
    low, median_rows, median = throughput._low_points(empty.astype(np.int64), empty, Thresholds())
    assert median_rows.size == median.size == 0
    assert low.size == 0
