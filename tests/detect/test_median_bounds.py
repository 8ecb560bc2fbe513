"""The 16- and 32-point medians read only where their bounds leave a level change open
(#40): the bounds hold polars' medians, the medians at a few rows are its own, and the
level changes found are the very rows the whole medians give."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect import level, rolling_median8
from stabilitycli.detect.autocorr import INDEPENDENT, _centred_median
from stabilitycli.detect.pooled_noise import ChunkLoss


def _values(seed: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = np.exp(rng.normal(size=size) * rng.uniform(0.01, 2.0)) * 10 ** rng.uniform(-4, 4)
    return np.round(values, 2) + 0.005 if seed % 2 else values  # ties in half the cases


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("points", [16, 32])
def test_bounds_hold_polars_median(seed: int, points: int) -> None:
    values = _values(seed, 20_000)
    least = points // 2 + 1
    chunk = ChunkLoss(values)
    bounds = chunk.median_bounds(points, least)
    assert bounds is not None
    low, high = bounds
    want = pl.Series(values).rolling_median(points, min_samples=least).fill_null(np.nan)
    exact = want.to_numpy()
    known = np.isfinite(exact)
    assert np.all(low[known] <= exact[known]) and np.all(exact[known] <= high[known])
    rows = np.array([-3, 0, 5, points - 2, points - 1, 777, values.size - 1, values.size + 2])
    got = chunk.medians_at(points, least, rows)
    inside = (rows >= 0) & (rows < values.size)
    assert got[inside].tobytes() == exact[rows[inside]].tobytes()
    assert np.isnan(got[~inside]).all()


def test_no_bounds_for_values_not_above_zero() -> None:
    values = _values(1, 1_000)
    values[10] = -values[10]
    assert ChunkLoss(values).median_bounds(16, 9) is None


def _stepped(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(3_000, 60_000))
    x = np.linspace(0.0, 1.0, size)
    base = 3.0 * np.exp(-3.0 * x) + 1.0
    for at in rng.uniform(0, 1, int(rng.integers(0, 5))):  # epoch-like steps down
        base = np.where(x > at, base * rng.uniform(0.75, 0.97), base)
    for at in rng.uniform(0, 1, int(rng.integers(0, 5))):  # bumps after them
        start = int(at * size)
        base[start : start + int(rng.integers(2, 40))] *= rng.uniform(1.02, 1.3)
    return base * (1.0 + rng.normal(size=size) * rng.uniform(0.002, 0.05))


@pytest.mark.parametrize("seed", range(8))
def test_level_changes_the_same_with_and_without_bounds(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    loss, thresholds = _stepped(seed), Thresholds()
    steps = np.arange(loss.size)
    bounded = level.level_changes(steps, loss, thresholds, INDEPENDENT)
    monkeypatch.setattr(rolling_median8, "bounded", lambda values: False)
    whole = level.level_changes(steps, loss, thresholds, INDEPENDENT)
    assert bounded.tobytes() == whole.tobytes()


@pytest.mark.parametrize("window", [1, 3, 9, 65])
@pytest.mark.parametrize("size", [1, 50, 129, 131, 5_000])
def test_centred_median_is_polars(window: int, size: int) -> None:
    values = np.round(np.random.default_rng(size).normal(size=size), 1)  # zeros and ties
    want = pl.Series(values).rolling_median(window, center=True, min_samples=1).to_numpy()
    got = _centred_median(values, window)
    assert np.array_equal(got, want, equal_nan=True)  # the sign of a zero median may differ
    assert got[want != 0].tobytes() == want[want != 0].tobytes()
