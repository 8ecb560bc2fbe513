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


def bin_medians(steps: np.ndarray, values: np.ndarray, bin_points: int) -> Binned:
    if bin_points <= 1:
        return Binned(steps, steps, values, 1)
    usable = (values.size // bin_points) * bin_points
    # the tail that does not fill a bin is kept as a last, shorter bin
    head = values[:usable].reshape(-1, bin_points)
    medians = np.median(head, axis=1)
    starts = steps[:usable:bin_points]
    ends = steps[bin_points - 1 : usable : bin_points]
    if usable < values.size:
        medians = np.append(medians, np.median(values[usable:]))
        starts = np.append(starts, steps[usable])
        ends = np.append(ends, steps[-1])
    return Binned(starts, ends, medians, bin_points)


def mann_kendall_windows(values: np.ndarray, window_points: int) -> np.ndarray:
    """z statistic of the Mann-Kendall test for every window of `window_points`.

    No tie correction."""
    m = int(window_points)
    n_windows = values.size - m + 1
    if m < 3 or n_windows <= 0:
        return np.zeros(0)
    s = np.zeros(n_windows)
    for lag in range(1, m):  # loop over lags (window length), each a pass over all windows
        signs = np.sign(values[lag:] - values[:-lag])
        csum = np.concatenate(([0.0], np.cumsum(signs)))
        count = m - lag
        s += csum[count : count + n_windows] - csum[:n_windows]
    variance = m * (m - 1) * (2 * m + 5) / 18.0
    return (s - np.sign(s)) / np.sqrt(variance)


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
