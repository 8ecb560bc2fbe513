"""Mann-Kendall trend statistics over every sliding window of a series, vectorised.

For a window of m points, S = sum over pairs p < q of sign(x[q] - x[p]). For
all windows at once, S is a sum over lags d = 1..m-1 of a window sum of
sign(x[i+d] - x[i]); each lag is one vectorised pass with a cumulative sum,
so the cost is (points) x (window points), linear in the log. Long windows are
first reduced to medians of equal bins (`bin_points`), which keeps the test
tolerant of heavy-tailed noise and the cost bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Binned:
    steps: np.ndarray  # first step of each bin
    end_steps: np.ndarray  # last step of each bin
    values: np.ndarray  # median of each bin
    bin_points: int


def bin_medians(
    steps: np.ndarray, values: np.ndarray, bin_points: int, *, plain: bool | None = None
) -> Binned:
    """Medians of consecutive bins of `bin_points` values; `plain` is `plain_values(values)`
    when the caller knows it (a scan over many bin sizes asks once, not per size)."""
    if bin_points <= 1:
        return Binned(steps, steps, values, 1)
    usable = (values.size // bin_points) * bin_points
    # the tail that does not fill a bin is kept as a last, shorter bin
    head = values[:usable].reshape(-1, bin_points)
    medians = _row_medians(head, plain_values(head) if plain is None else plain)
    starts = steps[:usable:bin_points]
    ends = steps[bin_points - 1 : usable : bin_points]
    if usable < values.size:
        medians = np.append(medians, np.median(values[usable:]))
        starts = np.append(starts, steps[usable])
        ends = np.append(ends, steps[-1])
    return Binned(starts, ends, medians, bin_points)


SORT_ROW_POINTS = 64  # rows up to this long: a sort is faster than a partition


def plain_values(values: np.ndarray) -> bool:
    """Finite, and no -0.0: then equal values have equal bits (see `_row_medians`)."""
    return bool(np.isfinite(values).all()) and not bool(np.signbit(values[values == 0]).any())


def _row_medians(rows: np.ndarray, plain: bool) -> np.ndarray:
    """np.median along each row, several times faster for rows of finite values.

    np.median partitions each row at both middle positions and at the last one (its
    NaN check), then takes the middle value or np.mean of the two middle ones. Short
    rows are sorted instead; long ones are partitioned at the lower middle only, the
    upper middle being the least value above it. Equal values then have equal bits, so
    which of them lands in the middle does not matter, except for 0.0 and -0.0: rows
    holding a -0.0 keep np.median, and so do rows with NaN or Inf (`plain` False).
    """
    # a block of rows at a time: each block's sorted or partitioned copy stays in cache (a
    # third faster than one partition of the whole log) and small (not a second copy of
    # the series); every row's median is its own, so the blocks change no number
    block_rows = max(1, PARTITION_BLOCK_VALUES // rows.shape[1])
    out = np.empty(rows.shape[0])
    for first in range(0, rows.shape[0], block_rows):  # loop over blocks, not rows
        out[first : first + block_rows] = _block_medians(rows[first : first + block_rows], plain)
    return out


def _block_medians(block: np.ndarray, plain: bool) -> np.ndarray:
    width = block.shape[1]
    if not plain:
        return np.median(block, axis=1)
    half = width // 2
    if width <= SORT_ROW_POINTS:
        ordered = np.sort(block, axis=1)
        if width % 2:
            return ordered[:, half]
        return np.mean(ordered[:, half - 1 : half + 1], axis=1)
    if width % 2:
        return np.partition(block, half, axis=1)[:, half]
    parted = np.partition(block, half - 1, axis=1)
    middle = np.stack([parted[:, half - 1], parted[:, half:].min(axis=1)], axis=1)
    return np.mean(middle, axis=1)


PARTITION_BLOCK_VALUES = 1 << 17


def mann_kendall_windows(values: np.ndarray, window_points: int) -> np.ndarray:
    """z statistic of the Mann-Kendall test for every window of `window_points`.

    No tie correction."""
    m = int(window_points)
    n_windows = values.size - m + 1
    if m < 3 or n_windows <= 0:
        return np.zeros(0)
    if not np.isfinite(values).all():
        s = _mann_kendall_s_float(values, m, n_windows)
    else:
        s = _mann_kendall_s(values, m, n_windows).astype(np.float64)
    return _z_of_s(s, m)


def mann_kendall_at(values: np.ndarray, window_points: int, starts: np.ndarray) -> np.ndarray:
    """`mann_kendall_windows(values, window_points)[starts]`, the same numbers, with the
    pairs of those windows alone compared: m * m per window against m per window for all,
    so the cheaper of the two when few windows are asked for."""
    m = int(window_points)
    if not np.isfinite(values).all():
        # the all-windows path sums NaN signs over the whole series: take its numbers
        return mann_kendall_windows(values, m)[starts]
    s = np.zeros(starts.size)
    later_than = np.triu(np.ones((m, m), dtype=bool), k=1)  # pair (p, q) with q after p
    block = max(1, (1 << 20) // (m * m))  # windows at a time: about 1M pair signs in memory
    for first in range(0, starts.size, block):  # loop over blocks of windows, not rows
        at = starts[first : first + block, None] + np.arange(m)
        window = values[at]
        later, earlier = window[:, None, :], window[:, :, None]
        # the integer signs the all-windows path sums
        signs = (later > earlier).view(np.int8) - (later < earlier).view(np.int8)
        s[first : first + block] = (signs * later_than).sum(axis=(1, 2), dtype=np.int64)
    return _z_of_s(s, m)


def _z_of_s(s: np.ndarray, m: int) -> np.ndarray:
    variance = m * (m - 1) * (2 * m + 5) / 18.0
    return (s - np.sign(s)) / np.sqrt(variance)


def _mann_kendall_s(values: np.ndarray, m: int, n_windows: int) -> np.ndarray:
    """S of every window in integers: S of the first window, then S of each next window
    from the one before. Moving one point on, a window loses the pairs that start at its
    first point and gains those that end at its new last one, one of each per lag; so
    each lag costs two comparisons and two adds over the series, and no cumulative sum.
    S is a sum of signs, so these integers are exactly what summing floats gives."""
    first = 0
    change = np.zeros(n_windows - 1, dtype=np.int32)  # |change| <= 2 m: no overflow
    for lag in range(1, m):  # loop over lags (window length), each a pass over all windows
        later, earlier = values[lag:], values[:-lag]
        signs = (later > earlier).view(np.int8) - (later < earlier).view(np.int8)
        first += int(signs[: m - lag].sum())
        change += signs[m - lag : m - lag + n_windows - 1]
        change -= signs[: n_windows - 1]
    return np.concatenate(([first], first + np.cumsum(change, dtype=np.int64)))


def _mann_kendall_s_float(values: np.ndarray, m: int, n_windows: int) -> np.ndarray:
    """S of every window as float sums of np.sign, which a NaN or Inf difference needs."""
    s = np.zeros(n_windows)
    for lag in range(1, m):  # loop over lags (window length), each a pass over all windows
        signs = np.sign(values[lag:] - values[:-lag])
        csum = np.concatenate(([0.0], np.cumsum(signs)))
        count = m - lag
        s += csum[count : count + n_windows] - csum[:n_windows]
    return s


def window_means(
    values: np.ndarray, window_points: int, part_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the first and of the last `part_points` of every window."""
    m = int(window_points)
    n_windows = values.size - m + 1
    csum = np.concatenate(([0.0], np.cumsum(values)))
    starts = np.arange(n_windows)
    first = (csum[starts + part_points] - csum[starts]) / part_points
    last = (csum[starts + m] - csum[starts + m - part_points]) / part_points
    return first, last


def suffix_min_after(values: np.ndarray, window_points: int) -> np.ndarray:
    """For each window, the minimum of all values after it ends (+inf when none)."""
    rev_min = np.minimum.accumulate(values[::-1])[::-1]
    rev_min = np.append(rev_min, np.inf)
    n_windows = values.size - window_points + 1
    return rev_min[np.arange(n_windows) + window_points]
