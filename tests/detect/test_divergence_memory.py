"""The divergence scan taken a chunk of windows (and rows) at a time gives the numbers of
the whole-array computation, bit for bit, NaN and +-Inf included (issue 15).

Each test shrinks the chunk so that a short series spans many chunks, and compares
against the whole-series functions (or the whole-array scan written out here as it
was before the chunks).
"""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.detect import divergence, divergence_decay, divergence_ramp, trend, windows
from stabilitycli.detect.autocorr import INDEPENDENT
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.spike import SpikeEvent

# bin medians of every kind: ties, signed zeros, NaN and both infinities
LEVELS = (0.0, -0.0, 1.0, 1.0, 2.5, 1e-3, 3.25, 1e308, math.nan, math.inf, -math.inf)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and equal bits (a NaN equals the same NaN, 0.0 is not -0.0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def chunked(windows: int):
    """`CHUNK_WINDOWS` shrunk to `windows`, where trend and divergence read it."""
    return mock.patch.multiple(trend, CHUNK_WINDOWS=windows), mock.patch.multiple(
        divergence, CHUNK_WINDOWS=windows
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(LEVELS) | st.floats(-10, 10), min_size=1, max_size=60),
    st.integers(3, 12),
    st.integers(1, 7),
)
def test_window_chunks_are_the_whole_series_statistics(levels, m, chunk_windows) -> None:
    values = np.array(levels, dtype=np.float64)
    part = max(1, m // 4)
    with np.errstate(all="ignore"), mock.patch.object(trend, "CHUNK_WINDOWS", chunk_windows):
        chunks = list(trend.window_chunks(values, m, part))
        first, last = trend.window_means(values, m, part)
        after = trend.suffix_min_after(values, m) if values.size >= m else np.zeros(0)
    if values.size < m:
        assert chunks == []
        return
    assert [c.start for c in chunks] == list(range(0, values.size - m + 1, chunk_windows))
    assert same_bits(np.concatenate([c.first_mean for c in chunks]), first)
    assert same_bits(np.concatenate([c.last_mean for c in chunks]), last)
    assert same_bits(np.concatenate([c.after_min for c in chunks]), after)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from((0.0, 1.0, 2.0, 2.0, -3.5, 1e308)), min_size=3, max_size=60),
    st.integers(3, 12),
    st.integers(1, 7),
)
def test_mann_kendall_between_chunk_edges_is_the_all_windows_z(levels, m, chunk_windows) -> None:
    values = np.array(levels, dtype=np.float64)
    n_windows = values.size - m + 1
    if n_windows <= 0:
        return
    every = trend.mann_kendall_windows(values, m)
    pieces = [
        trend.mann_kendall_between(values, m, start, min(n_windows, start + chunk_windows))
        for start in range(0, n_windows, chunk_windows)
    ]
    assert same_bits(np.concatenate(pieces), every)


def whole_array_scan(
    steps: np.ndarray, loss: np.ndarray, window_points: int, z_bar: float, spikes: list
) -> dict:
    """The primary scan as it was before the chunks: every column over every window."""
    thresholds = Thresholds()
    bin_points = max(1, math.ceil(window_points / thresholds.trend_points))
    binned = trend.bin_medians(steps, loss, bin_points)
    m = max(3, round(window_points / bin_points))
    part = max(1, m // 4)
    first_mean, last_mean = trend.window_means(binned.values, m, part)
    after_min = trend.suffix_min_after(binned.values, m)
    never_back = after_min > first_mean
    rising = last_mean > first_mean
    for spike in spikes:
        rising &= ~(
            (binned.steps[: rising.size] <= spike.onset_step)
            & (binned.end_steps[m - 1 :] >= spike.onset_step - 2.0)
        )
    z = trend.mann_kendall_windows(binned.values, m)
    rising &= z >= z_bar
    # a window is judged only with divergence_after_frac of a window's bins after it
    after_bins = math.ceil(thresholds.divergence_after_frac * m)
    judged = binned.values.size - (np.arange(rising.size) + m) >= after_bins
    judged |= z >= thresholds.divergence_end_z
    return {
        "z": z,
        "first": first_mean,
        "last": last_mean,
        "after": after_min,
        "undone": np.flatnonzero(rising & ~never_back),
        "diverging": np.flatnonzero(rising & judged & never_back),
    }


def a_spike(onset_step: int) -> SpikeEvent:
    return SpikeEvent(
        onset_step, onset_step + 2, onset_step, 3, 1.0, 0.1, 1.5, 2.0, 9.0, True, 0, 0, 1, True
    )


def noisy_loss(seed: int, points: int, nonfinite: bool) -> np.ndarray:
    """A falling loss with rises, some undone, some not, and (if asked) NaN and +-Inf."""
    rng = np.random.default_rng(seed)
    x = np.arange(points, dtype=np.float64)
    loss = 2.0 + np.exp(-x / 200) + 0.3 * np.sin(x / 37) + 0.05 * rng.standard_normal(points)
    loss[points // 2 :] += np.linspace(0, 1.5, points - points // 2)
    loss[rng.integers(0, points, 20)] = rng.choice([0.0, -0.0, 2.0], 20)
    if nonfinite:
        # near the end: a NaN makes every later window's running sum NaN, and the windows
        # before it are still to be tested
        at = rng.integers(points - points // 10, points, 6)
        loss[at] = rng.choice([math.nan, math.inf, -math.inf], 6)
    return loss


def test_chunked_scan_keeps_the_whole_array_numbers_at_every_rising_window() -> None:
    thresholds = Thresholds()
    for seed, nonfinite, window_points in [(1, False, 40), (2, True, 40), (3, False, 200)]:
        steps = np.arange(3000, dtype=np.int64)
        loss = noisy_loss(seed, steps.size, nonfinite)
        facts = Facts(spikes=[a_spike(700), a_spike(2200)])
        with np.errstate(all="ignore"):
            want = whole_array_scan(steps, loss, window_points, 1.0, facts.spikes)
            patch_trend, patch_divergence = chunked(7)
            with patch_trend, patch_divergence:
                known = (1.0, trend.plain_values(loss), INDEPENDENT, False)
                got = divergence._scan(steps, loss, known, window_points, 1.0, thresholds, facts)
        assert got is not None
        rose = np.concatenate([want["undone"], want["diverging"]])
        assert rose.size  # the series rises somewhere: the kept columns are read
        assert np.array_equal(got.undone, want["undone"])
        assert np.array_equal(got.diverging, want["diverging"])
        assert got.windows == want["z"].size
        assert same_bits(got.max_z, want["z"].max())
        for name, kept in [
            ("z", got.z),
            ("first", got.first_mean),
            ("last", got.last_mean),
            ("after", got.after_min),
        ]:
            assert same_bits(kept[rose], want[name][rose]), (seed, name)


def test_slow_rise_windows_are_those_of_the_whole_array_z() -> None:
    """Both ways of the slow scan's z (few windows: their own pairs; many: every window,
    a chunk at a time) give the windows the whole-array z gives."""
    thresholds = Thresholds()
    steps = np.arange(4000, dtype=np.int64)
    loss = noisy_loss(4, steps.size, False)
    for chunk_windows in (5, trend.CHUNK_WINDOWS):
        patch_trend, patch_divergence = chunked(chunk_windows)
        with patch_trend, patch_divergence:
            got = divergence._scan(
                steps,
                loss,
                (1.0, True, INDEPENDENT, False),
                400,
                0.5,
                thresholds,
                Facts(),
                every_window=False,
            )
        want = whole_array_scan(steps, loss, 400, 0.5, [])
        assert got is not None
        assert np.array_equal(got.diverging, want["diverging"])
        assert got.undone.size == 0
        assert same_bits(got.z[got.diverging], want["z"][got.diverging])


def test_bin_medians_with_a_short_last_bin_are_the_appended_columns() -> None:
    steps = np.arange(0, 225, 3, dtype=np.int64)  # 75 points: every bin size leaves a tail
    values = noisy_loss(5, steps.size, False)
    for bin_points in (2, 4, 7):
        binned = trend.bin_medians(steps, values, bin_points)
        usable = steps.size // bin_points * bin_points
        rows = values[:usable].reshape(-1, bin_points)
        medians = np.append(np.median(rows, axis=1), np.median(values[usable:]))
        assert same_bits(binned.values, medians)
        assert np.array_equal(binned.steps, np.append(steps[:usable:bin_points], steps[usable]))
        ends = np.append(steps[bin_points - 1 : usable : bin_points], steps[-1])
        assert np.array_equal(binned.end_steps, ends)
        assert binned.steps.dtype == steps.dtype


DIVERGENCE_CODES = {"divergence", "plateau", "loss-rise", "grad-norm-rising"}


def findings_of(frame: pl.DataFrame) -> list[str]:
    """The divergence rule's findings, every number in full (repr)."""
    return [repr(f) for f in analyze(frame).findings if f.code in DIVERGENCE_CODES]


@pytest.mark.slow  # ~3 s: two 6000-point runs analysed whole and in tiny chunks
def test_the_rule_says_the_same_with_a_chunk_of_five_windows() -> None:
    """A divergence, undone rises before it and a slow ramp: the same findings, to the bit."""
    steps = np.arange(0, 60000, 10, dtype=np.int64)
    rising = noisy_loss(6, steps.size, False)
    x = np.arange(steps.size, dtype=np.float64)
    slow = 3.0 + 0.02 * np.sin(x / 3) + 0.3 * np.clip(x - 3000, 0, None) / steps.size
    for loss in (rising, slow):
        frame = pl.DataFrame({"step": steps, "loss": loss})
        whole = findings_of(frame)
        patch_trend, patch_divergence = chunked(5)
        with (
            patch_trend,
            patch_divergence,
            mock.patch.object(windows, "CHUNK_ROWS", 7),
            mock.patch.object(divergence_ramp, "RAMP_CHUNK_ROWS", 11),
        ):
            assert findings_of(frame) == whole
        assert whole  # each run has something to say


# --- the ramp fit of a long rise: its columns made and summed a chunk of rows at a time ---


def whole_sums(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`[0] + cumsum` and the cumsum from the end with a 0 after it, as the fit took them."""
    prefix = np.concatenate(([0.0], np.cumsum(column)))
    suffix = np.concatenate((np.cumsum(column[::-1])[::-1], np.zeros(1)))
    return prefix, suffix


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(LEVELS) | st.floats(-10, 10), min_size=1, max_size=50),
    st.integers(1, 9),
    st.lists(st.integers(0, 50), min_size=1, max_size=8),
)
def test_sums_read_at_some_rows_are_the_whole_column_sums(levels, chunk_rows, asked) -> None:
    column = np.array(levels, dtype=np.float64)
    n = column.size
    at = [np.array([k for k in asked if k <= n], dtype=np.int64), np.array([0, n])]
    columns = [column, column * 0.5]

    def rows(lo: int, hi: int) -> list[np.ndarray]:
        return [c[lo:hi] for c in columns]

    with (
        np.errstate(all="ignore"),
        mock.patch.object(divergence_ramp, "RAMP_CHUNK_ROWS", chunk_rows),
    ):
        before = divergence_ramp.sums_at(rows, n, at, from_end=False)
        after = divergence_ramp.sums_at(rows, n, at, from_end=True)
        wanted = [whole_sums(c) for c in columns]
    for q, k in enumerate(at):
        for c, (prefix, suffix) in enumerate(wanted):
            assert same_bits(before[q][c], prefix[k])
            assert same_bits(after[q][c], suffix[k])


def test_running_median_and_clipping_a_chunk_of_rows_at_a_time() -> None:
    rng = np.random.default_rng(7)
    y = rng.choice([0.0, -0.0, 1.0, 1.0, 2.5, 40.0], 301) + rng.standard_normal(301) * (
        rng.random(301) < 0.5
    )
    whole = divergence_decay.running_median(y)
    for lo, hi in [(0, 1), (0, 7), (1, 9), (150, 151), (295, 301), (299, 301), (0, 301)]:
        assert same_bits(divergence_decay.running_median_rows(y, lo, hi), whole[lo:hi])
    clipped = divergence_ramp.clip_wild(y)
    for chunk_rows in (1, 2, 5, 64):
        with mock.patch.object(divergence_ramp, "RAMP_CHUNK_ROWS", chunk_rows):
            assert same_bits(divergence_ramp.clip_wild(y), clipped)
    # what the clipping was before the chunks: the whole running median, then the clip
    off = y - whole
    spread = 1.4826 * float(np.median(np.abs(off)))
    assert same_bits(clipped, whole + np.clip(off, -4 * spread, 4 * spread))


@pytest.mark.slow  # ~3 s: the ramp fit 9 times, down to one row a chunk
def test_ramp_onset_a_chunk_of_rows_at_a_time() -> None:
    """The ramp fit's start, with and without a decay before it, whatever the chunk."""
    rng = np.random.default_rng(8)
    steps = np.arange(0, 6000, 3, dtype=np.int64)
    x = steps.astype(float)
    loss = 2.0 + 0.5 * np.exp(-x / 900) + 0.4 * np.clip(x - 3300, 0, 1500) / 1500
    loss += 0.02 * rng.standard_normal(steps.size)
    loss[rng.integers(0, steps.size, 9)] += 3.0  # wild points the fit clips
    decay = divergence_decay.Decay(0.0, 900.0, math.inf)
    for shape in (None, decay, divergence_decay.Decay(0.0, 700.0, 1.0)):
        whole = divergence_ramp.ramp_onset(steps, loss, 2400, 4200, shape)
        assert whole is not None and 2400 <= whole < 4200  # a start was found
        for chunk_rows in (1, 7, 100):
            with mock.patch.object(divergence_ramp, "RAMP_CHUNK_ROWS", chunk_rows):
                assert divergence_ramp.ramp_onset(steps, loss, 2400, 4200, shape) == whole


def test_decay_shape_in_place_is_the_formula() -> None:
    x = np.linspace(0.0, 5000.0, 777)
    for power in (*divergence_decay.DECAY_POWERS, -1.0):
        shape = divergence_decay.Decay(10.0, 300.0, power)
        t = (x - 10.0) / 300.0
        want = np.exp(-t) if math.isinf(power) else (1.0 + t) ** -power
        assert same_bits(shape.at(x), want)
