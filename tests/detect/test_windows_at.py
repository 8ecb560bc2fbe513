"""Rolling statistics taken at chosen rows only give, bit for bit, what the whole series gives."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli import read
from stabilitycli.detect import windows
from stabilitycli.detect.series import build_view
from stabilitycli.detect.spike_causes import lead_max
from stabilitycli.detect.windows import (
    ForwardMedian,
    median_interval,
    rolling_median_at,
    rows_left_open,
    trailing_median_at,
    trailing_median_bound,
    trailing_stats,
    value_at_or_before,
    value_window_before,
    window_max_at,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def whole_rolling_median(values: np.ndarray, window_points: int, min_samples: int) -> np.ndarray:
    series = pl.Series(values, dtype=pl.Float64).shift(1)
    medians = series.rolling_median(window_points, min_samples=min_samples)
    return medians.fill_null(np.nan).to_numpy()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def same_median(a: np.ndarray, b: np.ndarray) -> bool:
    """`same_bits`, but a zero median's sign is free: polars' rolling median keeps each
    window sorted from the one before, so which of a window's equal zeros (0.0 and -0.0)
    sits in the middle depends on the windows before it, not on the window."""
    return same_bits(np.asarray(a) + 0.0, np.asarray(b) + 0.0)


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
    assert same_median(rolling_median_at(x, window_points, min_samples, rows), expected)


def test_a_zero_median_may_take_either_sign_but_not_another_value() -> None:
    """Found by hypothesis in CI: at row 18 the window holds 1, 1, -0.0, 0.0, 0.0 and zeros;
    polars' whole-series kernel puts 0.0 in the middle, the window alone -0.0."""
    x = np.array([0.0] * 14 + [1.0, 1.0, -0.0, 0.0, 0.0])
    rows = np.array([0, 18])
    got = rolling_median_at(x, 7, 1, rows)
    want = whole_rolling_median(x, 7, 1)[rows]
    assert same_median(got, want)
    assert np.isnan(got[0]) and got[1] == 0.0


def test_median_at_rows_on_a_fixture_lr() -> None:
    view = build_view(read(FIXTURES / "rules" / "lr-jump" / "fires" / "run.jsonl"))
    _, lr = view.finite_points("lr")
    change = np.abs(np.diff(lr) / lr[:-1])
    rows = np.flatnonzero(change > np.quantile(change, 0.95))
    assert 0 < rows.size * 10 < change.size  # the rows-only path, not the whole series
    expected = whole_rolling_median(change, 10, 3)[rows]
    assert same_median(rolling_median_at(change, 10, 3, rows), expected)


def whole_trailing_median(steps: np.ndarray, values: np.ndarray, window_steps: int) -> np.ndarray:
    frame = pl.DataFrame({"step": steps, "v": values})
    median = pl.col("v").rolling_median_by("step", window_size=f"{window_steps}i", closed="left")
    return frame.select(median)["v"].fill_null(np.nan).to_numpy()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(-3, 3)), min_size=1, max_size=400),
    st.sampled_from([7, 20, 50, 100]),
    st.data(),
)
def test_trailing_median_at_rows_and_its_bounds(points, window_steps, data):
    steps = np.cumsum([gap for gap, _ in points]).astype(np.int64)
    values = np.array([level for _, level in points], dtype=np.float64)
    whole = whole_trailing_median(steps, values, window_steps)
    lower = trailing_median_bound(steps, values, window_steps, "lower")
    upper = trailing_median_bound(steps, values, window_steps, "upper")
    has = ~np.isnan(whole)
    assert np.all((lower[has] <= whole[has]) & (whole[has] <= upper[has]))
    chosen = data.draw(st.lists(st.integers(0, steps.size - 1), max_size=6, unique=True))
    rows = np.array(sorted(chosen), dtype=np.int64)
    assert same_median(trailing_median_at(steps, values, window_steps, rows), whole[rows])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.floats(-5, 5)), min_size=2, max_size=300),
    st.sampled_from([20, 50, 100]),
    st.sampled_from([1, 3, 8, 64]),
    st.sampled_from(["lower", "upper"]),
)
def test_open_rows_taken_a_chunk_at_a_time_are_those_of_the_whole_bound(
    points, window_steps, chunk_rows, side
):
    steps = np.cumsum([gap for gap, _ in points]).astype(np.int64)
    values = np.array([level for _, level in points], dtype=np.float64)
    whole = trailing_median_bound(steps, values, window_steps, side)

    def settled(v: np.ndarray, bound: np.ndarray) -> np.ndarray:
        return v > 0.5 * bound

    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        chunked = trailing_median_bound(steps, values, window_steps, side)
        rows = rows_left_open(steps, values, window_steps, side, settled)
    assert same_bits(chunked, whole)
    assert np.array_equal(rows, np.flatnonzero(~settled(values, whole)))


def test_trailing_median_on_a_fixture_grad_norm() -> None:
    view = build_view(read(FIXTURES / "rules" / "grad-norm-spike" / "fires" / "run.jsonl"))
    steps, grad = view.finite_points("grad_norm")
    whole = whole_trailing_median(steps, grad, 100)
    lower = trailing_median_bound(steps, grad, 100, "lower")
    upper = trailing_median_bound(steps, grad, 100, "upper")
    bounded = np.isfinite(lower) & np.isfinite(upper)
    assert bounded.mean() > 0.5  # the bounds hold for most rows of a dense log...
    assert np.all((lower[bounded] <= whole[bounded]) & (whole[bounded] <= upper[bounded]))
    rows = np.flatnonzero(grad > 3 * lower)  # ...and leave few rows open
    assert 0 < rows.size < steps.size // 4
    assert same_median(trailing_median_at(steps, grad, 100, rows), whole[rows])


@settings(max_examples=100, deadline=None)
@given(values_strategy, st.sampled_from([0, 3, 50]), st.data())
def test_lead_max_at_rows_is_the_rolling_max(values, lead_steps, data):
    x = np.array(values, dtype=np.float64)
    steps = np.cumsum(data.draw(st.lists(st.integers(1, 4), min_size=x.size, max_size=x.size)))
    steps = steps.astype(np.int64)
    chosen = data.draw(st.lists(st.integers(0, x.size - 1), max_size=4, unique=True))
    rows = np.array(sorted(chosen), dtype=np.int64)
    frame = pl.DataFrame({"step": steps, "v": np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)})
    window = pl.col("v").rolling_max_by("step", f"{lead_steps + 1}i", closed="right")
    expected = frame.select(window)["v"].to_numpy()[rows]
    assert np.array_equal(lead_max(steps, x, lead_steps, rows), expected)


@settings(max_examples=100, deadline=None)
@given(values_strategy, st.integers(0, 40), st.sampled_from([0, 1, 3, 50, 500]), st.data())
def test_window_before_and_window_max_at_rows(values, first_step, window_steps, data):
    x = np.array(values, dtype=np.float64)
    dense = data.draw(st.booleans())  # every step logged, or some skipped
    gaps = [1] * x.size if dense else data.draw(st.lists(st.integers(1, 4), min_size=x.size))
    steps = (first_step + np.cumsum(gaps[: x.size]) - 1).astype(np.int64)
    expected = value_at_or_before(steps, x, steps - window_steps)
    assert same_bits(value_window_before(steps, x, window_steps), expected)
    if window_steps < 1:
        return
    chosen = data.draw(st.lists(st.integers(0, x.size - 1), max_size=4, unique=True))
    rows = np.array(sorted(chosen), dtype=np.int64)
    frame = pl.DataFrame({"step": steps, "v": x})
    window = pl.col("v").rolling_max_by("step", f"{window_steps}i", closed="right")
    whole = frame.select(window)["v"].to_numpy()[rows]
    assert np.array_equal(window_max_at(steps, x, window_steps, rows), whole, equal_nan=True)


def test_window_before_on_a_fixture_lr() -> None:
    view = build_view(read(FIXTURES / "rules" / "lr-increasing" / "fires" / "run.jsonl"))
    steps, lr = view.finite_points("lr")
    expected = value_at_or_before(steps, lr, steps - 200)
    assert same_bits(value_window_before(steps, lr, 200), expected)
    rows = np.flatnonzero(lr > expected * 1.1)[-5:]  # a few of the windows that rose
    step_rise = np.concatenate(([0.0], np.maximum(np.diff(lr), 0.0)))
    frame = pl.DataFrame({"step": steps, "v": step_rise})
    window = pl.col("v").rolling_max_by("step", "200i", closed="right")
    assert 0 < rows.size * 200 < steps.size  # the rows-only path
    assert same_bits(
        window_max_at(steps, step_rise, 200, rows), frame.select(window)["v"].to_numpy()[rows]
    )


def test_forward_median_slices_are_the_whole_series_median() -> None:
    loss = build_view(read(FIXTURES / "rules" / "spike" / "fires" / "run.jsonl")).points("loss")[1]
    with_nan = np.array(loss, dtype=np.float64)
    with_nan[[3, 50, 51, with_nan.size - 2]] = np.nan  # the null-aware kernel, and the end
    for values in (np.asarray(loss, dtype=np.float64), with_nan):
        for points in (2, 5):
            backwards = pl.Series(values[::-1]).fill_nan(None)
            whole = backwards.rolling_median(points, min_samples=1).fill_null(np.nan).to_numpy()
            whole = whole[::-1]
            forward = ForwardMedian.of(values, points)
            for lo, hi in ((0, 7), (45, 300), (values.size - 3, values.size + 9)):
                assert same_median(forward.slice(lo, hi), whole[lo:hi])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 5), min_size=1, max_size=60), st.booleans())
def test_median_interval_is_the_median_gap(gaps, as_float):
    steps = np.cumsum([0, *gaps])
    steps = steps.astype(np.float64) if as_float else steps.astype(np.int64)
    assert same_bits(np.array([median_interval(steps)]), np.array([np.median(np.diff(steps))]))


def test_median_interval_of_a_dense_fixture_log() -> None:
    steps = build_view(read(FIXTURES / "rules" / "spike" / "fires" / "run.jsonl")).steps
    assert median_interval(steps) == float(np.median(np.diff(steps))) == 1.0


def by_step_window(steps: np.ndarray, values: np.ndarray, window_steps: int) -> dict:
    """Trailing mean, std and count over [t - window_steps, t) with polars' windows by step."""
    frame = pl.DataFrame({"step": steps, "v": values}).with_columns(
        pl.when(pl.col("v").is_finite()).then(pl.col("v")).alias("v")
    )
    window = f"{window_steps}i"
    out = frame.select(
        pl.col("v").rolling_mean_by("step", window_size=window, closed="left").alias("mean"),
        pl.col("v").rolling_std_by("step", window_size=window, closed="left").alias("std"),
        pl.col("v")
        .is_not_null()
        .cast(pl.Float64)
        .rolling_sum_by("step", window_size=window, closed="left")
        .alias("count"),
    )
    return {
        "mean": out["mean"].fill_null(np.nan).to_numpy(),
        "std": out["std"].fill_null(np.nan).to_numpy(),
        "count": out["count"].fill_null(0).to_numpy(),
    }


@settings(max_examples=200, deadline=None)
@given(values_strategy, st.integers(1, 40), st.integers(0, 10**6))
def test_trailing_stats_when_every_step_is_logged_are_the_by_step_window(
    values, window_steps, first_step
):
    """Every step logged, the window is a fixed number of rows, taken by the faster path."""
    if len(values) < 2:
        return  # one point has no interval: the window is widened on either path
    steps = np.arange(first_step, first_step + len(values), dtype=np.int64)
    series = np.array(values, dtype=np.float64)
    got = trailing_stats(steps, series, window_steps, 1, 20)
    assert not got.widened
    want = by_step_window(steps, series, window_steps)
    for name in ("mean", "std", "count"):
        assert same_bits(getattr(got, name), want[name]), name


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from((1, 1, 2, 3, 10, 10, 500)), min_size=0, max_size=80),
    st.integers(1, 9),
    st.sampled_from((np.int64, np.uint64)),
    st.integers(1, 3),
)
def test_median_interval_from_gap_counts(gaps, chunk_rows, dtype, max_distinct) -> None:
    steps = np.concatenate(([5], 5 + np.cumsum(gaps, dtype=np.int64))).astype(dtype)
    with (
        mock.patch.object(windows, "CHUNK_ROWS", chunk_rows),
        mock.patch.object(windows, "MAX_DISTINCT_GAPS", max_distinct),
    ):
        got = median_interval(steps)
    want = np.median(np.diff(steps)) if steps.size >= 2 else np.nan
    assert same_bits(np.float64(got), np.float64(want))


def test_median_interval_of_float_and_unordered_steps_is_the_whole_log_median() -> None:
    for steps in (np.array([0.0, 0.5, 2.0, 2.25]), np.array([4, 2, 9, 1, 1], dtype=np.int64)):
        with mock.patch.object(windows, "CHUNK_ROWS", 2):
            got = median_interval(steps)
        assert same_bits(np.float64(got), np.float64(np.median(np.diff(steps))))


@settings(max_examples=100, deadline=None)
@given(
    values_strategy,
    st.sampled_from([1, 2, 5]),
    st.sampled_from([(6, 2), (40, 2), (40, 30)]),
    st.sampled_from([1, 3, 16, 1 << 20]),
    st.data(),
)
def test_a_trailing_mean_at_rows_is_the_whole_trailing_mean(
    values, step_gap, window_and_points, chunk_rows, data
):
    """Read at any rows, in any order and more than once, `TrailingAt` gives each row the
    number the whole series gives it, in every plan (rows, steps, widened)."""
    x = np.array(values, dtype=np.float64)
    steps = np.arange(x.size, dtype=np.int64) * step_gap
    window_steps, min_points = window_and_points
    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        whole = trailing_stats(steps, x, window_steps, min_points, 4).mean
        plan = windows.plan_window(steps, window_steps, min_points, 4)
        at = windows.TrailingAt(steps, x, window_steps, plan, "mean")
        rows = np.array(data.draw(st.lists(st.integers(0, x.size - 1), max_size=20)), dtype=int)
        assert same_bits(at[rows], whole[rows])
        assert same_bits(at[:], whole)
        assert same_bits(at[rows[::-1]], whole[rows[::-1]])
