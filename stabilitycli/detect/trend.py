"""Mann-Kendall trend statistics over every sliding window of a series, vectorised.

For a window of m points, S = sum over pairs p < q of sign(x[q] - x[p]). For
all windows at once, S is a sum over lags d = 1..m-1 of a window sum of
sign(x[i+d] - x[i]); each lag is one vectorised pass with a cumulative sum,
so the cost is (points) x (window points), linear in the log. Long windows are
first reduced to medians of equal bins (`bin_points`), which keeps the test
tolerant of heavy-tailed noise and the cost bounded.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from stabilitycli.core import threads
from stabilitycli.core.records import dataclass


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
    full_bins = values.size // bin_points
    usable = full_bins * bin_points
    head = values[:usable].reshape(-1, bin_points)
    starts = steps[:usable:bin_points]
    ends = steps[bin_points - 1 : usable : bin_points]
    if usable == values.size:  # starts and ends stay views of `steps`: no copy of them
        return Binned(starts, ends, _row_medians(head, plain), bin_points)
    # the tail that does not fill a bin is kept as a last, shorter bin; each column is
    # filled in place, not appended to (which would hold it twice for a moment)
    medians = np.empty(full_bins + 1)
    _row_medians(head, plain, out=medians[:full_bins])
    medians[-1] = np.median(values[usable:])
    return Binned(
        _with_last(starts, steps[usable]), _with_last(ends, steps[-1]), medians, bin_points
    )


def _with_last(column: np.ndarray, last: np.ndarray) -> np.ndarray:
    """`np.append(column, last)`, written into one new array."""
    out = np.empty(column.size + 1, dtype=np.result_type(column, last))
    out[:-1] = column
    out[-1] = last
    return out


SORT_ROW_POINTS = 64  # rows up to this long: a sort is faster than a partition


def plain_values(values: np.ndarray) -> bool:
    """Finite, and no -0.0: then equal values have equal bits (see `_row_medians`)."""
    return bool(np.isfinite(values).all()) and not bool(np.signbit(values[values == 0]).any())


def _row_medians(
    rows: np.ndarray, plain: bool | None, *, out: np.ndarray | None = None
) -> np.ndarray:
    """np.median along each row, several times faster for rows of finite values.

    np.median partitions each row at both middle positions and at the last one (its
    NaN check), then takes the middle value or np.mean of the two middle ones. Short
    rows are sorted instead; long ones are partitioned at the lower middle only, the
    upper middle being the least value above it. Equal values then have equal bits, so
    which of them lands in the middle does not matter, except for 0.0 and -0.0: rows
    holding a -0.0 keep np.median, and so do rows with NaN or Inf (`plain` False;
    None: asked here). Written into `out` when given.
    """
    if plain is None:
        plain = plain_values(rows)
    # a block of rows at a time: each block's sorted or partitioned copy stays in cache (a
    # third faster than one partition of the whole log) and small (not a second copy of
    # the series); every row's median is its own, so the blocks change no number
    block_rows = max(1, PARTITION_BLOCK_VALUES // rows.shape[1])
    if out is None:
        out = np.empty(rows.shape[0])
    firsts = range(0, rows.shape[0], block_rows)

    def block(first: int) -> np.ndarray:
        return _block_medians(rows[first : first + block_rows], plain)

    # two blocks at once where the pipeline lends a thread (`core.threads`)
    for first, medians in zip(firsts, threads.in_order(block, firsts, workers=2), strict=True):
        out[first : first + block_rows] = medians
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


# windows whose statistics are computed at a time: every per-window temporary then costs a
# chunk (2 MB of float64), not a copy of the whole binned series
CHUNK_WINDOWS = 1 << 18


@dataclass(frozen=True)
class WindowChunk:
    """`window_means` and `suffix_min_after` of the windows start..stop-1."""

    start: int
    stop: int
    first_mean: np.ndarray
    last_mean: np.ndarray
    after_min: np.ndarray


def window_chunks(
    values: np.ndarray, window_points: int, part_points: int
) -> Iterator[WindowChunk]:
    """Each window's first and last part means and the minimum after it, `CHUNK_WINDOWS`
    windows at a time, the same numbers as the whole-series functions.

    The running sum carries from chunk to chunk and the suffix minimum from each chunk
    to the one before it, in the order the whole-series passes add and compare, so every
    number has the same bits."""
    m = int(window_points)
    n_windows = values.size - m + 1
    bounds = list(range(0, max(n_windows, 0), CHUNK_WINDOWS))
    min_carries = _suffix_min_carries(values, m, bounds)
    sum_carry = 0.0
    for start, min_carry in zip(bounds, min_carries, strict=True):
        stop = min(n_windows, start + CHUNK_WINDOWS)
        csum = running_sum_from(values[start : stop + m - 1], start, sum_carry)
        sum_carry = float(csum[stop - start])
        yield WindowChunk(
            start,
            stop,
            _part_means(csum, 0, stop - start, part_points),
            _part_means(csum, m - part_points, stop - start, part_points),
            _suffix_min_with(values[start + m : stop + m - 1], min_carry),
        )


def running_sum_from(piece: np.ndarray, start: int, carry: float) -> np.ndarray:
    """The whole series' `[0] + cumsum` at indices start..start+piece.size, from the sum
    before `start`; the first piece is summed exactly as the whole series is (its first
    value is not added to 0.0, which would turn a -0.0 into 0.0)."""
    if start == 0:
        return np.concatenate(([0.0], np.cumsum(piece)))
    return np.cumsum(np.concatenate(([carry], piece)))


def suffix_sum_from(piece: np.ndarray, last: bool, carry: float) -> np.ndarray:
    """The whole series' `cumsum(values[::-1])[::-1]`, a 0 after it, at the indices of
    `piece` and the one after it, from the sum of everything after `piece` (`carry`); the
    `last` piece is summed exactly as the whole series is (see `running_sum_from`)."""
    if last:
        return np.concatenate((np.cumsum(piece[::-1])[::-1], [0.0]))
    return np.cumsum(np.concatenate(([carry], piece[::-1])))[::-1]


def _part_means(csum: np.ndarray, offset: int, windows: int, part_points: int) -> np.ndarray:
    """Mean of `part_points` values from `offset` into each of `windows` windows."""
    out = (
        csum[offset + part_points : offset + part_points + windows]
        - csum[offset : offset + windows]
    )
    out /= part_points
    return out


def _suffix_min_with(piece: np.ndarray, carry: float) -> np.ndarray:
    """Running minimum from the end of `piece` back to its start, starting from `carry`
    (the minimum of everything after it), with `carry` itself last."""
    reversed_with_carry = np.concatenate(([carry], piece[::-1]))
    return np.minimum.accumulate(reversed_with_carry)[::-1]


def _suffix_min_carries(values: np.ndarray, m: int, bounds: list[int]) -> list[float]:
    """For each chunk (starting windows `bounds`), the minimum of the values after its last
    window's last point: +inf after the series, then carried back chunk by chunk."""
    carries = []
    carry = np.inf
    edges = [*[start + m - 1 for start in bounds[1:]], values.size]
    for low, high in zip(edges[-2::-1], edges[:0:-1], strict=True):  # later chunk first
        carries.append(carry)
        carry = float(_suffix_min_with(values[low:high], carry)[0])
    carries.append(carry)
    return carries[::-1] if bounds else []


def mann_kendall_between(
    values: np.ndarray, window_points: int, start: int, stop: int
) -> np.ndarray:
    """`mann_kendall_windows(values, window_points)[start:stop]` for finite `values`.

    S is an integer sum over each window's own pairs, so the windows of a chunk need
    only the chunk's values and no sum carried in from before it; a value that is not
    finite makes the all-windows path sum NaN across windows, so that path is the
    caller's to take then."""
    m = int(window_points)
    return _z_of_s(
        _mann_kendall_s(values[start : stop + m - 1], m, stop - start).astype(np.float64), m
    )
