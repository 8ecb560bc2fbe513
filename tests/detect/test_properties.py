"""The vectorised window, spike and trend statistics equal plain per-row loops.

Each oracle here is written from the docstrings and the spec (Q2.1, Q4.1), not
from the implementation: a loop over rows that recomputes the statistic the
slow, obvious way. Hypothesis draws step grids with random gaps (dense, every
10, HF-style sparse), values with NaN and +-Inf, and window lengths.
"""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.detect import windows
from stabilitycli.detect.trend import (
    bin_medians,
    mann_kendall_windows,
    suffix_min_after,
    window_means,
)
from stabilitycli.detect.windows import median_interval, trailing_stats, value_at_or_before

# --- strategies ------------------------------------------------------------------------

NON_FINITE = (math.nan, math.inf, -math.inf)


@st.composite
def step_grids(draw, min_size: int = 1, max_size: int = 120) -> np.ndarray:
    """Strictly increasing int steps: every step, every 10, or irregular gaps."""
    n = draw(st.integers(min_size, max_size))
    start = draw(st.integers(0, 500))
    kind = draw(st.sampled_from(["dense", "every", "irregular"]))
    if kind == "dense":
        gaps = [1] * (n - 1)
    elif kind == "every":
        gaps = [draw(st.sampled_from([5, 10, 25, 500]))] * (n - 1)
    else:
        gaps = draw(st.lists(st.integers(1, 40), min_size=n - 1, max_size=n - 1))
    return start + np.concatenate(([0], np.cumsum(gaps, dtype=np.int64))).astype(np.int64)


def values_for(draw, n: int, nonfinite_rate: float) -> np.ndarray:
    """Loss-like floats of mixed scale, some exactly tied, some NaN or +-Inf."""
    level = draw(st.sampled_from([1e-3, 1.0, 3.0, 1e3]))
    finite = st.one_of(
        st.floats(0.0, 10.0, allow_nan=False).map(lambda x: level * x),
        st.sampled_from([level, 2 * level]),  # ties: quantised or constant stretches
    )
    out = []
    for _ in range(n):
        if draw(st.floats(0, 1)) < nonfinite_rate:
            out.append(draw(st.sampled_from(NON_FINITE)))
        else:
            out.append(draw(finite))
    return np.array(out, dtype=np.float64)


@st.composite
def series(draw, max_size: int = 120):
    steps = draw(step_grids(min_size=1, max_size=max_size))
    rate = draw(st.sampled_from([0.0, 0.1, 0.5]))
    return steps, values_for(draw, steps.size, rate)


# --- windows.py ------------------------------------------------------------------------


def naive_median_interval(steps) -> float:
    gaps = sorted(int(b) - int(a) for a, b in itertools.pairwise(steps))
    if not gaps:
        return math.nan
    mid = len(gaps) // 2
    return float(gaps[mid]) if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2


def _sample_stats(xs: list[float], min_for_mean: int) -> tuple[float, float]:
    mean = sum(xs) / len(xs) if len(xs) >= min_for_mean else math.nan
    if len(xs) < 2:
        return mean, math.nan
    m = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def naive_trailing(steps, values, window_steps, min_points, widened_points):
    """Per row: finite values at logged steps in [t - W, t), or the last K rows when sparse.

    Sample std (n - 1). A step window gives a mean from one finite point; the
    widened window, which has no step bound, wants two.
    """
    interval = naive_median_interval(steps)
    per_window = window_steps / interval if interval > 0 else 0.0
    widened = not per_window >= min_points
    mean, std, count = [], [], []
    for i, t in enumerate(steps):
        if widened:
            rows = range(max(0, i - widened_points), i)
        else:
            rows = [j for j in range(len(steps)) if t - window_steps <= steps[j] < t]
        xs = [float(values[j]) for j in rows if math.isfinite(values[j])]
        m, s = _sample_stats(xs, 2 if widened else 1)
        mean.append(m)
        std.append(s)
        count.append(float(len(xs)))
    return np.array(mean), np.array(std), np.array(count), widened


@pytest.mark.slow  # ~2.5 s: 200 hypothesis examples against a per-row loop
@settings(max_examples=200, deadline=None)
@given(
    series(),
    st.integers(1, 300),
    st.integers(1, 12),
    st.integers(2, 25),
    # a long log's windows are computed a chunk of rows at a time, each chunk reaching
    # back for its first window's rows: chunks of a few rows put every kind of window
    # (by rows, by step, widened) across a chunk's edge
    st.one_of(st.just(windows.CHUNK_ROWS), st.integers(1, 40)),
)
def test_trailing_stats_equal_a_per_row_loop(
    data, window_steps, min_points, widened_points, chunk_rows
):
    steps, values = data
    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        got = trailing_stats(steps, values.copy(), window_steps, min_points, widened_points)
    mean, std, count, widened = naive_trailing(
        steps, values, window_steps, min_points, widened_points
    )
    assert got.widened == widened
    np.testing.assert_array_equal(got.count, count)
    scale = max(
        1.0, float(np.nanmax(np.abs(np.where(np.isfinite(values), values, np.nan)), initial=0))
    )
    np.testing.assert_allclose(got.mean, mean, rtol=1e-9, atol=1e-12 * scale, equal_nan=True)
    np.testing.assert_allclose(got.std, std, rtol=1e-6, atol=1e-7 * scale, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(series(max_size=60))
def test_trailing_stats_leave_the_values_untouched(data):
    steps, values = data
    before = values.copy()
    trailing_stats(steps, values, 100, 8, 20)
    np.testing.assert_array_equal(values, before)


@settings(max_examples=150, deadline=None)
@given(step_grids(max_size=60))
def test_median_interval_equals_the_sorted_middle_gap(steps):
    got, want = median_interval(steps), naive_median_interval(steps)
    assert (math.isnan(got) and math.isnan(want)) or got == want


@settings(max_examples=100, deadline=None)
@given(series(max_size=60), st.lists(st.integers(-100, 3000), max_size=30))
def test_value_at_or_before_equals_a_backward_scan(data, at):
    steps, values = data
    at = np.array(at, dtype=np.int64)
    want = []
    for a in at:
        earlier = [j for j in range(steps.size) if steps[j] <= a]
        want.append(values[earlier[-1]] if earlier else math.nan)
    np.testing.assert_array_equal(value_at_or_before(steps, values, at), np.array(want))


# --- spike.py: which points are flagged, and where events begin ------------------------
#
# The flagging (loss above mu + k*sigma of the trailing window, sigma floored)
# is inline in the spike rule, so it is observed through the rule's spike
# onsets: with the materiality bar for a single point set to zero (z >= 0 and
# peak >= 0x baseline) every flagged event becomes a spike finding, and its step
# is the first flagged point of the event (spec Q2.1 resolutions).


def naive_spike_onsets(steps, loss, t: Thresholds) -> list[int]:
    window, k = t.spike_window_steps, t.spike_sigma
    finite_steps = [int(s) for s, v in zip(steps, loss, strict=True) if math.isfinite(v)]
    interval = naive_median_interval(finite_steps)
    sparse = not (interval > 0 and window / interval >= t.min_points_per_window)
    span = finite_steps[-1] - finite_steps[0] if finite_steps else 0
    if sparse:
        too_short = len(finite_steps) <= t.widened_window_points
    else:
        too_short = span <= window or len(finite_steps) <= t.min_points_per_window
    if too_short:
        return []
    mean, std, count, widened = naive_trailing(
        steps, loss, window, t.min_points_per_window, t.widened_window_points
    )
    n = len(steps)
    threshold: list[float] = []
    sigmas: list[float] = []
    for i in range(n):
        floor = t.sigma_floor_frac * abs(mean[i])
        sigma = max(0.0 if math.isnan(std[i]) else std[i], floor)
        if interval > 0 and window / interval < t.stable_std_points:
            # sparse windows take sigma from the successive differences of the points
            # before i, pooled over several windows' worth of points: their sample
            # variance (around their mean, so a steady fall is not counted as noise)
            window_points = t.widened_window_points if widened else round(window / interval)
            pooled = max(t.stable_std_points, window_points * t.noise_level_windows)
            changes = [
                loss[j] - loss[j - 1]
                for j in range(max(1, i - pooled), i)
                if math.isfinite(loss[j]) and math.isfinite(loss[j - 1])
            ]
            if len(changes) >= max(2, pooled // 2):
                mean_change = sum(changes) / len(changes)
                variance = sum((c - mean_change) ** 2 for c in changes) / (len(changes) - 1)
                sigma = max(math.sqrt(variance / 2.0), floor)
        threshold.append(mean[i] + k * sigma)
        sigmas.append(sigma)
    onsets, i = [], 0
    while i < n:
        eligible = (
            count[i] >= t.min_points_per_window
            and steps[i] > steps[0] + (0 if widened else window)
            and math.isfinite(mean[i])
        )
        if eligible and math.isfinite(loss[i]) and loss[i] > threshold[i]:
            onsets.append(int(steps[i]))
            # the event runs on while the loss stays above the onset's frozen bar...
            j = i + 1
            while j < n and not (math.isfinite(loss[j]) and loss[j] <= threshold[i]):
                j += 1
            end = j - 1
            # ...and, one event one finding, until the loss is back at mu + 0.5 sigma: the
            # point itself and (dense logs) the median of it and the next few points
            level = mean[i] + t.recovery_sigma * sigmas[i]
            back = None
            for r in range(i + 1, n):
                ahead = [x for x in loss[r : r + t.recovery_median_points] if not math.isnan(x)]
                smooth = loss[r] if widened else (float(np.median(ahead)) if ahead else math.nan)
                both = max(smooth, loss[r]) if math.isfinite(smooth) else loss[r]
                if math.isfinite(both) and both <= level:
                    back = r
                    break
            if back is not None:
                i = max(end + 1, back)
            else:
                # never back: a new event only once the baseline has moved onto the new level
                until = max(steps[end], steps[i] + window)
                i = next((r for r in range(i + 1, n) if steps[r] > until), n)
        else:
            i += 1
    return onsets


@st.composite
def noisy_losses(draw):
    """A loss level with small noise, rare bumps, NaN/Inf points and rows without a loss."""
    steps = draw(step_grids(min_size=2, max_size=220))
    level = draw(st.sampled_from([0.5, 2.5, 9.0]))
    noise = draw(st.sampled_from([0.0, 0.01, 0.05]))
    out = []
    for _ in range(steps.size):
        kind = draw(st.integers(0, 39))
        if kind == 0:
            out.append(level * draw(st.floats(1.05, 4.0)))
        elif kind == 1:
            out.append(draw(st.sampled_from(NON_FINITE)))
        elif kind == 2:
            out.append(None)  # the logger skipped loss at this row
        else:
            out.append(level * (1 + noise * draw(st.floats(-1.0, 1.0))))
    return steps, out


@pytest.mark.slow  # ~5 s: 80 hypothesis examples against a per-row loop
@settings(max_examples=80, deadline=None)
@given(
    noisy_losses(),
    st.integers(5, 150),
    st.integers(2, 10),
    st.integers(3, 25),
    st.sampled_from([1.0, 2.0, 3.0]),
    st.sampled_from([0.0, 0.01, 0.1]),
    # a long log's windows and thresholds are taken a chunk of rows at a time
    st.sampled_from([windows.CHUNK_ROWS, 1, 7, 50]),
)
def test_spike_onsets_equal_a_per_row_loop(data, window, min_points, widened, k, floor, chunk_rows):
    steps, raw = data
    logged = [(int(s), v) for s, v in zip(steps, raw, strict=True) if v is not None]
    assume(logged)  # a log without one loss value is an input error, not a series
    finite = [v for _, v in logged if math.isfinite(v)]
    # a flat series with no sigma floor puts every point on the knife edge x > mean + 0,
    # where the last bit of a rolling mean decides: not a property of the rule
    assume(floor > 0 or len(set(finite)) > 1)
    t = Thresholds(
        spike_window_steps=window,
        min_points_per_window=min_points,
        widened_window_points=widened,
        spike_sigma=k,
        sigma_floor_frac=floor,
        spike_large_z=0.0,
        spike_large_ratio=0.0,
        # every event is its own finding here: no grouping into recurring-spikes
        recurring_spike_min_count=10**9,
        # the loop below is the trailing mean and std: the baseline that follows the curve
        # (a local level on fast falls, restarts at level changes) and the excess bar widened
        # for correlated noise are held to their own references (test_level, test_noise_memory)
        level_lag_sigma=math.inf,
        level_change_frac=math.inf,
        noise_autocorr_min=math.inf,
    )
    frame = pl.DataFrame({"step": steps, "loss": pl.Series(raw, dtype=pl.Float64)}, strict=False)
    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        result = analyze(frame, t, select=["spike"])
    # findings come ordered by severity first
    got = sorted(f.step for f in result.findings if f.code == "spike")
    s = np.array([p[0] for p in logged], dtype=np.int64)
    v = np.array([p[1] for p in logged], dtype=np.float64)
    assert got == naive_spike_onsets(s, v, t)


# --- trend.py: the Q4.1 scan over every window -----------------------------------------
#
# tests/detect/test_trend.py holds Mann-Kendall to the double loop on untied floats
# and short windows; here: heavy ties (a quantised loss), windows up to the
# 64 bins the divergence rule uses, and the other per-window statistics.


def finite_floats(max_size: int, min_size: int = 1):
    return st.lists(
        st.one_of(
            st.floats(-50, 50, allow_nan=False),
            st.integers(0, 3).map(float),  # ties
        ),
        min_size=min_size,
        max_size=max_size,
    ).map(lambda xs: np.array(xs, dtype=np.float64))


@settings(max_examples=60, deadline=None)
@given(finite_floats(90, min_size=3), st.data())
def test_mann_kendall_with_ties_and_long_windows_equals_the_double_loop(values, data):
    m = data.draw(st.integers(3, min(64, values.size)))
    sd = math.sqrt(m * (m - 1) * (2 * m + 5) / 18.0)
    want = []
    for start in range(values.size - m + 1):
        w = values[start : start + m].tolist()
        s = 0
        for p in range(m):
            for q in range(p + 1, m):
                s += (w[q] > w[p]) - (w[q] < w[p])
        # continuity correction toward zero, no tie correction (the docstring's choice)
        want.append((s - (s > 0) + (s < 0)) / sd)
    np.testing.assert_allclose(mann_kendall_windows(values, m), want, rtol=0, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(step_grids(min_size=1, max_size=150), st.data())
def test_bin_medians_equal_consecutive_chunks(steps, data):
    values = data.draw(
        st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=steps.size, max_size=steps.size)
    )
    values = np.array(values)
    size = data.draw(st.integers(0, 20))
    got = bin_medians(steps, values, size)
    per_bin = max(1, size)
    chunks = [range(i, min(i + per_bin, steps.size)) for i in range(0, steps.size, per_bin)]
    assert got.bin_points == per_bin
    assert got.steps.tolist() == [int(steps[c[0]]) for c in chunks]
    assert got.end_steps.tolist() == [int(steps[c[-1]]) for c in chunks]
    np.testing.assert_allclose(
        got.values, [float(np.median([values[i] for i in c])) for c in chunks], rtol=1e-12
    )


@settings(max_examples=100, deadline=None)
@given(finite_floats(120), st.data())
def test_window_means_and_later_minimum_equal_per_window_loops(values, data):
    m = data.draw(st.integers(1, min(64, values.size)))
    part = data.draw(st.integers(1, m))
    first, last = window_means(values, m, part)
    after = suffix_min_after(values, m)
    n_windows = values.size - m + 1
    want_first = [sum(values[i : i + part]) / part for i in range(n_windows)]
    want_last = [sum(values[i + m - part : i + m]) / part for i in range(n_windows)]
    want_after = [min(values[i + m :], default=math.inf) for i in range(n_windows)]
    np.testing.assert_allclose(first, want_first, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(last, want_last, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(after, want_after)
