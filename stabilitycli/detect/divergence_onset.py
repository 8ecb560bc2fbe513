"""§4: where a divergence began - the onset fits of the divergence rule (detect/divergence.py).

The window that first passes the trend test can open long after a slow rise
began; these fits look back over the logged points to date its start.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from stabilitycli.detect.divergence_decay import (
    DECAY_LOOKBACK,
    Decay,
    decay_before,
    lr_clock,
    running_median,
    steepest_fall,
)
from stabilitycli.detect.divergence_power import (
    POWER_FIT_BACK,
    POWER_FIT_BEFORE_RAMP,
    POWER_FIT_LEAD,
    POWER_FIT_ROUNDS,
    POWER_FIT_STARTS,
    PowerFit,
    best_power,
    effective_points,
    error_profile,
    linear_ramp_sse,
    power_fit,
    start_range,
)
from stabilitycli.detect.divergence_ramp import clip_wild, ramp_pair, sums_at
from stabilitycli.detect.trend import Binned, bin_medians
from stabilitycli.frame import plain_numpy


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
    trough_bin = floor_bin + int(np.argmin(running_median(binned.values[floor_bin : j + m])))
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
    decay = decay_before(steps, loss, int(np.searchsorted(steps, earliest_step)), fit_from)
    if decay is not None:
        # the run's own decay carries its level back to where it had fallen to e^-4 (not
        # into the fast early drop): a longer stretch before the rise pins its start
        reach_step = decay.step_down_to(DECAY_LOOKBACK)
        fit_from = min(fit_from, int(np.searchsorted(steps, reach_step, side="left")))
    pair = ramp_pair(steps[fit_from:], loss[fit_from:], earliest_start, latest_start, decay)
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


# the LR times the decay is a trend column where the decay falls by this share of its value
# at the stretch's start over the stretch (#36): on a flatter decay the column is the LR's own
ANNEAL_SPAN = 0.5


CLOCK_EVIDENCE = 10.0  # Akaike's evidence the LR-weighted count needs over the steps


def _decay_on_either_clock(
    clocks: list[np.ndarray], loss: np.ndarray, first: int, last: int
) -> tuple[Decay | None, np.ndarray]:
    """The decay fitted to the loss at indices first..last-1 on each of `clocks` (the steps,
    and the LR-weighted step count when the LR is logged), and the clock it fits better
    (least squares of a level plus that decay over those points): the LR-weighted count
    only by `CLOCK_EVIDENCE`, n ln(SSE on the steps / SSE on it), as a choice of model.

    Some runs fall as far as their LR has carried them, others (a fixed data
    curriculum, a schedule that barely moves the loss) with the steps alone: the
    loss before the rise tells which."""
    best: tuple[float, Decay | None, np.ndarray] = (math.inf, None, clocks[0])
    for clock in clocks:  # loop over one or two clocks
        shape = decay_before(clock, loss, first, last)
        if shape is None:
            continue
        column = shape.at(clock[first:last])
        design = np.column_stack([np.ones(column.size), column])
        coef, *_ = np.linalg.lstsq(design, loss[first:last], rcond=None)
        sse = float(np.sum((design @ coef - loss[first:last]) ** 2))
        steps_first = clock is clocks[0]
        if steps_first or (sse > 0 and column.size * math.log(best[0] / sse) >= CLOCK_EVIDENCE):
            best = (sse, shape, clock)
    return best[1], best[2]


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

    Each round fits over a stretch reaching `POWER_FIT_BACK` times the rise's length
    before its start (never before `earliest_step`), with the run's decay curve fitted
    to what was logged before that start and the LR (a decaying LR anneals the loss
    down: the curve's own fall, not the rise's), and starts from the first tenth of the
    stretch to halfway between the guess and the end of the log. A round whose best fit
    is straight (or no better than the ramp) still hands its best accelerating start,
    when earlier, to the next round, which refits the decay before it (the first round's
    decay, fitted up to the late guess, has taken in the first part of the rise); the
    accelerating fit there must also beat the straight fits made with the first round's
    decay, over the same points, so a straight rise keeps the trend that suits it. With
    the LR logged, the decay may run on the LR-weighted step count (`lr_clock`: a curve
    falls as far as its LR has carried it, slower in warmup and in a decay tail) where
    the loss before the rise says so (`_decay_on_either_clock`), and then, where that
    decay falls by `ANNEAL_SPAN` of itself over the stretch, the LR times the decay is a
    column too: the anneal takes a share of the level, and a level that moves that much
    makes it no constant."""
    end = float(steps[-1])
    start, fit = float(guess), None
    rival = None  # the decay and its clock of a round that preferred a straight rise
    clocks = [steps.astype(float)] + ([] if lr is None else [lr_clock(steps, lr)])
    floor = int(np.searchsorted(steps, earliest_step, side="left"))

    def suffix_sums(columns: Callable[[int, int], list[np.ndarray]], n: int, at: list) -> list:
        return sums_at(columns, n, at, from_end=True)

    for round_ in range(POWER_FIT_ROUNDS):  # loop over a few refits, each over the whole stretch
        last_round = round_ == POWER_FIT_ROUNDS - 1
        before = int(np.searchsorted(steps, start))
        # the decay is fitted from the steepest fall on: a warmup's slow first fall before it
        # is no part of the curve a power law or an exponential follows
        steepest = steepest_fall(steps[floor:before], loss[floor:before])
        shape, clock = _decay_on_either_clock(clocks, loss, floor + steepest, before)
        reach = start - POWER_FIT_BACK * (end - start)
        lo = max(floor + steepest, int(np.searchsorted(steps, reach)))
        if steps.size - lo < 8:
            return fit
        x = steps[lo:].astype(float)
        y = clip_wild(loss[lo:].astype(float))
        trend, terms = _trend(shape, clock, clock is not clocks[0], lr, lo)
        latest = min(end, float(guess) + 0.5 * (end - float(guess)))
        # ...and no further back than an accelerating rise's straight ramp starts after it
        reach_back = float(guess) - POWER_FIT_BEFORE_RAMP * (end - float(guess))
        earliest = max(x[0] + POWER_FIT_LEAD * (start - x[0]), reach_back)
        room = x[(x >= earliest) & (x <= latest) & (x < end)]
        if room.size < 2:
            return fit
        grid = room[
            plain_numpy.unique(np.linspace(0, room.size - 1, POWER_FIT_STARTS).round().astype(int))
        ]
        profile = error_profile(x, y, trend, grid, suffix_sums)
        best = best_power(profile, grid, x.size)
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
        if starts_in_a_deeper_fall(x, y, best[1]):
            return fit
        # a straight rise is the ramp fit's own shape, which also lets it level off: the
        # power fit dates only a rise that accelerates, and only where it fits better
        straight = linear_ramp_sse(x, y, trend, float(guess), ramp_end)
        if rival is not None:
            # a straight rise fitted with the trend of the round that preferred it, over
            # these points: an accelerating one must beat it too
            rival_trend = _trend(*rival, lr, lo)[0]
            lines = [
                sse for p, sse in error_profile(x, y, rival_trend, grid, suffix_sums) if p == 1
            ]
            straight = min(
                [straight, linear_ramp_sse(x, y, rival_trend, float(guess), ramp_end)]
                + [float(sse.min()) for sse in lines]
            )
        if best[2] < 2 or best[0] >= straight:
            # ...but the decay this round carried on was fitted up to its start (at first the
            # straight ramp's, late on an accelerating rise), so it took the rise's first part
            # in and flattened: the next round refits it before the best accelerating start
            # (#36: a +25% ramp from step 15140 dated 25560, now 16160)
            steep = best_power([(p, s) for p, s in profile if p >= 2], grid, x.size)
            # (only an earlier start: a decay refitted up to a later one takes in more rise)
            if steep is None or not room[0] < steep[1] < start or last_round or rival is not None:
                return fit
            start, rival = steep[1], (shape, clock, clock is not clocks[0])
            continue
        start = best[1]
        points, lag1 = effective_points(x, y, trend, best[1], best[2])
        lo_start, hi_start = start_range(profile, grid, best[0], points)
        fit = PowerFit(
            int(best[1]),
            best[2],
            best[0],
            int(x[0]),
            int(x[-1]),
            guess,
            ", ".join(terms),
            (int(min(lo_start, best[1])), int(max(hi_start, best[1]))),
            round(lag1, 2),
        )
    return fit


def _trend(
    shape: Decay | None, clock: np.ndarray, weighted: bool, lr: np.ndarray | None, lo: int
) -> tuple[list[np.ndarray], list[str]]:
    """The trend columns the power fit carries on under the rise, at rows lo on, and their
    names: the decay `shape` on its `clock` (the LR-weighted count when `weighted`), the LR,
    and the LR times the decay where that decay moves by `ANNEAL_SPAN` of itself."""
    trend, terms = [], ["a line"]
    if shape is not None:
        trend.append(shape.at(clock[lo:]))
        terms.append("the decay fitted before it" + (" in LR-weighted steps" if weighted else ""))
    if lr is not None and np.ptp(lr[lo:]) > 0:
        trend.append(lr[lo:] / np.max(np.abs(lr[lo:])))
        terms.append("the LR")
        # (a loss that follows the LR-weighted count anneals by a share of its level)
        if weighted and shape is not None and np.ptp(trend[0]) >= ANNEAL_SPAN * np.max(trend[0]):
            trend.append(trend[0] * trend[-1])
            terms.append("the LR times that decay")
    return trend, terms


# the level from a start on is read from this many bin medians of the points after it
FALL_CHECK_BINS = 64
# ...and a start is in the curve's fall where the loss then still fell by more than this
# share of its lowest level (and by more than it rose after): a WSD cooldown or a cosine
# tail under an accelerating rise falls a few percent after its start (9% measured on
# the LM ramps of #36), the fast early fall of a run a half or more
DEEPER_FALL_FRAC = 0.25


def starts_in_a_deeper_fall(x: np.ndarray, y: np.ndarray, start: float) -> bool:
    """Whether the loss, from `start` on, first falls by more than `DEEPER_FALL_FRAC` of
    its lowest level and by more than it then rises to the end of the log (bin medians
    of the points after the start): a rise dated there begins inside the curve's own
    fall, fitted because the trend under it (a decay fitted to a few points before)
    misses that fall's shape, not because the loss turned there. Such a start is no
    onset: a straight ramp 11,500 steps into a run whose early exponential fall the decay
    did not follow was dated at step 2,870, where the loss then still fell by half its
    level before it rose a quarter (#36, O2). A signed loss has no level to take a
    share of: never."""
    after = x >= start
    count = int(np.count_nonzero(after))
    if count < 3 * FALL_CHECK_BINS:
        return False
    medians = bin_medians(x[after], y[after], count // FALL_CHECK_BINS).values
    lowest = float(np.min(medians))
    drop = float(medians[0]) - lowest
    return lowest > 0 and drop > DEEPER_FALL_FRAC * lowest and drop > float(medians[-1]) - lowest


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
