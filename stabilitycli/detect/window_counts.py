"""The counts of points in the trailing windows of `windows`, worked out in numpy.

A count is a whole number: the difference of two running counts gives the very bits
polars' rolling sum of ones gives, without the column of ones, its shifted copy and the
sum that polars allocates for each count (a 10M-row log's chunks paid a page fault for
every page of each, a fifth of the windows' time)."""

from __future__ import annotations

import numpy as np

# the counts `windows` reads, each over its share of the window: all of it, its later
# half and quarter, and the window and the one before it
COUNT_SHARES: dict[str, tuple[int, int]] = {  # name: (times, divided by)
    "count": (1, 1),
    "count_half": (1, 2),
    "count_quarter": (1, 4),
    "count_double": (2, 1),
}


def window_counts(
    steps: np.ndarray,
    finite: np.ndarray,
    names: tuple[str, ...],
    span: int,
    by_step: bool,
    first: int,
) -> dict[str, np.ndarray]:
    """Per row from `first` on: how many `finite` points lie in each of the trailing windows
    `names` (of `COUNT_SHARES`) of `span` steps (`by_step`: [t - span, t) in `steps`) or
    rows (the `span` rows before the row), as float64. An empty window by step counts 0, as
    polars' sum by step gives it; the first row's window of rows holds only the null
    shifted in before it, which polars' sum gives as null: NaN there, as `windows` fills a
    null (0 for `count`, a sum of the column of ones that has no null). Only the rows given
    count, as in polars' windows over the same rows."""
    running = np.zeros(finite.size + 1, dtype=np.int64)
    np.cumsum(finite, out=running[1:])
    if by_step:
        at = steps[first:].astype(np.int64)
        # the first row at the row's own step: a window closed on the left stops before it
        # (the row itself, unless an earlier row shares its step)
        upto = np.arange(first, finite.size)
        if steps.size > 1 and not bool(np.all(steps[1:] > steps[:-1])):
            upto = np.searchsorted(steps, at, side="left")
    else:
        upto = np.arange(first, finite.size)
    out: dict[str, np.ndarray] = {}
    for name in names:
        times, divided = COUNT_SHARES[name]
        length = max(1, span // divided) * times
        if by_step:
            since = np.searchsorted(steps, at - length, side="left")
        else:
            since = np.maximum(upto - length, 0)
        count = (running[upto] - running[since]).astype(np.float64)
        if not by_step and name != "count" and first == 0 and count.size:
            count[0] = np.nan
        out[name] = count
    return out
