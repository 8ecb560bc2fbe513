"""The fast paths of the trend scan give np.median's and the float sum's numbers, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli import read
from stabilitycli.detect import trend
from stabilitycli.detect.series import build_view
from stabilitycli.detect.trend import (
    _mann_kendall_s,
    _mann_kendall_s_float,
    _row_medians,
    mann_kendall_at,
    mann_kendall_windows,
    plain_values,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def fixture_loss() -> np.ndarray:
    _, loss = build_view(read(FIXTURES / "rules" / "divergence" / "fires" / "run.jsonl")).points(
        "loss"
    )
    return np.asarray(loss, dtype=np.float64)


def test_row_medians_are_np_median_on_a_fixture_loss() -> None:
    loss = fixture_loss()
    for width in (2, 3, 4, 7, 64, 65, 100, 257):
        rows = loss[: loss.size // width * width].reshape(-1, width)
        assert same_bits(_row_medians(rows, plain_values(rows)), np.median(rows, axis=1))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.5, 2.5, 1e308, -1e308]), min_size=2, max_size=80),
    st.integers(1, 8),
)
def test_row_medians_keep_np_median_ties_and_signed_zeros(values, rows_count):
    width = max(1, len(values) // rows_count)
    rows = np.array(values[: rows_count * width], dtype=np.float64).reshape(-1, width)
    with np.errstate(over="ignore"):  # the mean of two middle 1e308s is inf either way
        assert same_bits(_row_medians(rows, plain_values(rows)), np.median(rows, axis=1))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=3, max_size=120), st.integers(3, 40))
def test_integer_mann_kendall_s_is_the_float_sum(levels, m):
    values = np.array(levels, dtype=np.float64)
    n_windows = values.size - m + 1
    if n_windows <= 0:
        return
    exact = _mann_kendall_s(values, m, n_windows).astype(np.float64)
    assert same_bits(exact, _mann_kendall_s_float(values, m, n_windows))


def test_integer_mann_kendall_s_on_a_fixture_loss() -> None:
    loss = fixture_loss()
    for m in (3, 20, 64):
        n_windows = loss.size - m + 1
        exact = _mann_kendall_s(loss, m, n_windows).astype(np.float64)
        assert same_bits(exact, _mann_kendall_s_float(loss, m, n_windows))


def test_row_medians_taken_in_blocks_are_np_median(monkeypatch) -> None:
    """Rows are sorted or partitioned a block of rows at a time, whatever their values; the
    blocks' edges change nothing."""
    rng = np.random.default_rng(26)
    monkeypatch.setattr(trend, "PARTITION_BLOCK_VALUES", 500)
    for width in (2, 5, 6, 64, 65, 66, 130, 257):
        rows = np.round(rng.normal(size=(37, width)), 1)  # ties across rows and blocks
        rows[3, 0] = -0.0
        rows[30, -1] = np.nan if width % 2 else np.inf  # not plain: np.median's own path
        for block in (rows, rows[:3]):
            plain = plain_values(block)
            assert same_bits(_row_medians(block, plain), np.median(block, axis=1))


def test_row_medians_on_two_threads_are_np_median(monkeypatch) -> None:
    """Issue 40: with a thread lent, two blocks of rows at once; every median still lands
    in its own row with np.median's bits."""
    from stabilitycli.core import threads

    rng = np.random.default_rng(40)
    monkeypatch.setattr(trend, "PARTITION_BLOCK_VALUES", 500)
    with threads.lending(2):
        for width in (6, 65, 130):
            rows = np.round(rng.normal(size=(301, width)), 1)
            rows[7, 0] = -0.0
            for plain in (plain_values(rows), False):
                assert same_bits(_row_medians(rows, plain), np.median(rows, axis=1))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(-3, 3), min_size=3, max_size=150),
    st.integers(3, 40),
    st.data(),
)
def test_mann_kendall_at_some_windows_is_the_all_windows_z(levels, m, data):
    values = np.array(levels, dtype=np.float64)
    every = mann_kendall_windows(values, m)
    if every.size == 0:
        return
    starts = np.array(
        sorted(data.draw(st.sets(st.integers(0, every.size - 1), min_size=1))), dtype=np.int64
    )
    assert same_bits(mann_kendall_at(values, m, starts), every[starts])


def test_mann_kendall_at_takes_the_all_windows_numbers_when_a_value_is_not_finite() -> None:
    values = np.array([1.0, 2.0, np.nan, 3.0, 1.0, 4.0, np.inf, 2.0, 5.0, 6.0])
    starts = np.array([0, 3, 5])
    got, want = mann_kendall_at(values, 4, starts), mann_kendall_windows(values, 4)[starts]
    assert np.array_equal(got, want, equal_nan=True)
