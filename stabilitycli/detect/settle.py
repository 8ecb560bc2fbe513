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


def settled_shift(
    candidates: np.ndarray,
    steps: np.ndarray,
    loss: np.ndarray,
    reference: KeptAt,
    sigma: KeptAt,
    thresholds: Thresholds,
) -> np.ndarray:
    """Per flagged point: did the loss from it on settle, over a whole `settle_span`, at
    a `settled_level` at least `spike_persistent_min_rise_frac` and `spike_sigma` sigmas above
    `reference` (the curve it was on), do its first `recovery_median_points` points
    already sit there, and is the point after it over the flag bar (a noise point a few
    points before a shift is not its onset)? A
    stretch cut short by the end of the log says nothing of where the loss settled."""
    out = np.zeros(candidates.size, dtype=bool)
    if candidates.size == 0:
        return out
    span = np.minimum(settle_span(steps, candidates, thresholds), _MAX_SPAN)
    # the log goes on for a whole spike window after the point, and its points
    whole = (steps[-1] >= steps[candidates] + thresholds.spike_window_steps) & (
        candidates + span <= loss.size
    )
    for lo in range(0, candidates.size, _BLOCK):  # blocks of candidates, not rows
        rows, width = candidates[lo : lo + _BLOCK], span[lo : lo + _BLOCK]
        offsets = np.arange(int(width.max()))
        at = rows[:, None] + offsets[None, :]
        values = loss[np.minimum(at, loss.size - 1)]
        values = np.where(offsets[None, :] < width[:, None], values, np.nan)
        values[~np.isfinite(values)] = np.nan
        base, sd = reference[rows], sigma[rows]
        level = settled_level(values, base, sd, thresholds)
        with warnings.catch_warnings():  # a stretch of NaN only has no median: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            first = np.nanmedian(values[:, : thresholds.recovery_median_points], axis=1)
        bar = np.maximum(
            base * (1.0 + thresholds.spike_persistent_min_rise_frac),
            base + thresholds.spike_sigma * sd,
        )
        # the point after it is over the flag bar too: a noise point just before a shift
        # has the shift in its first points' median, not in its next point
        following = loss[np.minimum(rows + 1, loss.size - 1)]
        with np.errstate(invalid="ignore"):
            out[lo : lo + rows.size] = (
                (level >= bar)
                & (first >= bar)
                & (following >= base + thresholds.spike_sigma * sd)
                & (base > 0)
            )
    return out & whole


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
        return np.nanmedian(values, axis=1)
