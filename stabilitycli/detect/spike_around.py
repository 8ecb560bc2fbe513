"""A loss point with a grad-norm surge, judged against the curve around it (issue 36).

Materiality (b) makes a flagged point whose pre-clip grad norm surged (at least
`grad_norm_spike_ratio` x its trailing level within [t - cause_lead_steps, t]) a spike.
Flagged means over the trailing window's mu + 3 sigma, and where that window lags the
curve its mu and sigma are not the curve's: in a warmup the fall speeds up as the LR
rises (no steady fall to read a local level from), at the end of warmup it is at its
fastest, and an epoch drop that the level-change test did not find leaves the window
straddling two levels. The mean then sat 1.5-4 sigma above the curve and the fall or the
drop swelled the std by up to 2x: a point 5 sigma over the curve with a 50x surge stayed
under the bar (the LM benchmark's misses at warmup, schedule and epoch places).

At the rows of such a surge, and only there, the point is also judged against where the
curve was at it: the median of the `recovery_median_points` logged points either side of
it, the point left out and never across a level change (the curve a one-point event sits
on, read as `level.ratio_reference` reads a falling curve), with the noise read from the
changes between successive points before it, allowing for their lag-1 autocorrelation (as
a sparse log's sigma is pooled; a fall or a drop moves a difference by a fraction of sigma
where it swells a window's std by its whole height), over the spike window's points (at
least `stable_std_points`) from the last level change on, floored at `sigma_floor_frac` of
that level. A point over that level + spike_sigma sigma is flagged: its surge then makes
it a spike, as Q2.3 says.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect.autocorr import NoiseMemory
from stabilitycli.detect.level_floor import may_reach
from stabilitycli.detect.spike_causes import CauseContext, lead_max
from stabilitycli.frame import plain_numpy


@dataclass(frozen=True)
class AroundPoints:
    """Rows flagged against the curve around them, each with that level (`level`, the median
    of rows `first`-`last` but the row itself) and its noise (`sigma`, from the differences
    between rows `noise_first` and the row before it, allowing for `lag1`; `floored` where
    the floor set it instead)."""

    rows: np.ndarray
    level: np.ndarray
    sigma: np.ndarray
    first: np.ndarray
    last: np.ndarray
    noise_first: np.ndarray
    floored: np.ndarray
    noise: np.ndarray  # the noise as measured (NaN: too few points), before any floor
    lag1: float = 0.0

    @classmethod
    def none(cls) -> AroundPoints:
        empty = np.zeros(0, dtype=np.int64)
        nothing = np.zeros(0)
        return cls(empty, nothing, nothing, empty, empty, empty, np.zeros(0, dtype=bool), nothing)

    def index(self, row: int) -> int | None:
        """Where `row` is in `rows`, or None when it was not flagged this way."""
        at = int(np.searchsorted(self.rows, row))
        return at if at < self.rows.size and self.rows[at] == row else None


def surge_rows(steps: np.ndarray, ctx: CauseContext, thresholds: Thresholds) -> np.ndarray:
    """The loss rows with a grad-norm surge of at least `grad_norm_spike_ratio` x its level
    within [t - cause_lead_steps, t] (`CauseContext.grad_ratio`), sorted.

    The exact level is read only where it can matter: the level (`level.LevelAt`) is never
    under the lowest value of its window, so a grad norm well under the bar x that lowest
    value is no surge (`level_floor.may_reach`)."""
    base = ctx.grad_level
    if base is None or ctx.grad_ratio is None:
        return np.zeros(0, dtype=np.int64)
    g_steps, g = base.steps, base.values
    # `level_floor.may_reach` reads that lowest value a chunk of rows at a time
    # (and the bar `CauseContext.maybe_cause` asks next of the same level, from the same values)
    later = min(thresholds.grad_norm_spike_ratio, thresholds.grad_norm_outlier_ratio)
    reach = may_reach(base, thresholds.grad_norm_spike_ratio, (later,))
    open_at = np.flatnonzero(reach & np.isfinite(g))
    if open_at.size == 0:
        return np.zeros(0, dtype=np.int64)
    # each open grad-norm step reaches the loss rows logged within cause_lead_steps after it
    lead = thresholds.cause_lead_steps
    lo = np.searchsorted(steps, g_steps[open_at], side="left")
    hi = np.searchsorted(steps, g_steps[open_at] + lead, side="right")
    sizes = np.maximum(hi - lo, 0)
    within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    rows = plain_numpy.unique(np.repeat(lo, sizes) + within)
    if rows.size == 0:
        return rows.astype(np.int64)
    ratio = lead_max(steps, ctx.grad_ratio, lead, rows)
    assert ratio is not None  # grad_ratio is set
    return rows[ratio >= thresholds.grad_norm_spike_ratio].astype(np.int64)


def flag_around(
    loss: np.ndarray,
    rows: np.ndarray,
    changes: np.ndarray,
    thresholds: Thresholds,
    memory: NoiseMemory,
    noise_points: int,
) -> AroundPoints:
    """Of `rows`, those over the curve around them + spike_sigma sigma (see the module)."""
    rows = rows[np.isfinite(loss[rows])]
    if rows.size == 0:
        return AroundPoints.none()
    # the stretch between the level changes either side of the row: a curve read across a
    # step down right after the row would put the last point of the old level half a step
    # over the curve, where the first points after a found change read the new one
    since = np.searchsorted(changes, rows, side="right") - 1
    start = np.where(since >= 0, np.append(changes, 0)[np.maximum(since, 0)], 0)
    stop = np.append(changes, loss.size)[since + 1]
    points = int(thresholds.recovery_median_points)
    offsets = np.concatenate([np.arange(-points, 0), np.arange(1, points + 1)])
    around = rows[:, None] + offsets[None, :]
    inside = (around >= start[:, None]) & (around < stop[:, None])
    values = np.where(inside, loss[np.clip(around, 0, loss.size - 1)], np.nan)
    values[~np.isfinite(values)] = np.nan
    used = np.isfinite(values)
    enough = used.sum(axis=1) >= points  # half the neighbours at least
    rows, values, used, start = rows[enough], values[enough], used[enough], start[enough]
    if rows.size == 0:
        return AroundPoints.none()
    level = plain_numpy.nanmedian(values, axis=1)
    # the first and last rows the median read
    first = rows + offsets[np.argmax(used, axis=1)]
    last = rows + offsets[offsets.size - 1 - np.argmax(used[:, ::-1], axis=1)]
    # the noise over the points before the row, from the last level change on
    noise_first = np.maximum(rows - max(noise_points, int(thresholds.stable_std_points)), start)
    least = int(thresholds.min_points_per_window)
    noise = np.array(
        [memory.difference_sigma(loss[a:r], least) for a, r in zip(noise_first, rows, strict=True)]
    )  # one stretch per surge row: a few rows, not the log
    floor = thresholds.sigma_floor_frac * np.abs(level)
    floored = ~(noise > floor)  # NaN (too few points): the floor
    sigma = np.where(floored, floor, noise)
    with np.errstate(invalid="ignore"):
        over = loss[rows] > level + thresholds.spike_sigma * sigma
    return AroundPoints(
        rows[over],
        level[over],
        sigma[over],
        first[over],
        last[over],
        noise_first[over],
        floored[over],
        noise[over],
        1.0 - memory.difference_share,
    )
