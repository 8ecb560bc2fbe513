"""The trailing windows' counts and mean steps worked out in numpy (`window_counts`), and
the few points' extremes `short_drop` reads at its rows, give polars' own numbers bit for
bit: the statistics polars used to compute for them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.detect.short_drop import _extreme_from
from stabilitycli.detect.window_counts import COUNT_SHARES, STEP_MEAN_SHARES, window_counts

NAMES = (*COUNT_SHARES, *STEP_MEAN_SHARES)


def _polars_windows(steps, values, span: int, by_step: bool) -> dict[str, np.ndarray]:
    """The statistics as polars gave them: sums of a column of ones and means of the steps
    of the finite points, by step ([t - span, t)) or over the rows before each row."""
    frame = pl.DataFrame({"step": steps, "v": values, "x": (steps - steps[0]).astype(float)})
    frame = frame.with_columns(pl.when(pl.col("v").is_finite()).then(pl.col("v")).alias("v"))
    present = pl.col("v").is_not_null().cast(pl.Float64)
    x = pl.when(pl.col("v").is_not_null()).then(pl.col("x"))
    built = {}
    for name in NAMES:
        times, divided = COUNT_SHARES.get(name) or STEP_MEAN_SHARES[name]
        length = max(1, span // divided) * times
        if by_step:
            what = present if name in COUNT_SHARES else x
            expr = (what.rolling_sum_by if name in COUNT_SHARES else what.rolling_mean_by)(
                "step", f"{length}i", closed="left"
            )
        elif name == "count":  # the column of ones of the shifted values: no null
            expr = pl.col("v").shift(1).is_not_null().cast(pl.Float64).rolling_sum(length)
        elif name in COUNT_SHARES:
            expr = present.shift(1).rolling_sum(length, min_samples=1)
        else:
            expr = x.shift(1).rolling_mean(length, min_samples=1)
        fill = 0.0 if name == "count" else np.nan
        built[name] = frame.select(expr.fill_null(fill)).to_series().to_numpy()
    return built


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("by_step", [True, False])
def test_counts_and_step_means_are_polars_bits(seed: int, by_step: bool) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(5, 4000))
    gaps = rng.integers(0 if by_step and seed % 2 else 1, 12, size)  # 0: a repeated step
    steps = np.cumsum(gaps).astype(np.int64)
    values = rng.normal(3.0, 1.0, size)
    values[rng.random(size) < 0.1] = np.nan
    values[rng.random(size) < 0.02] = np.inf
    span = int(rng.choice([1, 3, 10, 100]))
    first = int(rng.integers(0, size))
    expected = _polars_windows(steps, values, span, by_step)
    x = (steps - steps[0]).astype(np.float64)
    got = window_counts(steps, np.isfinite(values), NAMES, (span, by_step), first, x)
    for name in NAMES:
        want = expected[name][first:]
        assert got[name].tobytes() == want.tobytes(), name


def test_extremes_from_rows_are_polars_rolling_ones() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=500)
    values[rng.random(500) < 0.05] = np.nan
    values[7] = np.inf
    rows = np.arange(500)
    for points in (2, 5, 7):
        finite = pl.Series(values).fill_nan(None).replace(np.inf, None)
        for name, reduce in (("rolling_max", np.max), ("rolling_min", np.min)):
            rolled = getattr(finite, name)(points, min_samples=points).fill_null(np.nan)
            want = np.concatenate([rolled.to_numpy()[points - 1 :], np.full(points - 1, np.nan)])
            got = _extreme_from(values, rows, points, reduce)
            assert np.array_equal(got, want, equal_nan=True)
