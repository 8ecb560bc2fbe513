"""Baselines that follow the curve (issue 36): where the loss is now, and where it stepped
down to a new level.

The spike rule's baseline is the mean over [t - W, t). On a curve that falls fast (warmup,
the tail of a decay) that mean sits above where the run is at t, and a window that holds
an epoch boundary (the loss steps down 8-25% as the model sees its data again) straddles
two levels: its mean and std then hide any rise after the drop. Two remedies, both taken
from the window's own numbers:

* the local level: the trend of the window read at t (the mean of its later half against
  that of its earlier half), never below the mean of the window's last quarter and never
  above the window's mean (for the loss of a dense log, the window's bend read at t
  and the noise from the changes between points: `fall_curve`), used with the spread
  around that trend where the spike bar they make is `level_lag_sigma` or more below
  the one of the window's mean and std;
* level changes: a step down of the loss between two logged points, found from medians
  of the `level_change_points` points either side; the trailing window restarts there.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import warnings

import numpy as np

from stabilitycli.core import threads
from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect import windows
from stabilitycli.detect.autocorr import NoiseMemory, inflation, noise_memory_of
from stabilitycli.detect.fall_curve import (
    FallReading,
    fall_z_with_windows,
    level_now,
    sparse_fall,
)
from stabilitycli.detect.lr_plan import LrPlan
from stabilitycli.detect.pointwise import Pointwise
from stabilitycli.detect.pooled_noise import ChunkLoss
from stabilitycli.detect.rolling_median8 import fall_ceiling
from stabilitycli.detect.short_drop import LEAST_ABOVE_ZERO, merge_short, short_drops
from stabilitycli.detect.windows import LEVEL_NAMES, WindowPlan, trailing_chunk_at
from stabilitycli.frame import plain_numpy

# the longest medians a level change is read from, in `level_change_points`: a new level
# that held for this many times as many points (see `level_changes`)
SETTLED_SPAN = 4

# the names `local_level` reads of a trailing window
WINDOW_NAMES = ("mean", "std", "count", *LEVEL_NAMES)


@dataclass(frozen=True)
class LocalLevel:
    """Per row of a chunk: the level the rule judges a point against and its noise.

    `level` is the trailing mean, or the local level where the mean lags a falling
    curve (`falling`); `sigma` the window's std, or, where `falling`, the spread around
    the window's trend (the fall itself is no noise). `rise_slope` is the window's slope
    per step where the curve rises by as much (0 elsewhere), and `line` the trend read
    at the row: recovery from a spike is judged against that line. `near` is the
    local level wherever the mean is above it, fall or not: a slow fall's mean lags
    it by less than the bar that switches `level`, yet takes that much off the
    excess a bump accumulates over several points. Where the window does not fall,
    that local level is its trend at the row, never under its last quarter's mean
    (a fall's bend and last points are read only where the window falls).
    """

    level: np.ndarray
    sigma: np.ndarray
    falling: np.ndarray
    rise_slope: np.ndarray
    line: np.ndarray
    near: np.ndarray
    # a sparse log's fall (`fall_curve.sparse_fall`): its slope per step (0 where there is none
    # to read) and the line read at the row (the mean where none)
    fall_slope: np.ndarray
    fall_line: np.ndarray


# rows `local_level` works out at a time: its two dozen temporaries then cost a few MB,
# not two dozen copies of a chunk of `windows.CHUNK_ROWS` rows (240 MB at 2^20 rows)
LEVEL_BLOCK_ROWS = 1 << 16


def local_level(
    stats: dict[str, np.ndarray],
    thresholds: Thresholds,
    pooled: np.ndarray | None = None,
    fall: FallReading | None = None,
    planned: np.ndarray | None = None,
) -> LocalLevel:
    """The `LocalLevel` of each row from its trailing window's `WINDOW_NAMES`; `pooled`, the
    noise pooled over many windows where the rule has it (a sparse log), judges whether
    the window's fall is more than its noise; `fall`, what the loss's own points say of
    the curve now (`fall_curve.read_fall`), where the rule has it: the level of a fall
    and its noise are then read as `fall_curve.level_now` says; `planned`, the rows whose
    window the LR's planned warmup shapes (`planned_fall_rows`).

    Every number is a row's own (no operation reaches across rows), so it is worked out
    `LEVEL_BLOCK_ROWS` rows at a time into the result, with the same bits as in one go."""
    size = stats["count"].size
    block_rows = LEVEL_BLOCK_ROWS  # read at call time: tests take small blocks
    if size <= block_rows:
        return _local_level_rows(stats, thresholds, pooled, fall, planned)

    def block(first: int) -> LocalLevel:
        rows = slice(first, first + block_rows)
        return _local_level_rows(
            {name: column[rows] for name, column in stats.items()},
            thresholds,
            None if pooled is None else pooled[rows],
            None if fall is None else fall.rows(rows),
            None if planned is None else planned[rows],
        )

    out: LocalLevel | None = None
    firsts = range(0, size, block_rows)
    # two blocks at once where the pipeline lends a thread: a block's temporaries are a
    # few MB, and its numbers its own
    for first, part in zip(firsts, threads.in_order(block, firsts, workers=2), strict=True):
        rows = slice(first, first + block_rows)
        if out is None:
            out = LocalLevel(*(np.empty(size, dtype=getattr(part, f).dtype) for f in _LEVEL_FIELDS))
        for name in _LEVEL_FIELDS:
            getattr(out, name)[rows] = getattr(part, name)
    assert out is not None  # one block at least: size > block_rows
    return out


_LEVEL_FIELDS = tuple(field.name for field in dataclasses.fields(LocalLevel))


def local_level_at(
    stats: dict[str, np.ndarray],
    thresholds: Thresholds,
    fall: FallReading,
    planned: np.ndarray | None,
    rows: np.ndarray,
    at_rows: dict[str, np.ndarray],
) -> LocalLevel:
    """`local_level` (no pooled noise) at the `rows` of a chunk only: each of its numbers
    is a row's own, so the same bits as over every row; `fall` is still read only where a
    window may fall. `at_rows`: the `WINDOW_NAMES` not in `stats`, at the rows already."""
    return local_level(
        {name: at_rows[name] if name in at_rows else stats[name][rows] for name in WINDOW_NAMES},
        thresholds,
        None,
        fall.pick(rows),
        None if planned is None else planned[rows],
    )


def _local_level_rows(
    stats: dict[str, np.ndarray],
    thresholds: Thresholds,
    pooled: np.ndarray | None,
    fall: FallReading | None,
    planned: np.ndarray | None = None,
) -> LocalLevel:
    """`local_level` of a block of rows in one go."""
    n, n_late, n_last = stats["count"], stats["count_half"], stats["count_quarter"]
    mean, late, last = stats["mean"], stats["mean_half"], stats["mean_quarter"]
    n_early, n_third = n - n_late, n_late - n_last
    with np.errstate(invalid="ignore", divide="ignore"):
        early = (n * mean - n_late * late) / n_early
        x_early = (n * stats["x_mean"] - n_late * stats["x_mean_half"]) / n_early
        slope = (late - early) / (stats["x_mean_half"] - x_early)
        # the slope over the later half alone (its third quarter against its last)
        third = (n_late * late - n_last * last) / n_third
        x_third = (n_late * stats["x_mean_half"] - n_last * stats["x_mean_quarter"]) / n_third
        late_slope = (last - third) / (stats["x_mean_quarter"] - x_third)
        # the window before this one: did the curve fall there too?
        n_prior = stats["count_double"] - n
        prior = (stats["count_double"] * stats["mean_double"] - n * mean) / n_prior
        x_prior = (stats["count_double"] * stats["x_mean_double"] - n * stats["x_mean"]) / n_prior
        prior_slope = (mean - prior) / (stats["x_mean"] - x_prior)
        line = mean + slope * (stats["x"] - stats["x_mean"])
        spread = np.sqrt(np.maximum(stats["std"] ** 2 - slope**2 * stats["x_var"], 0.0))
    floor = np.abs(mean) * thresholds.sigma_floor_frac
    noise = np.maximum(np.nan_to_num(spread, nan=0.0), floor)
    enough = (n_early >= 2) & (n_third >= 2) & (n_last >= 2)
    # a convex fall's trend read at t undershoots the curve, the last quarter's mean
    # overshoots it: the higher of the two is the cautious level
    level = np.minimum(mean, np.fmax(line, stats["mean_quarter"]))
    if planned is not None and pooled is not None:
        # a fall that quickens (the LR still climbing, or just at its peak) is concave: its
        # trend read at t is above the curve, and the last quarter's mean lags it further.
        # Only where the pooled noise or a widened window's points judge it: the spread of
        # ten points around their own trend is too often small, and a wander of the first
        # warmup points passed
        judged = np.isfinite(pooled) | (n >= thresholds.widened_window_points)
        with np.errstate(invalid="ignore"):
            concave = planned & (late_slope < slope) & judged
        level = np.where(concave, np.minimum(mean, line), level)
    cautious = level
    std = np.maximum(np.nan_to_num(stats["std"], nan=0.0), floor)
    with np.errstate(invalid="ignore", divide="ignore"):
        # a fall that slows down or keeps its pace (warmup, a decay) goes on; one that
        # speeds up at the end of the window (a memorised batch served again and again),
        # or that began inside it after a flat stretch (a dip of noise), is no curve to
        # read a level from
        quickens = -late_slope > thresholds.level_fall_speedup * -slope
        if planned is not None:
            # a warmup's fall speeds up as the LR climbs to its peak: the LR, not a
            # memorised batch, quickens it (a fall that began inside the window after a
            # flat stretch is still a dip of noise, the LR's plan or not)
            quickens &= ~planned
        steady = ~quickens & (
            (n_prior < 2) | (-prior_slope * thresholds.level_fall_speedup >= -slope)
        )
        # and a fall, not noise: a window of ten points has halves of five, whose means
        # differ by chance more often than a spike bar allows
        judge = noise if pooled is None else np.where(np.isfinite(pooled), pooled, noise)
        # a fall the LR's warmup plans needs half the proof of one found in the loss alone:
        # near the warmup's end a ten-point window's halves differ by 2-3 of their standard
        # errors, while its mean lags the curve by 1-2 sigma
        fall_bar = np.full(n.shape, float(thresholds.level_fall_z))
        if planned is not None:
            fall_bar[planned] /= 2.0
        fall_z = (early - late) / (judge * np.sqrt(1.0 / n_early + 1.0 / n_late))
        may_fall = (
            enough
            & steady
            & (
                fall_z_with_windows(fall_z, (prior, mean, n_prior, n), judge, fall, thresholds)
                >= fall_bar
            )
        )
    fall_noise = noise
    if fall is not None and fall.dense:  # read where a fall may be only
        level, fall_noise = _level_now_at(
            may_fall, stats, ((x_early, early), (x_third, third)), fall, thresholds, noise
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        # level_lag_sigma = inf turns the switch off: times a zero noise (a flat window) NaN,
        # which passes no comparison below, as off means
        bar = thresholds.level_lag_sigma * noise
        # the spike bar the window's own mean and std make sits this far above the one
        # the local level and the spread around the trend make: the fall's own doing
        lowered = (mean - level) + thresholds.spike_sigma * (std - noise)
        falling = may_fall & (mean > level) & (lowered >= bar)
        rising = enough & (line - mean >= bar) & (-fall_z >= thresholds.level_fall_z)
    fall_slope, fall_line = sparse_fall(
        (prior, mean, n_prior, n),
        (prior_slope, stats["x"] - stats["x_mean"]),
        pooled,
        fall,
        planned,
        thresholds,
    )
    return LocalLevel(
        level=np.where(falling, level, mean),
        sigma=np.where(falling, fall_noise, std),
        falling=falling,
        rise_slope=np.where(rising, slope, 0.0),
        line=np.where(rising, line, mean),
        # the bend and the last few points are read for a fall the window shows; where it
        # shows none they follow the noise's wander (a low of a few AR(1) points put them
        # 2 sigma under the mean, and a wander back up summed past the excess bar)
        near=np.where(enough, np.fmin(np.where(falling, level, cautious), mean), mean),
        fall_slope=fall_slope,
        fall_line=fall_line,
    )


def _level_now_at(
    rows: np.ndarray,
    stats: dict[str, np.ndarray],
    halves: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    fall: FallReading,
    thresholds: Thresholds,
    noise: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """`fall_curve.level_now` at the `rows` (a mask) only, where a fall may be judged: the
    window's mean and noise elsewhere, which no row reads (a level and its noise count only
    where the window falls). Each of its numbers is a row's own: the same bits as over
    every row, at a few dozen passes over the rows that may fall, not over every row (on
    most of a long log the window does not fall)."""
    at = np.flatnonzero(rows)
    level, fall_noise = stats["mean"].copy(), noise.copy()
    if at.size == 0:
        return level, fall_noise
    (x_early, early), (x_third, third) = halves
    level[at], fall_noise[at] = level_now(
        {name: stats[name][at] for name in _LEVEL_NOW_NAMES},
        (x_early[at], early[at]),
        (x_third[at], third[at]),
        fall.rows(at),
        thresholds,
        noise[at],
    )
    return level, fall_noise


# what `fall_curve.level_now` reads of a window's statistics
_LEVEL_NOW_NAMES: tuple[str, ...] = ("x", "mean", "x_mean_quarter", "mean_quarter")
_LEVEL_NOW_NAMES += ("count", "count_half", "count_quarter")


def planned_fall_rows(
    steps: np.ndarray, lr_plan: LrPlan | None, window_steps: int
) -> np.ndarray | None:
    """Per row: does its trailing window reach into the LR's planned warmup (the warmup's
    last step plus a window)? There the loss's fall speeds up with the LR and is fastest at
    its peak, so a window that ends there sees its fall quicken; None without a warmup."""
    if lr_plan is None or lr_plan.warmup_end_step is None:
        return None
    return steps <= lr_plan.warmup_end_step + window_steps


class LevelAt(Pointwise):
    """The `LocalLevel.level` of a series (the grad norm) at the rows read only, a chunk
    of rows at a time as `windows.TrailingAt` takes its trailing mean."""

    def __init__(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        window_steps: int,
        plan: WindowPlan,
        thresholds: Thresholds,
    ):
        self.steps, self.values, self.window_steps = steps, values, window_steps
        self.plan, self.thresholds, self.size = plan, thresholds, values.size
        self._kept: tuple[int, LocalLevel] | None = None
        # `level_floor.may_reach`'s masks of rows for the bars a later call will ask, by bar
        self.reach_kept: dict[float, np.ndarray] = {}

    def _at(self, rows: np.ndarray) -> np.ndarray:
        flat = rows.ravel()
        reach = self.plan.reach_rows if not self.plan.by_step else int(self.window_steps)
        if flat.size and flat.size * (reach + 1) * 4 < self.size:
            return self._few(flat).reshape(rows.shape)
        return self._read(rows, lambda level: level.level)

    def _few(self, rows: np.ndarray) -> np.ndarray:
        """The level at a few rows: each row's window cut out, the cut-outs laid end to end
        and moved apart, so that a window over them holds what it holds in the whole
        series (`windows.trailing_median_at` does the same for a median)."""
        rows = rows.astype(np.int64)
        if self.plan.by_step:
            first = np.searchsorted(self.steps, self.steps[rows] - self.window_steps)
        else:
            first = rows - self.plan.reach_rows
        sizes = rows - first + 1
        ends = np.cumsum(sizes)
        piece = np.repeat(np.arange(rows.size), sizes)
        at = np.arange(int(ends[-1])) - np.repeat(ends - sizes, sizes) + np.repeat(first, sizes)
        present = at >= 0  # a row window reaching before the start: nothing there
        values = np.where(present, self.values[np.maximum(at, 0)], np.nan)
        gap = 2 * int(self.window_steps) + 2
        if self.plan.by_step:
            moved = self.steps[at] - np.repeat(self.steps[first], sizes) + piece * gap
        else:
            moved = np.arange(at.size, dtype=np.int64)
        chunks = [  # the cut-outs are at most a quarter of the series: a chunk or a few
            trailing_chunk_at(moved, values, self.window_steps, self.plan, WINDOW_NAMES, c)
            for c in range(-(-at.size // windows.CHUNK_ROWS))
        ]
        stats = {name: np.concatenate([c[name] for c in chunks]) for name in WINDOW_NAMES}
        return local_level({k: v[ends - 1] for k, v in stats.items()}, self.thresholds).level

    def basis(self, row: int) -> str:
        """'local-level' where the row's level is the local level of a fall, else 'mean'."""
        falling = self._read(np.array([row]), lambda level: level.falling)
        return "local-level" if falling[0] else "mean"

    def _read(self, rows: np.ndarray, part) -> np.ndarray:
        chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
        out = np.empty(rows.shape)
        chunk_of = rows // chunk_rows
        for chunk in plain_numpy.unique(chunk_of).tolist():  # the chunks read, not every chunk
            if self._kept is None or self._kept[0] != chunk:
                self._kept = None  # the chunk kept goes before the next one is computed
                stats = trailing_chunk_at(
                    self.steps, self.values, self.window_steps, self.plan, WINDOW_NAMES, chunk
                )
                self._kept = (chunk, local_level(stats, self.thresholds))
                del stats
            here = chunk_of == chunk
            out[here] = part(self._kept[1])[rows[here] - chunk * chunk_rows]
        return out


def level_changes(
    steps: np.ndarray,
    loss: np.ndarray,
    thresholds: Thresholds,
    memory: NoiseMemory | None = None,
) -> np.ndarray:
    """The rows where the loss stepped down to a new level (an epoch boundary, an LR
    step): each the first point of the new level.

    A step, not a fall: the median of the `level_change_points` points from the row
    on is below that of the points before it by `level_change_frac` of the level and
    `level_change_sigma` times the point-to-point noise, and by `level_change_ratio`
    times the change before the step (between the medians one step further out) or a
    further fall after it (a warmup fall changes as much there, a step does not; a rise
    after it is an event on the new level). Of neighbouring rows that pass, the deepest.
    The same test on medians of 2 and `SETTLED_SPAN` times as many points, at the same
    odds (their bar shrinks as their chance wander does), adds the steps too small
    for the short medians where the new level held that long (a drop of 8-12% in
    noise of 3% of the level). Taken a chunk of rows at a time. `memory`: the loss
    noise's, when the caller has measured it (else measured here).
    """
    k = int(thresholds.level_change_points)
    # the noise's mean reaches 8 m back, the medians 2 m either side, m up to SETTLED_SPAN k
    reach = 12 * SETTLED_SPAN * k
    memory = memory or noise_memory_of(loss, thresholds)
    wander = _memory_widening(memory, k)
    chunk_rows = windows.CHUNK_ROWS

    def chunk_changes(first: int) -> np.ndarray:
        lo, hi = max(0, first - reach), min(loss.size, first + chunk_rows + reach)
        chunk = ChunkLoss(loss[lo:hi])
        rows = _changes_in(chunk, k, thresholds, wander) + lo
        # medians of m times as many points move 1/sqrt(m) as far by chance: a step that
        # noise of a few % of the level (or its wander) hides from the k-point medians passes
        # there at the same odds, where the new level held for that many points (a drop of
        # 8-15% in noise of 3% with memory: the step a fine-tune's epoch boundary makes)
        span = 2
        while span <= SETTLED_SPAN:
            m = span * k
            wide = _memory_widening(memory, m) * math.sqrt(1.0 / span)
            # moved back no further than the 2 k medians move theirs: the end of an event
            # of a few dozen points reads as a step down, and 4 k rows back from it lies
            # the level before the event
            longer = _changes_in(chunk, m, thresholds, wide, min(m, 2 * k)) + lo
            # only where the medians further out exist on both sides, so that a fall that
            # goes on (the first points of a warmup) is told from a step
            longer = longer[(longer >= 2 * m) & (longer + 2 * m <= loss.size)]
            rows = _with_longer(rows, longer, m)
            span *= 2
        # a new level that held a few points before an event rose over it (the medians
        # straddle the dip and the event, and miss the step or place it early)
        short = short_drops(loss[lo:hi], thresholds, memory, chunk)
        rows = merge_short(chunk, rows - lo, short, k) + lo
        return rows[(rows >= first) & (rows < first + chunk_rows)]

    # each chunk's changes are its own: two chunks at once where the pipeline lends a thread
    found = list(threads.in_order(chunk_changes, range(0, loss.size, chunk_rows), workers=2))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _with_longer(rows: np.ndarray, longer: np.ndarray, apart: int) -> np.ndarray:
    """`rows` and the changes the longer medians found more than `apart` rows from any."""
    if longer.size == 0 or rows.size == 0:
        return longer if rows.size == 0 else rows
    padded = np.concatenate([[np.iinfo(np.int64).min // 2], rows, [np.iinfo(np.int64).max // 2]])
    at = np.searchsorted(padded, longer)
    nearest = np.minimum(longer - padded[at - 1], padded[at] - longer)
    return np.union1d(rows, longer[nearest > apart])


def _memory_widening(memory: NoiseMemory, k: int) -> float:
    """How much wider than for independent noise the step between two k-point medians is,
    in units of the step-to-step noise the bar is counted in.

    Noise with memory (AR(1)-like, lag-1 autocorrelation rho) wanders: k neighbours sit
    high or low together, so their median moves sqrt(F(k)) times as far, while the
    step-to-step change sees only sqrt(1 - rho) of the noise. Without this, the wander of
    strongly correlated noise reads as the loss stepping down, and the spike baseline
    restarts where nothing happened.
    """
    if memory.independent:
        return 1.0
    return inflation(memory, k) / math.sqrt(max(1.0 - memory.lag1, 0.05))


def _changes_in(
    chunk: ChunkLoss,
    k: int,
    thresholds: Thresholds,
    wander: float = 1.0,
    back: int | None = None,
) -> np.ndarray:
    """The first rows of the new levels where the medians of `k` points either side pass
    the bars of `level_changes`; `back`: the points `_first_of_new_level` reads (`k`
    without it)."""
    values = chunk.values
    n = values.size
    if k < 2 or n < 4 * k:
        return np.zeros(0, dtype=np.int64)
    # ending(j): the median of values[j - k + 1 .. j] (NaN past either end)
    ending, open_rows = _step_medians(chunk, k, thresholds.level_change_frac)
    if open_rows is not None and open_rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    # at the rows 1 .. n - k, where both exist: the median of the k points from the row on
    # less that of the k points before it
    before = ending(np.arange(n - k) if open_rows is None else open_rows)
    step = ending(np.arange(k, n) if open_rows is None else open_rows + k) - before
    with np.errstate(invalid="ignore"):
        # under 0 (a flat stretch at 0, no level and no noise, meets every bar with 0) and by
        # `level_change_frac` of the level before: at or under the lower bar, in one pass
        bar = np.abs(before)
        bar *= -thresholds.level_change_frac
        np.minimum(bar, -LEAST_ABOVE_ZERO, out=bar)
        passed = np.flatnonzero(step <= bar)
    # the other bars at the rows deep enough only: few or none on most logs, where the noise
    # and the drift are then never read (each a pass over the chunk, the noise a polars one)
    if passed.size == 0:
        return np.zeros(0, dtype=np.int64)
    step_at = step[passed]
    rows = (passed if open_rows is None else open_rows[passed]) + 1
    del step, bar, before

    def at(offset: int) -> np.ndarray:  # ending[i + offset] at the rows
        return ending(rows + offset)

    # a fall that goes on shows as a change before the step either way (a rise into it is
    # no level to step down from) and as a further fall after it; a rise after it is an
    # event on the new level (a bump or a shift right after an epoch drop), not a sign that
    # the loss never stepped down
    drift = np.fmax(np.abs(at(-1) - at(-k - 1)), at(k - 1) - at(2 * k - 1))
    noise = chunk.change_noise(k)[rows]
    with np.errstate(invalid="ignore"):
        passes_at = (step_at <= -thresholds.level_change_sigma * wander * noise) & (
            -step_at >= thresholds.level_change_ratio * drift
        )
    if not passes_at.any():
        return np.zeros(0, dtype=np.int64)
    rows, step_at = rows[passes_at], step_at[passes_at]
    depth = np.full(n, np.nan)
    depth[rows] = step_at
    nearby = plain_numpy.series(depth).fill_nan(None)
    deepest = nearby.rolling_min(2 * k + 1, min_samples=1, center=True).to_numpy()
    rows = _sharpest(values, rows[step_at <= deepest[rows]], k)
    return plain_numpy.unique(_first_of_new_level(values, rows, k if back is None else back))


def _step_medians(chunk: ChunkLoss, k: int, frac: float):
    """The medians of `k` points by the row they end at, as a function of rows (NaN past
    either end), and the rows i where the median of the `k` points from i + 1 on may be
    under that of the `k` to i by `frac` of it: `_changes_in`'s first bar, as the medians'
    bounds tell (`ChunkLoss.median_bounds`, values above 0: the bar is then under 1 - frac
    times the median before). On most of a long log no row may, and the medians are never
    worked out; where a few may, only at them. None for the rows without such bounds, or
    where many rows may: the whole chunk's medians are then cheaper."""
    least = k // 2 + 1
    bounds = chunk.median_bounds(k, least)
    if bounds is not None:
        low, high = bounds
        fall = fall_ceiling(frac)
        with np.errstate(invalid="ignore"):  # NaN at the first rows: no median, no step
            open_rows = np.flatnonzero(low[k:] <= high[: low.size - k] * fall)
        if 4 * open_rows.size * k < low.size:
            return (lambda rows: chunk.medians_at(k, least, rows)), open_rows
    whole = chunk.medians_ending(k, least)
    padded = np.concatenate([np.full(2 * k, np.nan), whole, np.full(2 * k, np.nan)])
    return (lambda rows: padded[2 * k + rows]), None


def _sharpest(values: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Each row moved to where, within k // 2 rows of it, the means of the k points before
    and the k points from it on differ most: the medians pass over a few rows around a
    step, and which of them is deepest is the noise's choice. A row one or two early
    leaves points of the old, higher level in the restarted window, whose mean and std
    then hide a rise right after the drop."""
    if rows.size == 0:
        return rows
    n, half = values.size, k // 2
    finite = np.isfinite(values)
    total = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    count = np.concatenate([[0], np.cumsum(finite)])
    at = rows[:, None] + np.arange(-half, half + 1)[None, :]
    lo, hi = np.clip(at - k, 0, n), np.clip(at + k, 0, n)
    mid = np.clip(at, 0, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        before = (total[mid] - total[lo]) / (count[mid] - count[lo])
        after = (total[hi] - total[mid]) / (count[hi] - count[mid])
    drop = np.where((at >= 1) & (at < n), np.nan_to_num(before - after, nan=-np.inf), -np.inf)
    return at[np.arange(rows.size), np.argmax(drop, axis=1)]


_FILTERS_SWAPPED = threading.Lock()


def _first_of_new_level(values: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Each row moved back, by up to k // 2 rows, to the first row already at the new level:
    below the midpoint between the median of the k points before the rows looked at and
    the median of the k from the row on, and so is the median of it and the next two (or
    the row is within a quarter of the step from the new level: one point of it, then an
    event); or, up to 2 k rows back, to the first of two points in a row that near the new
    level right after a point of the old.

    The means `_sharpest` compares count a spike or bump right after the drop as the old
    level (it lifts the mean after), and move the change past it: the event is then judged
    against the window before the drop, where a rise smaller than the drop is no rise."""
    if rows.size == 0:
        return rows
    n, half = values.size, k // 2
    clean = np.where(np.isfinite(values), values, np.nan)

    def take(at: np.ndarray) -> np.ndarray:
        return np.where((at >= 0) & (at < n), clean[np.clip(at, 0, n - 1)], np.nan)

    # catch_warnings swaps the process's filters: chunks worked out at once take turns here
    with _FILTERS_SWAPPED, np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN stretch: no move
        old = plain_numpy.nanmedian(
            take(rows[:, None] - half - np.arange(1, k + 1)[None, :]), axis=1
        )
        new = plain_numpy.nanmedian(take(rows[:, None] + np.arange(k)[None, :]), axis=1)
        mid = ((old + new) / 2.0)[:, None]
        offsets = np.arange(-2 * k, 1)
        at = rows[:, None] + offsets[None, :]
        next_three = plain_numpy.nanmedian(
            take(at[:, :, None] + np.arange(3)[None, None, :]), axis=2
        )
        here = take(at)
        # a lone point of the new level before a bump: nearer it than a dip of the old goes
        quarter = (new + (old - new) / 4.0)[:, None]
        near_new = here < quarter
        below = (offsets >= -half) & (here < mid) & ((next_three < mid) | near_new)
        # two such points up to 2 k rows back, after a point of the old level: the drop,
        # then a bump of several points whose end the medians read as the step
        below |= near_new & (take(at + 1) < quarter) & (take(at - 1) >= mid)
    below[:, -1] = True  # the row itself, where nothing earlier is
    return at[np.arange(rows.size), np.argmax(below, axis=1)]


def segment_steps(steps: np.ndarray, changes: np.ndarray, window_steps: int) -> np.ndarray:
    """`steps` moved apart at each level change by more than a window, so that a window by
    step never reaches back across one (the spike baseline restarts at the change)."""
    segment = np.zeros(steps.size, dtype=np.int64)
    segment[changes] = 1
    np.cumsum(segment, out=segment)
    return steps + segment * (2 * int(window_steps) + 2)


def ratio_reference(
    loss: np.ndarray,
    rows: np.ndarray,
    level: np.ndarray,
    falling: np.ndarray,
    thresholds: Thresholds,
) -> np.ndarray:
    """What a point's size as a multiple is measured against (materiality (c)): its baseline
    `level`, and on a falling curve the lower of that and the median of the
    `recovery_median_points` points either side of it (the curve the run was on at the
    point: the local level read from the window before lags the fall by part of a window)."""
    out = np.asarray(level, dtype=np.float64).copy()
    if not falling.any():
        return out
    points = int(thresholds.recovery_median_points)
    at = rows[falling].astype(np.int64)
    offsets = np.concatenate([np.arange(-points, 0), np.arange(1, points + 1)])
    around = at[:, None] + offsets[None, :]
    inside = (around >= 0) & (around < loss.size)
    values = np.where(inside, loss[np.clip(around, 0, loss.size - 1)], np.nan)
    values[~np.isfinite(values)] = np.nan
    enough = np.isfinite(values).sum(axis=1) > 0
    median = np.full(at.size, np.nan)
    if enough.any():
        median[enough] = plain_numpy.nanmedian(values[enough], axis=1)
    out[falling] = np.fmin(out[falling], median)
    return out
