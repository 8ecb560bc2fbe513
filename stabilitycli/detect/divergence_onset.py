"""§4: where a divergence began - the onset fits of the divergence rule (detect/divergence.py).

The window that first passes the trend test can open long after a slow rise
began; these fits look back over the logged points to date its start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from stabilitycli.detect.divergence_power import (
    POWER_FIT_BACK,
    POWER_FIT_LEAD,
    POWER_FIT_ROUNDS,
    POWER_FIT_STARTS,
    PowerFit,
    linear_ramp_sse,
    power_fit,
)
from stabilitycli.detect.trend import Binned, bin_medians, running_sum_from, suffix_sum_from


def onset(
    steps: np.ndarray,
    loss: np.ndarray,
    binned: Binned,
    j: int,
    m: int,
    fit_bins: int,
    falling_evidence: float,
    earliest_step: int,
    lr: np.ndarray | None = None,
) -> tuple[int, float, int, PowerFit | None]:
    """Where the rise of the first diverging window (bins j..j+m-1) began, the loss there
    (the median of one fine bin), that bin's last step, and the fit of the rise's whole
    shape when that dated it (`_fitted_rise`; `lr`, the LR at each of `steps` when the
    log has it, is part of the trend that fit carries on under the rise).

    The window that first passes the test can open long after the rise began
    (a slow ramp moves a short window only by chance), so the fit looks back
    to where the loss was lowest before the window ends, plus half a window of
    what came before it (never before `earliest_step`), and fits the bend
    there on finer bins (up to `fit_bins` of them, each a median).
    """
    floor_bin = int(np.searchsorted(binned.steps, earliest_step, side="left"))
    # the trough of a 5-bin running median: with one point per bin (a sparse log), a lone
    # low point (a heavy-tailed draw) would otherwise be the trough, and the fit would
    # look for the start after it
    trough_bin = floor_bin + int(np.argmin(_running_median(binned.values[floor_bin : j + m])))
    first_bin = max(floor_bin, min(trough_bin, j) - m // 2)
    lo = int(np.searchsorted(steps, binned.steps[first_bin], side="left"))
    hi = int(np.searchsorted(steps, binned.end_steps[j + m - 1], side="right"))
    bin_points = max(1, math.ceil((hi - lo) / fit_bins))
    fine = bin_medians(steps[lo:hi], loss[lo:hi], bin_points)
    # the rise begins where a "flat, then rising in a line" fit bends, not at the
    # region's first bin (it may open on a flat stretch or an earlier fall)
    at, falling_bracket = _hinge_onset(fine.values, falling_evidence)
    if falling_bracket is None:
        # level before: the ramp fit may start a whole window before the trough, since a
        # noise minimum can lie after the true start
        wide_bin = max(floor_bin, min(trough_bin, j) - m)
        fit_from = int(np.searchsorted(steps, binned.steps[wide_bin], side="left"))
        # ...but not in its first quarter window, so that a start has a level to rise from
        earliest_start = int(binned.steps[min(wide_bin + m // 4, j + m - 1)])
        latest_start = int(binned.end_steps[j + m - 1])
    else:
        # falling before: the turn lies between the two fits' bends, and the level part
        # of the ramp fit must not reach back into the fall
        fit_from = lo + int(np.searchsorted(steps[lo:hi], fine.steps[falling_bracket[0]]))
        earliest_start = int(steps[fit_from])
        latest_start = int(fine.end_steps[falling_bracket[1]])
    decay = _decay_before(steps, loss, int(np.searchsorted(steps, earliest_step)), fit_from)
    if decay is not None:
        # the run's own decay carries its level back to where it had fallen to e^-4 (not
        # into the fast early drop): a longer stretch before the rise pins its start
        reach_step = decay.step_down_to(DECAY_LOOKBACK)
        fit_from = min(fit_from, int(np.searchsorted(steps, reach_step, side="left")))
    pair = _ramp_pair(steps[fit_from:], loss[fit_from:], earliest_start, latest_start, decay)
    if pair is None:
        return int(fine.steps[at]), float(fine.values[at]), int(fine.end_steps[at]), None
    start_step = int(pair[0])
    # the straight ramp dates an accelerating rise late: its whole shape is fitted too, and
    # kept where it fits the points better than the straight ramp over the same stretch
    fitted = _fitted_rise(steps, loss, start_step, earliest_step, pair[1], lr)
    if fitted is not None:
        start_step = fitted.start_step
    # the level the rise starts from: the median of one fine bin's worth of points from there
    first = int(np.searchsorted(steps, start_step, side="left"))
    last = min(steps.size, first + bin_points) - 1
    return start_step, float(np.median(loss[first : last + 1])), int(steps[last]), fitted


def _fitted_rise(
    steps: np.ndarray,
    loss: np.ndarray,
    guess: int,
    earliest_step: int,
    ramp_end: float,
    lr: np.ndarray | None,
) -> PowerFit | None:
    """The power fit of `divergence_power` from the straight ramp's start `guess` (which
    ends its rise at `ramp_end`), when it fits better than that ramp; else None.

    Each round fits over a stretch reaching `POWER_FIT_BACK` times the rise's
    length before its start (never before `earliest_step`), with the run's decay
    curve fitted to what was logged before that start and the LR (a decaying LR
    anneals the loss down: the curve's own fall, not the rise's), and starts from
    the first tenth of the stretch to halfway between the guess and the end of the
    log."""
    end = float(steps[-1])
    start, fit = float(guess), None
    floor = int(np.searchsorted(steps, earliest_step, side="left"))

    def suffix_sums(columns: Callable[[int, int], list[np.ndarray]], n: int, at: list) -> list:
        return _sums_at(columns, n, at, from_end=True)

    for _ in range(POWER_FIT_ROUNDS):  # loop over a few refits, each over the whole stretch
        before = int(np.searchsorted(steps, start))
        # the decay is fitted from the steepest fall on: a warmup's slow first fall before it
        # is no part of the curve a power law or an exponential follows
        steepest = _steepest_fall(steps[floor:before], loss[floor:before])
        shape = _decay_before(steps, loss, floor + steepest, before)
        reach = start - POWER_FIT_BACK * (end - start)
        lo = max(floor + steepest, int(np.searchsorted(steps, reach)))
        if steps.size - lo < 8:
            return fit
        x = steps[lo:].astype(float)
        y = _clip_wild(loss[lo:].astype(float))
        trend = [] if shape is None else [shape.at(x)]
        if lr is not None and np.ptp(lr[lo:]) > 0:
            trend.append(lr[lo:] / np.max(np.abs(lr[lo:])))
        latest = min(end, float(guess) + 0.5 * (end - float(guess)))
        room = x[(x >= x[0] + POWER_FIT_LEAD * (start - x[0])) & (x <= latest) & (x < end)]
        if room.size < 2:
            return fit
        grid = room[np.unique(np.linspace(0, room.size - 1, POWER_FIT_STARTS).round().astype(int))]
        best = power_fit(x, y, trend, grid, suffix_sums)
        if best is None:
            return fit
        # then every logged point between the best grid start's neighbours
        at = int(np.searchsorted(grid, best[1]))
        near = room[(room >= grid[max(0, at - 1)]) & (room <= grid[min(grid.size - 1, at + 1)])]
        best = power_fit(x, y, trend, near, suffix_sums) or best
        if best[1] <= room[0]:
            # at the first start tried: the fit wanted to start before the stretch, where
            # the trend it carries on is not the curve's (a warmup, an earlier fall)
            return fit
        # a straight rise is the ramp fit's own shape, which also lets it level off: the
        # power fit dates only a rise that accelerates, and only where it fits better
        if best[2] < 2 or best[0] >= linear_ramp_sse(x, y, trend, float(guess), ramp_end):
            return fit
        start = best[1]
        fit = PowerFit(int(best[1]), best[2], best[0], int(x[0]), int(x[-1]), guess)
    return fit


def _steepest_fall(steps: np.ndarray, loss: np.ndarray) -> int:
    """The index where the loss falls fastest, read from the 5-bin running median of
    `DECAY_FIT_BINS` bin medians (0 for too few points)."""
    if steps.size < 16:
        return 0
    bins = bin_medians(steps, loss, math.ceil(steps.size / DECAY_FIT_BINS))
    smooth = _running_median(bins.values)
    if smooth.size < 3:
        return 0
    fastest = int(np.argmin(np.diff(smooth) / np.diff(bins.steps.astype(float))))
    return int(np.searchsorted(steps, bins.steps[fastest]))


# a fitted onset the raw loss still falls from by this fraction of its level (in a strictly
# falling run of points) is moved to the bottom of that fall: the rise cannot start above it
ONSET_FALL_FRAC = 0.05
ONSET_FALL_POINTS = 3  # ...over at least this many falling steps: one noisy dip is no fall


def past_the_fall(
    steps: np.ndarray, loss: np.ndarray, start: int, level: float, level_end: int
) -> tuple[int, float, int]:
    """The onset, moved to where the loss stops falling when the fit put it mid-fall.

    The ramp fit models decay plus rise, so on a short log its bend can lie a few
    points before the lowest one; a sentence "rose from step S" is then false for the
    points after S that are lower still.
    """
    i = int(np.searchsorted(steps, start, side="left"))
    if i >= loss.size - 1:
        return start, level, level_end
    falls = np.diff(loss[i:]) < 0
    run = int(np.argmin(falls)) if not falls.all() else falls.size  # strictly falling points
    bottom = i + run
    if run < ONSET_FALL_POINTS or not np.isfinite(loss[bottom]):
        return start, level, level_end
    if level - float(loss[bottom]) <= ONSET_FALL_FRAC * abs(level):
        return start, level, level_end
    return int(steps[bottom]), float(loss[bottom]), int(steps[bottom])


DECAY_FIT_BINS = 512  # the decay before the fit region is fitted to this many bin medians
DECAY_TIME_CONSTANTS = np.geomspace(1e-3, 3.0, 80)  # widths tried, as fractions of the stretch
# power laws (1 + t / w)^-p, as training curves follow; p = inf is the exponential exp(-t / w)
DECAY_POWERS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, math.inf)
DECAY_EVIDENCE = 4.0  # Akaike's 2 per parameter, for the decay's width and power
DECAY_LOOKBACK = math.exp(-4.0)  # the ramp fit reaches back to where the decay is down to this


@dataclass(frozen=True)
class _Decay:
    """A decay shape (1 + (step - from_step) / width)^-power, exp(-(step - from_step) / width)
    when the power is infinite: 1 at `from_step`, falling toward 0."""

    from_step: float
    width: float
    power: float

    def at(self, steps: np.ndarray) -> np.ndarray:
        """The shape at each of `steps`, in one new array (each step of the formula in
        place: the steps of a long ramp fit are millions)."""
        t = steps - self.from_step
        t /= self.width
        if math.isinf(self.power):
            np.negative(t, out=t)
            return np.exp(t, out=t)
        t += 1.0
        t **= -self.power  # `t ** p`, with its fast paths (p = -1: a reciprocal)
        return t

    def step_down_to(self, fraction: float) -> float:
        """The step where the shape has fallen to `fraction` of its value at from_step."""
        t = -math.log(fraction) if math.isinf(self.power) else fraction ** (-1 / self.power) - 1
        return self.from_step + t * self.width


def _decay_before(steps: np.ndarray, loss: np.ndarray, first: int, last: int) -> _Decay | None:
    """The shape of "a level plus a decay" fitted by least squares to the loss logged at
    indices first..last-1; None when the loss was not falling there.

    Training curves fall ever more slowly, so a straight fall fitted before
    the rise must be short, and a short stretch pins the level the rise
    starts from poorly. The shape (power and width) is tried on a grid (the
    level and the size of the decay are linear), on bin medians so that
    heavy-tailed noise cannot bend it and the cost does not grow with the log.
    """
    if last - first < 4:
        return None
    bins = bin_medians(
        steps[first:last], loss[first:last], math.ceil((last - first) / DECAY_FIT_BINS)
    )
    x = (bins.steps - bins.steps[0]).astype(float)
    if bins.values.size < 4 or not x[-1] > 0:
        return None
    widths = x[-1] * DECAY_TIME_CONSTANTS
    t = x[None, None, :] / widths[None, :, None]
    powers = np.array(DECAY_POWERS)[:, None, None]
    finite = np.isfinite(powers)
    shapes = np.where(finite, (1.0 + t) ** -np.where(finite, powers, 1.0), np.exp(-t))
    shapes = shapes.reshape(-1, x.size)
    centred = shapes - shapes.mean(axis=1, keepdims=True)
    spread = (centred * centred).sum(axis=1)
    along = centred @ (bins.values - bins.values.mean())
    # along > 0: the loss falls with the shape (a positive decay)
    explained = np.where(
        (spread > 0) & (along > 0), along**2 / np.where(spread > 0, spread, 1.0), -np.inf
    )
    if not np.isfinite(explained).any():
        return None
    # ...and only where it beats a straight line clearly (Akaike's criterion for its two
    # shape parameters): a short or noisy stretch says nothing about the curve's shape
    total = float(((bins.values - bins.values.mean()) ** 2).sum())
    x_centred = x - x.mean()
    line = float(x_centred @ bins.values) ** 2 / float(x_centred @ x_centred)
    left_by_line, left_by_decay = total - line, total - float(explained.max())
    if not (left_by_decay > 0 and left_by_line > left_by_decay) or (
        x.size * math.log(left_by_line / left_by_decay) < DECAY_EVIDENCE
    ):
        return None
    p, w = np.unravel_index(int(np.argmax(explained)), (len(DECAY_POWERS), widths.size))
    return _Decay(float(bins.steps[0]), float(widths[w]), DECAY_POWERS[p])


RAMP_START_CANDIDATES = 256  # first pass of the ramp fit: start steps tried on a grid
RAMP_END_CANDIDATES = 64  # end steps tried (the last one is the end of the log)


def _ramp_onset(
    steps: np.ndarray,
    loss: np.ndarray,
    earliest_start_step: int,
    latest_start_step: int,
    decay_shape: _Decay | None = None,
) -> int | None:
    """The start of `_ramp_pair`'s fit (None when it found none)."""
    pair = _ramp_pair(steps, loss, earliest_start_step, latest_start_step, decay_shape)
    return None if pair is None else int(pair[0])


def _ramp_pair(
    steps: np.ndarray,
    loss: np.ndarray,
    earliest_start_step: int,
    latest_start_step: int,
    decay_shape: _Decay | None = None,
) -> tuple[float, float] | None:
    """Where a "level, then a straight rise, then level again" least-squares fit over the
    logged points, from the fit region to the end of the log, starts its rise.

    The binned bend sees only the region up to the first window that rose,
    a small part of a slow ramp, and knows the bend only to within a bin; the
    whole rise (to the end of the log, or to where it levels off again) pins
    its start far better. The start is searched from `earliest_start_step` up
    to `latest_start_step` on a grid, then on every logged point around the
    best grid point; the end on `RAMP_END_CANDIDATES` steps. Heavy-tailed
    noise is clipped first, so one wild point cannot move the fit. Given
    `decay_shape`, the loss before the start is a level plus that decay (the
    run still improving), not a straight fall.
    """
    finite = np.isfinite(loss)
    if finite.all():  # the usual case (finite_points): no copy of the loss, one of the steps
        x, y = steps.astype(float), _clip_wild(loss.astype(float, copy=False))
    else:
        x, y = steps[finite].astype(float), _clip_wild(loss[finite].astype(float))
    del finite
    decay = None if decay_shape is None else decay_shape.at(x)
    starts = x[(x >= earliest_start_step) & (x < latest_start_step) & (x < x[-1])]
    if starts.size < 2 or x.size < 4:
        return None
    # ends only after the earliest start: the stretch before it can be long (a decay); the
    # steps are sorted (the view's), so those points are a slice, not a copy
    later = x[int(np.searchsorted(x, starts[0], side="left")) :]
    end_grid = np.quantile(later, np.linspace(0, 1, RAMP_END_CANDIDATES))
    ends = np.unique(np.concatenate([end_grid, x[-1:]]))
    start_at = np.linspace(0, starts.size - 1, RAMP_START_CANDIDATES).round().astype(int)
    grid = starts[np.unique(start_at)]
    best_ramp = _ramp_fitter(x, y, decay)
    best = best_ramp(grid, ends)
    if best is None:
        return None
    # then every logged point around the best grid pair: the end first, then the start
    start_spacing = starts.size // RAMP_START_CANDIDATES + 1
    end_spacing = later.size // RAMP_END_CANDIDATES + 1
    at = int(np.searchsorted(x, best[1]))
    near_ends = x[max(0, at - end_spacing) : at + end_spacing + 1]
    best = best_ramp(np.array([best[0]]), near_ends) or best
    at = int(np.searchsorted(starts, best[0]))
    near_starts = starts[max(0, at - start_spacing) : at + start_spacing + 1]
    return best_ramp(near_starts, np.array([best[1]])) or best


def _ramp_fitter(
    x: np.ndarray, y: np.ndarray, decay: np.ndarray | None = None
) -> Callable[[np.ndarray, np.ndarray], tuple[float, float] | None]:
    """best(starts, ends): the (start, end) pair of the best least-squares fit of "falling or
    level, then a straight rise, then level": y = a + s * min(0, x - start) + b * clip(x -
    start, 0, end - start) with s <= 0 < b, every pair at once from prefix and suffix sums
    (linear in the points: each call sums the columns once, a chunk of rows at a time, and
    reads the sums at its starts and ends alone); None when no pair rises.

    The slope before the start matters: a run is often still improving when it
    turns, and a level fitted to a fall sits too high, which pushes the start late.
    Given a `decay` column (the run's own decay curve at each point), it takes
    the place of the straight fall: y = a + c * decay + b * clip(...), c >= 0.
    """
    origin, scale = x[0], max(float(x[-1] - x[0]), 1.0)
    # steps in [0, 1]: the sums of squares below subtract large, nearly equal numbers
    x = x - origin
    x /= scale
    n = x.size
    y_mean = y.mean()
    if decay is not None:
        d_u, d_uu, d_uy = -decay.sum(), decay @ decay, -(decay @ y)

    def columns(lo: int, hi: int) -> list[np.ndarray]:
        """Rows lo..hi-1 of the summed columns: 1, x, x^2, y, x y (and decay, decay x)."""
        xs, ys = x[lo:hi], y[lo:hi]
        out = [np.ones(hi - lo), xs, xs * xs, ys, xs * ys]
        if decay is not None:
            out += [decay[lo:hi], decay[lo:hi] * xs]
        return out

    def tail(starts: np.ndarray, ends: np.ndarray) -> list[list[np.ndarray]]:
        """Each column's sums over the points after each of starts, and each of ends."""
        after = [np.searchsorted(x, t, side="right") for t in (starts, ends)]
        return _sums_at(columns, n, after, from_end=True)

    def best(starts: np.ndarray, ends: np.ndarray) -> tuple[float, float] | None:
        starts, ends = (starts - origin) / scale, (ends - origin) / scale
        k_before = np.searchsorted(x, starts, side="left")
        before = _sums_at(columns, n, [k_before], from_end=False)[0]
        p0, p1, p2, py, pxy = (v[:, None] for v in before[:5])
        after_starts, after_ends = tail(starts, ends)
        c0, c1, c2, cy, cxy = (v[:, None] for v in after_starts[:5])
        e0, e1, e2, ey, exy = (v[None, :] for v in after_ends[:5])
        t0, t1 = starts[:, None], ends[None, :]
        # the ramp column g = max(0, x - t0) - max(0, x - t1)
        g = (c1 - t0 * c0) - (e1 - t1 * e0)
        gg = (
            (c2 - 2 * t0 * c1 + t0**2 * c0)
            - 2 * (e2 - (t0 + t1) * e1 + t0 * t1 * e0)
            + (e2 - 2 * t1 * e1 + t1**2 * e0)
        )
        gy = (cxy - t0 * cy) - (exy - t1 * ey)
        # the fall column u = min(0, x - t0); it is zero wherever g is not
        u = -(t0 * p0 - p1)
        uu = t0**2 * p0 - 2 * t0 * p1 + p2
        uy = -(t0 * py - pxy)
        ug = np.zeros(1)
        if decay is not None:
            # the decay stands in for the straight fall, as u = -decay (so a fall is still
            # s <= 0); it reaches under the ramp, so the two columns overlap
            u, uu, uy = d_u, d_uu, d_uy
            d0, d1 = (v[:, None] for v in after_starts[5:])
            e_d0, e_d1 = (v[None, :] for v in after_ends[5:])
            ug = -((d1 - t0 * d0) - (e_d1 - t1 * e_d0))
        v_gg, c_gy = gg - g**2 / n, gy - g * y_mean
        v_uu, c_uy, v_ug = uu - u**2 / n, uy - u * y_mean, ug - u * g / n
        det = v_uu * v_gg - v_ug**2
        safe_det = np.where(det > 0, det, 1.0)
        fall = (v_gg * c_uy - v_ug * c_gy) / safe_det
        rise = (v_uu * c_gy - v_ug * c_uy) / safe_det
        with_fall = (det > 0) & (fall <= 0) & (rise > 0)
        level_only = (v_gg > 0) & (c_gy > 0)
        # with s > 0 the constrained optimum is s = 0: "level, then a rise"
        explained = np.where(
            with_fall,
            fall * c_uy + rise * c_gy,
            np.where(level_only, c_gy**2 / np.where(v_gg > 0, v_gg, 1.0), -np.inf),
        )
        explained = np.where(t1 > t0, explained, -np.inf)
        if not np.isfinite(explained).any():
            return None
        i, k = np.unravel_index(int(np.argmax(explained)), explained.shape)
        return float(starts[i] * scale + origin), float(ends[k] * scale + origin)

    return best


RAMP_CHUNK_ROWS = 1 << 18  # rows of the ramp fit's columns made at a time (2 MB each)


def _sums_at(
    columns: Callable[[int, int], list[np.ndarray]],
    n: int,
    at: list[np.ndarray],
    *,
    from_end: bool,
) -> list[list[np.ndarray]]:
    """For each index array of `at`, each column's `[0] + cumsum` (or, `from_end`, its
    `cumsum` from the end with a 0 after it) read at those indices (0..n).

    The columns of `n` rows are made and summed `RAMP_CHUNK_ROWS` rows at a time, the
    sum carried from chunk to chunk in the order the whole column's cumsum adds, so the
    numbers are the whole column's: a long ramp fit reads a few hundred of them, and
    would otherwise hold a dozen columns as long as the log."""
    out: list[list[np.ndarray]] = []
    carries: list[float] = []
    firsts = range(0, n, RAMP_CHUNK_ROWS)
    for lo in reversed(firsts) if from_end else firsts:  # loop over chunks of rows
        hi = min(n, lo + RAMP_CHUNK_ROWS)
        chunk = columns(lo, hi)
        if not out:
            out = [[np.zeros(k.size) for _ in chunk] for k in at]
            carries = [0.0] * len(chunk)
        for c, column in enumerate(chunk):
            if from_end:
                sums = suffix_sum_from(column, hi == n, carries[c])
                carries[c] = float(sums[0])
            else:
                sums = running_sum_from(column, lo, carries[c])
                carries[c] = float(sums[-1])
            for q, k in enumerate(at):
                inside = (k >= lo) & (k <= hi)
                out[q][c][inside] = sums[k[inside] - lo]
    return out


def _running_median(y: np.ndarray, points: int = 5) -> np.ndarray:
    """Centred running median over `points` finite values (fewer at the ends)."""
    series = pl.Series(y, dtype=pl.Float64)
    return series.rolling_median(points, center=True, min_samples=1).to_numpy()


def _running_median_rows(y: np.ndarray, lo: int, hi: int, points: int = 5) -> np.ndarray:
    """`_running_median(y, points)[lo:hi]`, from those rows and the few either side that
    their windows reach: each window's median is of its own values alone."""
    reach = points // 2
    first = max(0, lo - reach)
    piece = _running_median(y[first : min(y.size, hi + reach)], points)
    return piece[lo - first : hi - first]


def _clip_wild(y: np.ndarray) -> np.ndarray:
    """Each value pulled to within 4 robust sigmas of its 5-point running median.

    The running median is taken `RAMP_CHUNK_ROWS` rows at a time, twice (for the
    offsets, then to add the clipped offsets back to): the ramp fit of a long rise
    holds one offset column, not the median, its copies and the offsets at once."""
    if y.size < 5:
        return y
    off = np.empty(y.size)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        np.subtract(y[lo:hi], _running_median_rows(y, lo, hi), out=off[lo:hi])
    magnitude = np.abs(off)
    # the median partitions its own copy: `magnitude` is that copy
    spread = 1.4826 * float(np.median(magnitude, overwrite_input=True))
    del magnitude
    if not spread > 0:
        return y
    np.clip(off, -4 * spread, 4 * spread, out=off)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        # the running median + the clipped offset
        np.add(_running_median_rows(y, lo, hi), off[lo:hi], out=off[lo:hi])
    return off


def _bend_fit(values: np.ndarray, flat_before: bool) -> tuple[int, float]:
    """Where a least-squares fit of two joined lines bends upward, and its squared error.

    y = a + b1 * x + b2 * max(0, x - k), with b1 = 0 ("level, then a rise") or
    b1 <= 0 ("falling, then a rise"); one small fit per candidate bend (a
    window holds at most `trend_points` bins).
    """
    m = values.size
    x = np.arange(m, dtype=float)
    best_k, best_sse = 0, np.inf
    for k in range(1, max(2, m - 2)):  # bins of one window, not rows
        hinge = np.maximum(0.0, x - k)
        design = np.column_stack([np.ones(m), hinge] if flat_before else [np.ones(m), x, hinge])
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        rising = coef[-1] > 0 if flat_before else (coef[1] <= 0 and coef[1] + coef[2] > 0)
        if not rising:
            continue
        sse = float(((design @ coef - values) ** 2).sum())
        if sse < best_sse:
            best_k, best_sse = k, sse
    return best_k, best_sse


def _hinge_onset(values: np.ndarray, falling_evidence: float) -> tuple[int, tuple[int, int] | None]:
    """Where the rise begins, and the bins between which it turns when the loss was
    falling before it (None when it was level).

    A level stretch before the rise is fitted by "level, then rise", and its
    bend is the onset, unless "falling, then rise" (training still improving,
    or recovering from a spike) fits clearly better: n * ln(SSE_level /
    SSE_falling) >= `falling_evidence` (Akaike's criterion for its one extra
    slope). Then the true turn lies between the two fits' bends, at the
    lowest loss there. Without that test, the lowest bin between the bends of
    a flat stretch is a noise minimum, often far before the turn. Checked on
    real runs: a weight-decay change at 1200 (found 1187), BigScience n16
    turning at iteration 31 (found 29).
    """
    (level_bend, level_sse), (falling_bend, falling_sse) = (
        _bend_fit(values, True),
        _bend_fit(values, False),
    )
    if np.isfinite(level_sse) and (
        not np.isfinite(falling_sse)
        or values.size * np.log(level_sse / max(falling_sse, 1e-300)) < falling_evidence
    ):
        return level_bend, None
    first, second = sorted((level_bend, falling_bend))
    return first + int(np.argmin(values[first : second + 1])), (first, second)
