"""The counts of points in the trailing windows of `windows`, and the mean step of those
points, worked out in numpy.

A count is a whole number, and so is a sum of steps (measured from the chunk's first row,
up to 2^53): the difference of two running sums gives the very bits polars' rolling sums
give, and a mean step is that exact sum over the count, one rounding, as polars' rolling
mean of the steps gives it (its running sum is exact too). Without polars' column of
ones, its shifted copies and a column for each statistic, which a 10M-row log's chunks
paid a page fault a page for: a fifth of the windows' time."""

from __future__ import annotations

import numpy as np

# the statistics worked out here, each over its share of the window: all of it, its
# later half and quarter, and the window and the one before it; name: (times, divided by)
COUNT_SHARES: dict[str, tuple[int, int]] = {
    "count": (1, 1),
    "count_half": (1, 2),
    "count_quarter": (1, 4),
    "count_double": (2, 1),
}
STEP_MEAN_SHARES: dict[str, tuple[int, int]] = {
    "x_mean": (1, 1),
    "x_mean_half": (1, 2),
    "x_mean_quarter": (1, 4),
    "x_mean_double": (2, 1),
}

# a sum of whole numbers in float64 is exact up to this
_EXACT_SUM = float(2**53)


def exact_step_sums(steps: np.ndarray) -> bool:
    """Whether the running sum of `steps` less the first one is exact in float64 (whole
    steps, and their sum over all of them under 2^53): the step means are then computed
    here; else polars computes them."""
    if steps.dtype.kind not in "iu" or steps.size == 0:
        return False
    return float(steps[-1] - steps[0]) * steps.size < _EXACT_SUM


def window_counts(
    steps: np.ndarray,
    finite: np.ndarray,
    names: tuple[str, ...],
    window: tuple[int, bool],
    first: int,
    x: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per row from `first` on, each of `names` (of `COUNT_SHARES` and `STEP_MEAN_SHARES`)
    over the `finite` points of the trailing window (`window`: its span, and whether in
    steps, [t - span, t) in `steps`, or in rows, the span rows before the row), as float64;
    a step mean reads `x` (the steps less the first, where `exact_step_sums`). An empty
    window by step counts 0, as polars' sum by step gives it; the first row's window of
    rows holds only the null shifted in before it, which polars' sum gives as null: NaN
    there, as `windows` fills a null (0 for `count`, a sum of the column of ones that has
    no null). A mean over no point is NaN. Only the rows given count, as in polars'
    windows over the same rows. `rows` (from `first`): the numbers at those rows only,
    the same differences of the same running sums, so the same bits."""
    span, by_step = window
    # running[i]: the finite points before row i (whole numbers: float64 holds them exactly)
    running = np.zeros(finite.size + 1)
    np.cumsum(finite, out=running[1:])
    summed = None
    if x is not None and any(name in STEP_MEAN_SHARES for name in names):
        summed = np.zeros(finite.size + 1)
        np.cumsum(np.where(finite, x, 0.0), out=summed[1:])
    ends = _Ends(steps, first, finite.size, by_step, rows)
    out: dict[str, np.ndarray] = {}
    for name in names:
        times, divided = COUNT_SHARES.get(name) or STEP_MEAN_SHARES[name]
        length = max(1, span // divided) * times
        count = ends.upto(running) - ends.since(running, length)
        if name in STEP_MEAN_SHARES:
            assert summed is not None
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = (ends.upto(summed) - ends.since(summed, length)) / count
            # polars' null, filled: numpy's 0 / 0 is a NaN of the other sign bit
            mean[count == 0] = np.nan
            out[name] = mean
            continue
        if not by_step and name != "count" and first == 0 and count.size:
            if rows is None:
                count[0] = np.nan
            else:
                count[rows == 0] = np.nan
        out[name] = count
    return out


class _Ends:
    """Where each row's trailing window starts and stops, as indices into a running sum
    (entry i: the sum over the rows before row i), for the rows from `first` on. A window
    of rows stops at the row and starts `length` rows back: slices of the running sum, no
    index arrays. A window by step is found by a search of the steps, kept by length (a
    count and a mean over one window share it)."""

    def __init__(
        self, steps: np.ndarray, first: int, size: int, by_step: bool, rows: np.ndarray | None
    ) -> None:
        self.first, self.size, self.by_step = first, size, by_step
        # the rows asked for, as indices from the first of all rows (None: every row)
        self.rows = None if rows is None else rows + first
        own = steps[first:] if rows is None else steps[self.rows]
        # the rows' own steps, which a window by step is searched from
        self.at = own.astype(np.int64) if by_step else np.zeros(0, dtype=np.int64)
        self.steps = steps
        self._stops: np.ndarray | None = None
        if by_step and steps.size > 1 and not bool(np.all(steps[1:] > steps[:-1])):
            # a window closed on the left stops before the first row at the row's own step
            self._stops = np.searchsorted(steps, self.at, side="left")
        self._starts: dict[int, np.ndarray] = {}

    def upto(self, running: np.ndarray) -> np.ndarray:
        if self._stops is not None:
            return running[self._stops]
        if self.rows is not None:
            return running[self.rows]
        return running[self.first : self.size]

    def since(self, running: np.ndarray, length: int) -> np.ndarray:
        if self.by_step:
            if length not in self._starts:
                self._starts[length] = np.searchsorted(self.steps, self.at - length, side="left")
            return running[self._starts[length]]
        if self.rows is not None:
            return running[np.maximum(self.rows - length, 0)]
        # running[max(i - length, 0)] for the rows i from first on
        start = self.first - length
        if start >= 0:
            return running[start : self.size - length]
        head = np.full(min(-start, self.size - self.first), running[0])
        return np.concatenate([head, running[: max(self.size - length, 0)]])
