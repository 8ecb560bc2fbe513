"""Where a loss settled after a flagged point: the level a shift is measured by (issue 36).

A shift that never comes back is a persistent spike at its first step (spec §2). Three
points are a noisy measure of it: where AR(1)-like noise drew the first three points of
a +5% shift low (noise 1% of the loss), their summed excess fell under the bar, the
points after it were judged against a trailing window that already held the shift, and
the run was `healthy`. Over a spike window's worth of points (at least
`widened_window_points`) its level is plain, so a point whose following stretch settled
as far above its baseline as a persistent spike must (`spike_persistent_min_rise_frac`,
and the flag bar itself) is sustained whatever its first three points did.

The baseline is the level at the flagged point; the stretch after it is centred half a
window later, and on a falling curve the curve goes on falling there. The trailing
window's mean lags the level at its end by about as much as the curve falls over the next
half window, so that lag, taken off the level, is the curve the stretch is compared with
(without it a +5% shift at mid-run measured +3.96%).
"""

from __future__ import annotations

import warnings

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.pointwise import KeptAt
from stabilitycli.detect.windows import ForwardMedian
from stabilitycli.frame import plain_numpy

# candidates gathered at a time (each with up to _MAX_SPAN points after it)
_BLOCK = 2048
_MAX_SPAN = 1024


def curve_ahead(
    near: np.ndarray,
    trail: np.ndarray,
    line: np.ndarray,
    rise_slope: np.ndarray,
    falling: np.ndarray,
    half_window_steps: float,
) -> np.ndarray:
    """The curve half a window after the rows: on a rising stretch its trend carried on
    (`rise_slope` > 0, `line` the trend at the row), else the level there less the fall
    the trailing mean's lag says the curve makes over half a window. Not on a fast fall
    (`falling`: warmup, a decay's tail), which slows down: the fall behind overstates the
    fall ahead, and its level is already the local one."""
    lag = np.where(np.isfinite(trail) & ~falling, trail - near, 0.0)
    falling = near - np.maximum(lag, 0.0)
    return np.where(rise_slope > 0, line + rise_slope * half_window_steps, falling)


def settled_level(
    values: np.ndarray, base: np.ndarray, sigma: np.ndarray, thresholds: Thresholds
) -> np.ndarray:
    """Per row of `values` (NaN where there is no point): the level the stretch settled
    at, `base` plus its mean excess over `base`, each point counting at most
    `spike_excess_cap_sigma` sigmas either way, as a sustained event's excess does. A
    mean, as the spec's multi-point bar is: the median of skewed batch noise sits under
    its mean, and took a fifth of a sigma off a +5% shift."""
    cap = (thresholds.spike_excess_cap_sigma * sigma)[:, None]
    excess = np.clip(values - base[:, None], -cap, cap)
    count = np.isfinite(excess).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return base + np.where(np.isfinite(excess), excess, 0.0).sum(axis=1) / count


def settle_span(steps: np.ndarray, rows: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Points in the stretch a settled level is read over from each row: a spike window's
    worth, at least `widened_window_points`."""
    ends = np.searchsorted(steps, steps[rows] + thresholds.spike_window_steps)
    return np.maximum(ends - rows, thresholds.widened_window_points)


def settled_reading(
    candidates: np.ndarray,
    steps: np.ndarray,
    loss: np.ndarray,
    reference: np.ndarray,
    sigma: np.ndarray,
    changes: np.ndarray,
    thresholds: Thresholds,
    on_fall: np.ndarray,
    cautious: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per flagged point, over its `settle_span`: the `settled_level` of the loss from it
    on, the median of its first `recovery_median_points`, its next point, the level they
    are measured over, whether that level is the fitted curve's, and whether the log goes
    on for a whole spike window after it.

    Measured over `reference` (`curve_ahead`, read from before the flag), and at the rows
    `on_fall` (a fast fall, which changes pace within the stretch) along the curve the run
    was on (`carried_curve.fitted_curve`: each point put back on the level at the flag,
    the fall taken out) where the points either side pin it, over that curve's level at
    the flag (`cautious`: the higher of it and `reference`). Only there: where the curve is
    slow a cubic through a stretch either side adds its own error (a sigma in a sparse log)
    to what the level before the flag reads, and a +3.5% curriculum step logged every 100
    steps read as 5%. Cautious for a point no excess has made an event yet: in AR(1) noise
    with phi 0.8 the cubic and the step trade a wander between them, the fitted curve's
    level off by about a sigma, and a healthy warmup's wander read as a settled rise."""
    size = candidates.size
    level, first, following = np.zeros(size), np.zeros(size), np.zeros(size)
    span = np.minimum(settle_span(steps, candidates, thresholds), _MAX_SPAN)
    # the log goes on for a whole spike window after the point, and its points
    whole = (steps[-1] >= steps[candidates] + thresholds.spike_window_steps) & (
        candidates + span <= loss.size
    )
    base = reference.astype(np.float64, copy=True)
    fitted = np.zeros(size, dtype=bool)
    for lo in range(0, size, _BLOCK):  # blocks of candidates, not rows
        part = slice(lo, lo + _BLOCK)
        rows, width = candidates[part], span[part]
        curve, ratio = np.full(rows.size, np.nan), np.ones((rows.size, int(width.max())))
        fall = on_fall[part]
        if fall.any():
            # a flag on a fall's only: a healthy log never loads the fit (start-up, #40)
            from stabilitycli.detect.carried_curve import fitted_curve

            curve[fall], fall_ratio = fitted_curve(
                rows[fall], steps, loss, changes, width[fall], thresholds
            )
            # as wide as the falling rows' longest span, which may be short of the block's
            ratio[np.ix_(np.flatnonzero(fall), np.arange(fall_ratio.shape[1]))] = fall_ratio
        offsets = np.arange(int(width.max()))
        at = rows[:, None] + offsets[None, :]
        values = loss[np.minimum(at, loss.size - 1)]
        values = np.where(offsets[None, :] < width[:, None], values, np.nan)
        values[~np.isfinite(values)] = np.nan
        values = values / ratio[:, : offsets.size]
        fitted[part] = np.isfinite(curve)
        on_curve = np.fmax(curve, base[part]) if cautious else curve
        base[part] = np.where(fitted[part], on_curve, base[part])
        level[part] = settled_level(values, base[part], sigma[part], thresholds)
        with warnings.catch_warnings():  # a stretch of NaN only has no median: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            first[part] = plain_numpy.nanmedian(
                values[:, : thresholds.recovery_median_points], axis=1
            )
        following[part] = values[:, min(1, offsets.size - 1)]
    return level, first, following, base, fitted, whole


def settled_shift(
    candidates: np.ndarray,
    steps: np.ndarray,
    loss: np.ndarray,
    reference: KeptAt,
    sigma: KeptAt,
    thresholds: Thresholds,
    changes: np.ndarray | None = None,
    fit_only: np.ndarray | None = None,
) -> np.ndarray:
    """Per flagged point: did the loss from it on settle, over a whole `settle_span`, at
    a `settled_level` at least `spike_persistent_min_rise_frac` and `spike_sigma` sigmas above
    the curve it was on (`settled_reading`), do its first `recovery_median_points` points
    already sit there, and is the point after it over the flag bar (a noise point a few
    points before a shift is not its onset)? A
    stretch cut short by the end of the log says nothing of where the loss settled, nor
    does the level read before the flag where `fit_only` (a fast fall, which changes pace
    within the stretch) and the curve could not be fitted."""
    if candidates.size == 0:
        return np.zeros(0, dtype=bool)
    sd = sigma[candidates]
    level, first, following, base, fitted, whole = settled_reading(
        candidates,
        steps,
        loss,
        reference[candidates],
        sd,
        np.zeros(0, dtype=np.int64) if changes is None else changes,
        thresholds,
        np.zeros(candidates.size, dtype=bool) if fit_only is None else fit_only,
        cautious=True,
    )
    bar = np.maximum(
        base * (1.0 + thresholds.spike_persistent_min_rise_frac),
        base + thresholds.spike_sigma * sd,
    )
    # the point after it is over the flag bar too: a noise point just before a shift
    # has the shift in its first points' median, not in its next point
    with np.errstate(invalid="ignore"):
        return (
            (level >= bar)
            & (first >= bar)
            & (following >= base + thresholds.spike_sigma * sd)
            & (base > 0)
            & whole
            & (fitted | (True if fit_only is None else ~fit_only))
        )


def settled_rise(
    row: int,
    back: int | None,
    steps: np.ndarray,
    loss: np.ndarray,
    level: tuple[float, float, bool],
    changes: np.ndarray,
    thresholds: Thresholds,
) -> bool:
    """Did a sustained event at `row` that did not come back within the recovery window
    settle at least `spike_persistent_min_rise_frac` above the curve it was on, its
    `settled_level` read as `settled_reading` reads it (`level`: the curve read before the
    flag, sigma, and whether it is a fast fall, read along the fitted curve)? One `back`
    before a spike window's points have passed is a bump, which its excess judges; with
    nothing to measure a level by (no finite point, no level) the excess has decided.

    Three points are a noisy measure of a level: a +3-4% step (a curriculum switch,
    under the spec's 5%) summed past the excess bar in about half the runs where the
    noise was 1% of the loss, and was reported as a persistent spike; over a spike
    window's points its level is within a few tenths of a percent of the step."""
    stop = row + int(settle_span(steps, np.array([row]), thresholds)[0])
    if back is not None and back < stop:
        return True
    settled, _, _, base, _, _ = settled_reading(
        np.array([row]),
        steps,
        loss,
        np.array([level[0]], dtype=np.float64),
        np.array([level[1]], dtype=np.float64),
        changes,
        thresholds,
        np.array([level[2]]),
    )
    if not (np.isfinite(settled[0]) and base[0] > 0):
        return True
    return bool(settled[0] >= base[0] * (1.0 + thresholds.spike_persistent_min_rise_frac))


def recent_level(
    candidates: np.ndarray, loss: np.ndarray, changes: np.ndarray, points: int
) -> np.ndarray:
    """Per flagged point: the median of the `points` logged points just before it, none
    before the level change it follows (NaN where there are none).

    A sparse log's widened window reaches back `widened_window_points` logging intervals
    (2,000 steps when logged every 100): a +3-4% curriculum step nine points before a
    point sits in half of it, its mean halfway up the step, and a three-point noise
    cluster on the new level summed past the excess bar over that mean. The level the run
    was on just before the point is the higher of the two."""
    offsets = np.arange(-points, 0)
    at = candidates[:, None] + offsets[None, :]
    start = np.zeros(candidates.size, dtype=np.int64)
    if changes.size:
        last = np.searchsorted(changes, candidates, side="right") - 1
        start = np.where(last >= 0, changes[np.maximum(last, 0)], 0)
    values = loss[np.maximum(at, 0)]
    values = np.where((at >= start[:, None]) & np.isfinite(values), values, np.nan)
    with warnings.catch_warnings():  # no point since the change: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return plain_numpy.nanmedian(values, axis=1)


def back_on_curve(
    row: int,
    steps: np.ndarray,
    loss: np.ndarray,
    smooth: ForwardMedian | None,
    changes: np.ndarray,
    start: tuple[float, float, int],
    thresholds: Thresholds,
) -> tuple[int | None, float, int, int] | None:
    """Q2.2 on a fast fall: the first row after `row` where the loss (and the forward
    median from it, as `spike._first_back` reads it) is back to <= the level at the flag
    + `recovery_sigma` sigma (`start`: the frozen baseline mu and sigma, and the event's
    last row above the flag bar, its points left out of the fit), carried along the
    curve fitted through both sides of the flag (`carried_curve.fitted_curve`); that level
    at the flag; and the first and last rows of the fitted stretch. None where the curve
    could not be fitted. The fit gives the curve's shape, the frozen baseline its level:
    the fitted curve's own level at the flag is an end point of a cubic, and errs by half
    a sigma where AR(1) noise is strong, its shape over the next points by a fifth of
    that. No row back within the stretch (a spike window's points at least) is None: a
    bar carried further would rest on no point."""
    span = settle_span(steps, np.array([row]), thresholds)
    span = np.minimum(span, min(_MAX_SPAN, loss.size - row))
    skip = np.array([start[2] - row + 1])
    from stabilitycli.detect.carried_curve import fitted_curve  # see `settled_reading`

    curve, ratio = fitted_curve(np.array([row]), steps, loss, changes, span, thresholds, skip)
    if not np.isfinite(curve[0]):
        return None
    stop = row + int(span[0])
    values = loss[row + 1 : stop]
    if smooth is not None:
        values = np.maximum(smooth.slice(row + 1, stop), values)
    level = start[0] + thresholds.recovery_sigma * start[1]
    with np.errstate(invalid="ignore"):
        on_level = values / ratio[0, 1 : stop - row]
        hit = np.isfinite(on_level) & (on_level <= level)
    back = row + 1 + int(np.argmax(hit)) if hit.any() else None
    # the stretch before the flag stops at the level change the row follows (`_fit`)
    first = max(int(row - span[0]), _change_before(changes, row))
    return back, level, first, stop - 1


def _change_before(changes: np.ndarray, row: int) -> int:
    """The row of the last level change at or before `row` (0: none)."""
    at = int(np.searchsorted(changes, row, side="right"))
    return int(changes[at - 1]) if at else 0
