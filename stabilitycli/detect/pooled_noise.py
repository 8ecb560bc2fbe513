"""The spike rule's noise in a sparse log: pooled from successive differences over many
windows' worth of points (issue 36: a window of ten points holds no std worth the name)."""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.detect import rolling_median8
from stabilitycli.detect.autocorr import NoiseMemory
from stabilitycli.frame import plain_numpy


def pooled_sigma(
    loss: np.ndarray,
    points: int,
    memory: NoiseMemory,
    cut: np.ndarray | None = None,
    at_level: tuple[int, int] | None = None,
    level_points: int = 8,
) -> np.ndarray:
    """The loss noise before each point, from successive differences over `points` points.

    A 100-step window of a log written every 10 steps holds 10 points: its std
    is off by about 25% either way, and a high draw hides a real bump (a +5%
    three-point bump at 5 sigma was missed one time in five). Pooling many
    windows makes the estimate steady; taking it from differences
    (Var[x[i] - x[i-1]] = 2 sigma^2 (1 - rho_1), rho_1 the noise's lag-1
    autocorrelation) keeps the curve's own slope out of it (the variance leaves out
    the mean change, the fall), which a std over that many steps would count as noise.
    Neighbours that move together differ less than the noise is wide: without the
    (1 - rho_1) the sigma of AR(1)-like noise came out up to a quarter too small, and
    its wanders passed for bumps. A level change's own step (`cut`: the changes' first
    rows) is no noise, and the changes before it count at the level after it (read over
    its first `level_points` points), for the rows from there on. Only points before t
    count, as for the window's mean.

    NaN under `points` // 2 differences.

    `at_level` (level points, least differences), for a fall the LR's warmup plans: the
    noise of a loss is a share of it, and over a warmup the points of the pool's earlier
    windows sit well above the ones now and vary more: a sigma pooled from their plain
    differences came out 1.2-1.5x the noise at the row (a 5-sigma bump read as 4). The
    changes are then taken relative to the loss around them and put back at the level
    now (the mean of the level points before the row), and a pool of `least` changes
    will do: a sparse warmup is over before a pool of many windows fills. A loss that is
    not positive throughout (a signed objective) has no such share: taken as it is.
    """
    finite = np.where(np.isfinite(loss), loss, np.nan)
    step_change = np.concatenate(([np.nan], np.diff(finite)))
    cut = np.zeros(0, dtype=np.int64) if cut is None else cut[(cut >= 0) & (cut < loss.size)]
    step_change[cut] = np.nan
    least = max(2, points // 2)
    if at_level is not None and bool(np.all(~(finite <= 0.0))):  # NaN: no sign
        # relative changes: a level change's old level needs no rescaling
        least = max(2, min(at_level[1], points))
        with np.errstate(invalid="ignore", divide="ignore"):
            step_change[1:] /= 0.5 * (finite[1:] + finite[:-1])
        variance = _rolling_var(step_change, points, least)
        level = plain_numpy.series(finite).fill_nan(None).shift(1)
        level = level.rolling_mean(max(1, at_level[0]), min_samples=1).fill_null(np.nan)
        return np.sqrt(variance / (2.0 * memory.difference_share)) * level.to_numpy()
    variance = _rolling_var(step_change, points, least)
    for c in cut.tolist():  # a few level changes, each over the rows that pool across it
        _rescaled_after(variance, finite, step_change, c, points, least, level_points)
    return np.sqrt(variance / (2.0 * memory.difference_share))


def _rolling_var(step_change: np.ndarray, points: int, least: int) -> np.ndarray:
    """The variance of the `points` changes before each row (not its own)."""
    change = plain_numpy.series(step_change).fill_nan(None).shift(1)
    return change.rolling_var(points, min_samples=least).fill_null(np.nan).to_numpy(writable=True)


def _rescaled_after(
    variance: np.ndarray,
    finite: np.ndarray,
    step_change: np.ndarray,
    c: int,
    points: int,
    least: int,
    level_points: int,
) -> None:
    """`variance` at the rows from `level_points` after the change at row `c` on, whose
    pooled changes reach back across it, with the changes before it scaled to the new
    level (the noise of a loss is a share of it: after a 20% drop, the changes of the
    level before count the noise a quarter too wide, and hide a bump on the new one).
    The new level is read over the `level_points` points from the change, all before the
    rows rescaled; the rows before those are judged against the level since the change
    (`after_change`)."""
    first, stop = c + level_points, min(variance.size, c + points + 1)
    if first >= stop or c < level_points:
        return
    with np.errstate(invalid="ignore"):
        old = np.nanmedian(finite[c - level_points : c])
        new = np.nanmedian(finite[c:first])
    if not (np.isfinite(old) and np.isfinite(new) and old > 0 and new > 0):
        return
    lo = max(0, c - points - 1)
    local = step_change[lo:stop].copy()
    local[: c - lo] *= new / old
    variance[first:stop] = _rolling_var(local, points, least)[first - lo :]


class ChunkLoss:
    """One chunk of the loss for the level-change search: its values, the polars series of
    them with non-finite values as nulls, and the trailing medians and step-to-step noise
    read from it, each computed once. The searches over k, 2k and 4k points, the short
    drops and the merge of the two read the same 8- and 16-point medians and the same
    noise: computed in each, they were a fifth of that search's time. The arrays handed
    out are shared: read them, never write into them."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        finite = plain_numpy.series(np.where(np.isfinite(values), values, np.nan))
        self.finite = finite.fill_nan(None)
        self._medians: dict[tuple[int, int], np.ndarray] = {}
        self._noise: dict[int, np.ndarray] = {}
        self._changes: pl.Series | None = None  # read by each `change_noise`
        self._positive: bool | None = None  # `_bounded`, once asked

    def medians_ending(self, points: int, least: int) -> np.ndarray:
        """Per row j, the median of the `points` values ending at j (NaN under `least`)."""
        key = (points, least)
        if key not in self._medians:
            if points == rolling_median8.POINTS and rolling_median8.networked(self.values):
                self._medians[key] = rolling_median8.medians_ending_8(self.values, least)
            else:
                rolled = self.finite.rolling_median(points, min_samples=least)
                self._medians[key] = rolled.fill_null(np.nan).to_numpy()
        return self._medians[key]

    def median_bounds(self, points: int, least: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Per row, a lower and an upper bound of `medians_ending(points, least)`
        (`rolling_median8.median_bounds`), where they are cheap and the medians are not
        yet worked out; None elsewhere. A search whose bar no row can pass within the
        bounds needs no medians of 16 or 32 points (on most of a long log none can):
        each cost polars a pass of ~80 ns a row, the bounds a few numpy passes. Not
        kept: two columns of the chunk each, held by two chunks at once."""
        cheap = points > rolling_median8.POINTS and points % rolling_median8.POINTS == 0
        if not cheap or (points, least) in self._medians or not self._bounded():
            return None
        # any least: the 8-point windows the bounds read are whole
        eight = [m for (p, _), m in self._medians.items() if p == rolling_median8.POINTS]
        if not eight:
            eight = [self.medians_ending(rolling_median8.POINTS, rolling_median8.POINTS)]
        return rolling_median8.median_bounds(self.values, eight[0], points, least)

    def _bounded(self) -> bool:
        """`rolling_median8.bounded` of the chunk, asked once."""
        if self._positive is None:
            self._positive = rolling_median8.bounded(self.values)
        return self._positive

    def medians_at(self, points: int, least: int, rows: np.ndarray) -> np.ndarray:
        """`medians_ending(points, least)` at `rows` only (NaN at a row past either end),
        from each row's window alone, as polars reads every window of the whole chunk;
        for `bounded` values (no NaN, no 0: polars picks between 0.0 and -0.0)."""
        key = (points, least)
        n = self.values.size
        if key in self._medians:
            whole = self._medians[key]
            return np.where((rows >= 0) & (rows < n), whole[np.clip(rows, 0, n - 1)], np.nan)
        out = np.full(rows.size, np.nan)
        past = rows >= n
        if past.any():
            return np.where(past, np.nan, self.medians_at(points, least, np.where(past, 0, rows)))
        head = rows < points - 1  # a shorter window, or none
        if head.any():
            short = self.values[: points - 1]
            medians = plain_numpy.series(short).rolling_median(points, min_samples=least)
            first = medians.fill_null(np.nan).to_numpy()
            inside = head & (rows >= 0)
            out[inside] = first[rows[inside]]
        whole_rows = rows[~head]
        if whole_rows.size:
            # the windows laid end to end: each one's median is read where it ends
            at = whole_rows[:, None] + np.arange(1 - points, 1)[None, :]
            laid = plain_numpy.series(self.values[at.ravel()])
            medians = laid.rolling_median(points, min_samples=least)
            ends = medians.gather_every(points, offset=points - 1)
            out[~head] = ends.fill_null(np.nan).to_numpy()
        return out

    def change_noise(self, points: int) -> np.ndarray:
        """`trailing_change_noise` of the chunk over `points`."""
        if points not in self._noise:
            if self._changes is None:
                self._changes = absolute_changes(self.values)
            self._noise[points] = trailing_change_noise(self._changes, points)
        return self._noise[points]


def absolute_changes(values: np.ndarray) -> pl.Series:
    """|values[i] - values[i - 1]|, null at the first row and where either value is not
    finite: polars' `diff().abs()` of the values with non-finite ones as nulls, its very
    numbers, worked out in numpy (whose freed memory is used again; each polars column
    of a long log's chunk is a fresh one, paid a page fault per page)."""
    finite = np.where(np.isfinite(values), values, np.nan)
    change = np.empty(values.size)
    change[:1] = np.nan
    np.subtract(finite[1:], finite[:-1], out=change[1:])
    np.abs(change, out=change)
    return plain_numpy.series(change).fill_nan(None)


def trailing_change_noise(change: pl.Series, points: int) -> np.ndarray:
    """Per row, the noise of one point before it, from the mean absolute step-to-step
    change over the `8 * points` changes before it (NaN under `points` of them): a median
    costs several times more over a long log, sqrt(pi)/2 of the mean is sigma for normal
    noise, and a heavy tail only raises a bar set in it. `change`: the loss's
    `absolute_changes`."""
    noise = change.rolling_mean(8 * points, min_samples=points).fill_null(np.nan).to_numpy()
    return np.concatenate([[np.nan], noise[:-1]]) * (np.sqrt(np.pi) / 2.0)
