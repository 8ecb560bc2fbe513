"""Rolling statistics taken at chosen rows only give, bit for bit, what the whole series gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli import read
from stabilitycli.detect.series import build_view
from stabilitycli.detect.windows import rolling_median_at

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def whole_rolling_median(values: np.ndarray, window_points: int, min_samples: int) -> np.ndarray:
    series = pl.Series(values, dtype=pl.Float64).shift(1)
    medians = series.rolling_median(window_points, min_samples=min_samples)
    return medians.fill_null(np.nan).to_numpy()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


values_strategy = st.lists(
    st.one_of(
        st.floats(-1e6, 1e6, allow_nan=False),
        st.sampled_from([0.0, 1.0, 2.0, np.nan, np.inf, -np.inf]),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(values_strategy, st.integers(4, 12), st.integers(1, 4), st.data())
def test_median_at_rows_is_the_whole_series_median(values, window_points, min_samples, data):
    x = np.array(values, dtype=np.float64)
    chosen = data.draw(st.lists(st.integers(0, x.size - 1), max_size=8, unique=True))
    rows = np.array(sorted(chosen), dtype=np.int64)
    expected = whole_rolling_median(x, window_points, min_samples)[rows]
    assert same_bits(rolling_median_at(x, window_points, min_samples, rows), expected)


def test_median_at_rows_on_a_fixture_lr() -> None:
    view = build_view(read(FIXTURES / "rules" / "lr-jump" / "fires" / "run.jsonl"))
    _, lr = view.finite_points("lr")
    change = np.abs(np.diff(lr) / lr[:-1])
    rows = np.flatnonzero(change > np.quantile(change, 0.95))
    assert 0 < rows.size * 10 < change.size  # the rows-only path, not the whole series
    expected = whole_rolling_median(change, 10, 3)[rows]
    assert same_bits(rolling_median_at(change, 10, 3, rows), expected)
