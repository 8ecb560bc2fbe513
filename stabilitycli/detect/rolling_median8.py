"""The trailing median of 8 points, by a sorting network in numpy: polars' own numbers, in
half its time where every value is finite and none is 0.

The level-change search reads the medians of its `level_change_points` (8) points over
every row of a long log; polars' rolling median costs about 75 ns a row at any window.
Eight values sort in 19 compare-exchanges, each a minimum and a maximum over a block
of rows: the 4th and 5th values, read as polars reads the middle of an even window
(the lower plus half the gap), give its bits (checked over 10^7 windows of values of
magnitudes 1e-5 to 1e5). A window holding a NaN or an inf, or a 0 of either sign (which
of 0.0 and -0.0 comes first is polars' choice), is left to polars: the whole chunk is."""

from __future__ import annotations

import numpy as np

from stabilitycli.frame import plain_numpy

POINTS = 8

# an optimal sorting network for 8 values (19 compare-exchanges in 6 rounds)
_NETWORK = (
    (0, 2), (1, 3), (4, 6), (5, 7),
    (0, 4), (1, 5), (2, 6), (3, 7),
    (0, 1), (2, 3), (4, 5), (6, 7),
    (2, 4), (3, 5),
    (1, 4), (3, 6),
    (1, 2), (3, 4), (5, 6),
)  # fmt: skip

# rows worked out at a time: eight lanes of a block stay in the cache
_BLOCK_ROWS = 1 << 15


def networked(values: np.ndarray) -> bool:
    """Whether `medians_ending_8` may take these values: all finite, none 0."""
    return values.size >= POINTS and bool(np.all(np.isfinite(values) & (values != 0.0)))


def medians_ending_8(values: np.ndarray, least: int) -> np.ndarray:
    """Per row j, the median of values[j - 7 .. j] (`networked` values only); the first 7
    rows, of shorter windows, as polars gives them (NaN under `least` points)."""
    out = np.empty(values.size)
    # a small array's Series without loading numpy.ma (`plain_numpy.series`, start-up)
    head = plain_numpy.series(values[: POINTS - 1]).rolling_median(POINTS, min_samples=least)
    out[: POINTS - 1] = head.fill_null(np.nan).to_numpy()
    for first in range(POINTS - 1, values.size, _BLOCK_ROWS):  # blocks of rows
        stop = min(values.size, first + _BLOCK_ROWS)
        shifted = [values[first - POINTS + 1 + i : stop - POINTS + 1 + i] for i in range(8)]
        # the first round touches every lane once: its minima and maxima are the lanes'
        # own arrays (no copy of the shifted values first)
        lanes: list[np.ndarray] = [np.empty(0)] * POINTS
        for a, b in _NETWORK[:4]:
            lanes[a] = np.minimum(shifted[a], shifted[b])
            lanes[b] = np.maximum(shifted[a], shifted[b])
        for a, b in _NETWORK[4:]:  # the other 15 compare-exchanges over the block
            low = np.minimum(lanes[a], lanes[b])
            np.maximum(lanes[a], lanes[b], out=lanes[b])
            lanes[a] = low
        lower, upper = lanes[3], lanes[4]
        out[first:stop] = lower + (upper - lower) * 0.5
    return out


# how far a bound is moved out, relative: the medians it is read from and the median it
# bounds each round their exact middle by an ulp or two, a million times less than this
BOUND_SLACK = 1e-6


def fall_ceiling(level_change_frac: float) -> float:
    """The factor a median's upper bound is multiplied by to bound what a level fallen by
    `level_change_frac` of it can be (above 0), with the slack for the step's own rounding."""
    return min(max(1.0 - level_change_frac, 0.0), 1.0) + BOUND_SLACK


def bounded(values: np.ndarray) -> bool:
    """Whether `median_bounds` may take these values: `networked` and all above 0 (a
    bound relative to the values is then one on their size)."""
    return networked(values) and bool(values.min() > 0.0)


def median_bounds(
    values: np.ndarray, medians_8: np.ndarray, points: int, least: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row j, a lower and an upper bound of the median of values[j - points + 1 .. j]
    (polars' rolling median over `points`, a multiple of 8, NaN under `least` points),
    from `medians_8`, the `medians_ending_8` of `bounded` values.

    The median of two equal halves lies between the halves' medians: the union's two
    middle values are at least the lesser of the halves' lower middles and of their upper
    middles, and where one half's middle pair lies inside the other's, at least that
    pair. So a window of several 8-point blocks has its median between the least and the
    greatest of theirs, moved out by `BOUND_SLACK` for the rounding. The first
    points - 1 rows, shorter windows, are polars' own medians."""
    low, high = medians_8.copy(), medians_8.copy()
    for back in range(POINTS, points, POINTS):  # the window's earlier blocks
        np.minimum(low[back:], medians_8[:-back], out=low[back:])
        np.maximum(high[back:], medians_8[:-back], out=high[back:])
    head = plain_numpy.series(values[: points - 1]).rolling_median(points, min_samples=least)
    low[: points - 1] = high[: points - 1] = head.fill_null(np.nan).to_numpy()
    low *= 1.0 - BOUND_SLACK
    high *= 1.0 + BOUND_SLACK
    return low, high
