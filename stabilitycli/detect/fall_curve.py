"""Where a falling loss is now, and its noise there (issue 36: events during warmup and
right after a schedule change).

Where the spike rule judges a point against the local level of a fall
(`level.local_level`), two things the window's mean and std cannot tell are read here
from the points themselves:

* **The noise.** The spread around the window's straight trend counts the fall's bend
  as noise (a warmup's fall speeds up as the LR climbs, then slows down): on a dense log
  it came out 1.5-2x the noise, and a bump of 5 sigma read as 3. The change from one
  point to the next holds the fall only as its mean (a variance leaves it out) and its
  bend hardly at all; for noise whose neighbouring points correlate by rho (lag 1) its
  variance is 2 (1 - rho) sigma^2. Taken relative to the loss, since the noise shrinks
  with it: a warmup window's first points sit 20% above its last, and so does their
  noise; times the level at the row it is the noise there.
* **Where the loss was just now.** A fall read forward to the row undershoots the curve
  where the fall stops (the end of warmup: the loss flattens within a few points), and
  the flattening would read as a rise. The mean of the last few points bounds the level
  from below: a rise is judged above where the loss just was. The mean of the window's
  last quarter did that before, but on a dense log a quarter is 25 points of a fall
  that drops 0.3 sigma a point: it sat 4 sigma above the curve.

Both on dense logs only: a sparse log's window has a few points a quarter, and its
noise is pooled apart (where the point was just now bounds a sparse fall's line, though:
`sparse_fall`). There, whether the window falls at all is also read from the
window before it (`fall_z_with_windows`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect.autocorr import NoiseMemory, inflation
from stabilitycli.frame import plain_numpy

# the correlation taken out is at most this: a logger's smoothing (rho near 1) would
# otherwise blow the estimate up from a tiny difference
_MAX_LAG1 = 0.9


# the floor of a fall's level is the recent points' mean less this many of its standard
# errors: binding where the fall has stopped, not where the recent points sit high by chance
_RECENT_SE = 2.0


@dataclass(frozen=True)
class FallReading:
    """Per row of a chunk: `relative_sigma`, the noise of a point as a fraction of the
    loss (None in a sparse log); `recent`, the mean of the `level_recent_points` points
    before the row, and `recent_se` its standard error in units of one point's noise.
    `mean_widening`: how much wider a window mean's chance wander is than independent
    noise of the pooled size (step-to-step) would give it, for the noise's memory."""

    relative_sigma: np.ndarray | None
    recent: np.ndarray | None
    recent_se: float
    mean_widening: float
    # a dense log's two arrays, not yet worked out, and the row of its chunk this reading's
    # first row is (see `DeferredFall`)
    deferred: DeferredFall | None = None
    offset: int = 0
    # a deferred one taken at some rows of its chunk only (`picked`): those rows, from
    # the chunk's first (`offset` is then 0)
    picked: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        """Whether this is a dense log's reading (its noise read from the points)."""
        return self.relative_sigma is not None or self.deferred is not None

    def rows(self, rows: slice | np.ndarray) -> FallReading:
        """This reading at a block of its rows (`level.local_level` works in blocks), or at
        the rows of an index array (a deferred one's arrays worked out then)."""
        if self.deferred is not None:
            picked = self.picked
            if isinstance(rows, slice) and picked is None:  # a block: still deferred
                return FallReading(
                    None, None, self.recent_se, self.mean_widening, self.deferred,
                    self.offset + (rows.start or 0),
                )  # fmt: skip
            if isinstance(rows, slice):  # a block of the rows picked: still deferred
                assert picked is not None
                return FallReading(
                    None, None, self.recent_se, self.mean_widening, self.deferred, 0,
                    picked[rows],
                )  # fmt: skip
            sigma, recent = self.deferred.arrays()
            at = rows + self.offset if picked is None else picked[rows]
            return FallReading(sigma[at], recent[at], self.recent_se, self.mean_widening)
        return FallReading(
            None if self.relative_sigma is None else self.relative_sigma[rows],
            None if self.recent is None else self.recent[rows],
            self.recent_se,
            self.mean_widening,
        )

    def pick(self, rows: np.ndarray) -> FallReading:
        """This reading at the rows of an index array, a deferred one still deferred: its
        arrays are worked out only if a row of them is read."""
        if self.deferred is None:
            return self.rows(rows)
        at = rows + self.offset if self.picked is None else self.picked[rows]
        return FallReading(None, None, self.recent_se, self.mean_widening, self.deferred, 0, at)


class DeferredFall:
    """A dense log's `FallReading` arrays over a chunk of rows, worked out when a row
    first reads them: only the rows whose window may fall do (`level.local_level`), and
    on most of a long log there are none in a chunk. Worked out once over the whole
    chunk, as before, so each row's numbers are the same bits (polars' running sums
    depend on the rows before); a lock, as two blocks of rows may be read at once."""

    def __init__(self, make: Callable[[], tuple[np.ndarray, np.ndarray]]) -> None:
        self._make: Callable[[], tuple[np.ndarray, np.ndarray]] | None = make
        self._made: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The relative noise and the recent mean per row of the chunk."""
        with self._lock:
            if self._made is None:
                assert self._make is not None
                self._made, self._make = self._make(), None
            return self._made


def difference_noise(loss: np.ndarray, points: int, memory: NoiseMemory) -> np.ndarray:
    """Per row, the noise of one point as a fraction of the loss, from the variance of the
    relative changes between successive points among the `points` points before it (the
    row itself left out, as from the trailing window), allowing for the noise's lag-1
    autocorrelation; NaN with fewer than half of them."""
    finite = np.where(np.isfinite(loss), loss, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.diff(finite) / np.abs(0.5 * (finite[1:] + finite[:-1]))
    relative[~np.isfinite(relative)] = np.nan
    # the change into each row, shifted one row on (the row's own left out): shifted in
    # numpy, whose freed memory is used again, not in polars (a fresh column of the chunk)
    into = np.concatenate(([np.nan], relative))
    change = plain_numpy.series(np.concatenate(([np.nan], into[:-1]))).fill_nan(None)
    variance = change.rolling_var(points, min_samples=max(2, points // 2)).fill_null(np.nan)
    lag1 = min(max(memory.lag1, 0.0), _MAX_LAG1)
    return np.sqrt(variance.to_numpy() / (2.0 * (1.0 - lag1)))


def _recent_mean(loss: np.ndarray, points: int) -> np.ndarray:
    """Per row, the mean of the finite values among the `points` rows before it."""
    before = np.empty(loss.size)  # the value of the row before each row, shifted in numpy
    before[:1] = np.nan
    np.copyto(before[1:], np.where(np.isfinite(loss[:-1]), loss[:-1], np.nan))
    finite = plain_numpy.series(before).fill_nan(None)
    return finite.rolling_mean(points, min_samples=1).fill_null(np.nan).to_numpy()


def read_fall(
    loss: np.ndarray,
    first: int,
    count: np.ndarray,
    sparse: bool,
    thresholds: Thresholds,
    memory: NoiseMemory,
) -> FallReading:
    """The `FallReading` at the rows of a chunk of the spike rule's trailing windows (from
    row `first`, `count` points in each window), the noise over a window's worth of
    points; only `mean_widening` in a `sparse` log. Its window holds a few points a
    quarter: a bend read from their means swings by most of a sigma, and its noise is
    pooled apart."""
    points = max(int(thresholds.min_points_per_window), int(np.max(count, initial=0)))
    lag1 = min(max(memory.lag1, 0.0), _MAX_LAG1)
    widening = inflation(memory, points) / math.sqrt(1.0 - lag1)
    recent_points = max(1, int(thresholds.level_recent_points))
    reach = max(0, first - max(points, recent_points) - 1)
    stop = first + count.size
    piece = loss[reach:stop]
    recent_se = math.sqrt(memory.variance_factor(recent_points) / recent_points)
    if sparse:  # the recent points bound a sparse fall's line (`sparse_fall`)
        recent = _recent_mean(piece, recent_points)[first - reach :]
        return FallReading(None, recent, recent_se, widening)

    def make() -> tuple[np.ndarray, np.ndarray]:
        sigma = difference_noise(piece, points, memory)[first - reach :]
        return sigma, _recent_mean(piece, recent_points)[first - reach :]

    return FallReading(None, None, recent_se, widening, DeferredFall(make))


def fall_z_with_windows(
    fall_z: np.ndarray,
    windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    judge: np.ndarray,
    fall: FallReading | None,
    thresholds: Thresholds,
) -> np.ndarray:
    """`fall_z` (the window's earlier half over its later half, in standard errors), or in
    a sparse log, where it is at least half of `level_fall_z`, the fall from the window
    before to this one (`windows`: the two means and their points) in standard errors of
    the two means for the noise `judge` with its memory, if that is more.

    A window of ten points has halves of five: a warmup's fall of two sigma a window
    passes their test one time in three, two whole windows' test most times. The
    noise's memory widens that test's bar, and the halves must show half a fall too: an
    AR(1) wander of two sigma over a window, after one a sigma high, would otherwise
    read as a fall, and the return from it as a shift."""
    if fall is None or fall.dense:
        return fall_z
    prior, mean, n_prior, n = windows
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = judge * fall.mean_widening * np.sqrt(1.0 / n_prior + 1.0 / n)
        both = np.fmax(fall_z, (prior - mean) / spread)
        return np.where(fall_z >= thresholds.level_fall_z / 2.0, both, fall_z)


def level_now(
    stats: dict[str, np.ndarray],
    early: tuple[np.ndarray, np.ndarray],
    third: tuple[np.ndarray, np.ndarray],
    fall: FallReading,
    thresholds: Thresholds,
    noise: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The level of a fall at each row and the noise there.

    The level: the window's bend read at the row (the parabola through the means of its
    earlier half, third quarter and last quarter, at their mean steps; a straight trend
    undershoots a fall that slows down and overshoots one that speeds up), never below
    where the loss just was (`FallReading.recent`, less `_RECENT_SE` of its standard
    errors: a floor the recent points' own noise would set too high) and never above the
    window's mean. The noise: the relative noise times the level, or `noise` where the
    window has too few changes, widened for the level's own error (a point's distance
    from an estimated level varies by both: about 8% on a 100-point window; for noise
    with memory the means err more, but the point moves with the recent ones, and the
    two offset), then floored at `sigma_floor_frac` of the level: the floor is the
    rule's least sigma, as under a window's std, not an estimate with an error."""
    x, mean = stats["x"], stats["mean"]
    last = (stats["x_mean_quarter"], stats["mean_quarter"])
    with np.errstate(invalid="ignore", divide="ignore"):
        bend = np.minimum(mean, _parabola_at(x, early, third, last))
        sigma = _at_level(bend, fall, thresholds, noise)
        recent = np.full_like(mean, np.nan) if fall.recent is None else fall.recent
        floor = recent - _RECENT_SE * fall.recent_se * sigma
        level = np.minimum(mean, np.fmax(bend, floor))
        # the parabola's weights on the three means, squared over their points
        n_late = stats["count_half"]
        counts = (stats["count"] - n_late, n_late - stats["count_quarter"], stats["count_quarter"])
        weights = _parabola_weights(x, early[0], third[0], last[0])
        error = sum(w * w / c for w, c in zip(weights, counts, strict=True))
        widen = np.sqrt(1.0 + np.where(np.isfinite(error), error, 0.0))
    return level, _at_level(level, fall, thresholds, noise, widen)


def _at_level(
    level: np.ndarray,
    fall: FallReading,
    thresholds: Thresholds,
    noise: np.ndarray,
    widen: np.ndarray | float = 1.0,
) -> np.ndarray:
    if fall.relative_sigma is None:  # a sparse log: its noise is pooled apart
        return noise
    at_level = fall.relative_sigma * np.abs(level) * widen
    floor = np.abs(level) * thresholds.sigma_floor_frac
    return np.where(np.isfinite(at_level), np.maximum(at_level, floor), noise * widen)


def _parabola_weights(x, x0, x1, x2):
    """The weights of the three y values in `_parabola_at` at x."""
    return (
        (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2)),
        (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2)),
        (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1)),
    )


def _parabola_at(x, *points):
    """The parabola through three (x, y) points read at x (Lagrange's form)."""
    (x0, y0), (x1, y1), (x2, y2) = points
    return (
        y0 * (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2))
        + y1 * (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2))
        + y2 * (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1))
    )


def sparse_fall(
    windows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    line: tuple[np.ndarray, np.ndarray],
    pooled: np.ndarray | None,
    fall: FallReading | None,
    planned: np.ndarray | None,
    thresholds: Thresholds,
) -> tuple[np.ndarray, np.ndarray]:
    """A sparse log's fall, per row: its slope per step (0 where there is none to read)
    and the line read at the row, never above the window's mean (the mean where there is
    no fall). `windows`: the means of the window before and of this one, and their
    points; `line`: the slope between those means and the row's offset from this
    window's mean step; `planned`: the rows of the LR's planned warmup (None: no plan).

    A window of ten points (twenty, widened) lags a fall by half its span: on a warmup
    logged every 10 steps its mean sat 3 sigma above the curve, and a 5-sigma bump read
    as 2 (issue 36). The line through two windows' means follows the fall with twice
    the points of the window's own trend, whose halves of five points are noise; its
    reading at the row errs by about 1.6 times the mean's error, so it is taken only
    where the fall is plain: the window before sits `sparse_fall_z` standard errors of
    the two means (the pooled noise, with its memory) above this one, and the LR's warmup
    plans it. Elsewhere a wander of AR(1) noise (the window before drawn high) read as a
    fall as often as a slow decay did: healthy runs logged every 10 steps had three times
    the false alarms. (The window's own halves are not asked to show the fall too: five
    points a half, they missed it at the onset of a third of the events.)"""
    prior, mean, n_prior, n = windows
    slope, offset = line
    if pooled is None or fall is None or planned is None:
        return np.zeros(mean.shape), mean
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = pooled * fall.mean_widening * np.sqrt(1.0 / n_prior + 1.0 / n)
        plain = planned & (n_prior >= 2) & (n >= 2)
        plain &= (prior - mean) / spread >= thresholds.sparse_fall_z
        plain &= np.isfinite(slope) & (slope < 0)
        # never below where the loss just was, less `_RECENT_SE` of that mean's errors: a
        # dip of AR(1) noise steepens the line as it lowers the window's mean, and the
        # line read 3 sigma under the curve (the return from the dip read as a shift)
        recent = np.full(mean.shape, -np.inf) if fall.recent is None else fall.recent
        floor = np.nan_to_num(recent - _RECENT_SE * fall.recent_se * pooled, nan=-np.inf)
        level = np.fmin(np.maximum(mean + slope * offset, floor), mean)
        return np.where(plain, slope, 0.0), np.where(plain, level, mean)
