"""A step down whose new level held only a few logged points before an event rose over it
(issue 36: a shift or bump 4-7 points after an epoch boundary).

`level.level_changes` reads a step from medians of `level_change_points` points either
side. When a shift of about the drop's size starts a few points after the boundary, the
medians after it straddle the dip and the shifted level: no step is read, the trailing
window keeps the old epoch, and the shift, about level with the old epoch, is no rise
over it. The log does hold the new level, for those few points: their mean, against the
median of the points before, shows the drop.

A mean of a few points moves further by chance than a median of many, so the bar is
counted in standard errors of that difference (with the noise's memory), not in
point-to-point sigmas: a noise dip that deep over several points is far rarer than the
false alarms a restarted window could make of it.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.autocorr import NoiseMemory
from stabilitycli.detect.pooled_noise import ChunkLoss
from stabilitycli.detect.rolling_median8 import BOUND_SLACK, fall_ceiling
from stabilitycli.frame import plain_numpy

# the rows (in `level_change_points`) over which the chance spread of the difference the
# test reads is measured, before each row
_SPREAD_ROWS = 16

# the least float above 0 (a subnormal): x < 0 is x <= -this, for every float64
LEAST_ABOVE_ZERO = float(np.nextafter(0.0, 1.0))


def short_drops(
    values: np.ndarray,
    thresholds: Thresholds,
    memory: NoiseMemory,
    chunk: ChunkLoss | None = None,
) -> np.ndarray:
    """The first rows of new levels that held `level_change_short_points` points or more
    (up to `level_change_points`): the mean of those points is under the median of the
    2 `level_change_points` points before by `level_change_frac` of it and
    `level_change_short_se` standard errors, every one of them is nearer the new level than
    the old and none twice the step down, and the step is
    `level_change_ratio` times the change between that median and the one before it (a
    fall that goes on is no step). Each count of points is tried: a dip that held longer
    has a steadier mean. The standard error is the larger of the one the noise's memory
    gives and the spread the same difference had over the rows before. `chunk`: `values`
    with the medians and noise the level-change search read from them."""
    k, least = int(thresholds.level_change_points), int(thresholds.level_change_short_points)
    n, reach = values.size, 2 * k
    if least < 2 or n < 2 * reach + k:
        return np.zeros(0, dtype=np.int64)
    chunk = chunk or ChunkLoss(values)
    finite = chunk.finite
    pad = np.full(2 * reach + k, np.nan)

    def at(series: np.ndarray, offset: int) -> np.ndarray:  # series[i + offset] per row i
        padded = np.concatenate([pad, series, pad])
        return padded[pad.size + offset : pad.size + offset + n]

    # the medians' numbers, worked out where a row may pass (`_may_pass`)
    bounds = chunk.median_bounds(reach, k + 1)
    high = None if bounds is None else bounds[1]  # only the upper bound is read
    del bounds
    before = bar = None
    noise = None
    # a median has pi/2 the variance of a mean
    before_var = (math.pi / 2.0) * memory.variance_factor(reach) / reach
    passes = np.zeros(n, dtype=bool)
    step = np.full(n, np.nan)  # per row: the mean of the j points from it on less `before`
    sums = _SumsFrom(chunk.values, high, thresholds) if high is not None else None
    for j in range(least, k):  # a few counts of points, each over every row at once
        if sums is not None and not sums.may_pass(j):
            continue
        rolled = finite.rolling_mean(j, min_samples=j).fill_null(np.nan).to_numpy()
        if high is not None and not _may_pass(chunk, high, rolled, j, thresholds):
            continue
        if before is None or bar is None:
            before, bar = _first_bar(chunk.medians_ending(reach, k + 1), at, reach, thresholds)
        np.subtract(rolled[j - 1 :], before[: n - j + 1], out=step[: n - j + 1])
        step[n - j + 1 :] = np.nan  # past the end: the j points run out
        del rolled
        with np.errstate(invalid="ignore"):
            # few rows or none pass, and the other bars are read at those only
            rows = np.flatnonzero(step <= bar)
        if rows.size == 0:
            continue
        if noise is None:
            # the noise of one point from the mean step-to-step change (as `level_changes`
            # reads it), undone of the memory that shrinks the changes between neighbours
            noise = chunk.change_noise(k) / math.sqrt(max(memory.difference_share, 0.05))
        se = noise[rows] * math.sqrt(memory.variance_factor(j) / j + before_var)
        step_at, before_at = step[rows], before[rows]
        with np.errstate(invalid="ignore"):
            deep = (
                ~(step_at > -thresholds.level_change_short_se * se)
                # every one of the few nearer the new level than the old (a row before the
                # drop is no start of it; heavy-tailed noise puts two or three low points
                # among a few, seldom all of them), none twice as far down (one low outlier
                # is no new level)
                & (_extreme_from(chunk.values, rows, j, np.max) < before_at + step_at / 2.0)
                & (_extreme_from(chunk.values, rows, j, np.min) > before_at + 2.0 * step_at)
            )
        if not deep.any():
            continue
        rows, step_at, se = rows[deep], step_at[deep], se[deep]
        # and the spread the same difference had over the rows before (none of whose
        # points it reads): a noise whose wander the measured memory understates moves
        # it further than the model says
        spread = pl.Series(step).fill_nan(None).rolling_std(_SPREAD_ROWS * k, min_samples=4 * k)
        se = np.fmax(se, at(spread.fill_null(np.nan).to_numpy(), -j)[rows])
        with np.errstate(invalid="ignore"):
            passes[rows] |= step_at <= -thresholds.level_change_short_se * se
    rows = np.flatnonzero(passes)
    if rows.size == 0:
        return rows
    # rows pass around one step, with gaps where a high point sits among the few (a
    # spike right after the drop): the first of those within k rows is the step's (the
    # medians' row at the drop stands against a later one, `merge_short`)
    first = rows[np.concatenate([[True], np.diff(rows) > k])]
    return first.astype(np.int64)


def _first_bar(
    ending: np.ndarray, at, reach: int, thresholds: Thresholds
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the median of the `reach` points before it (`ending`, those medians per
    row they end at) and what the step alone must pass, for every count of points (the
    bar in standard errors only rises with the spread): under 0, by `level_change_frac`
    of the level, and `level_change_ratio` times the change before (-step >= r c is
    step <= -(r c) to the bit; a minimum rounds nothing, and keeps a NaN, which no step
    passes, as no step passed any bar of NaN). `at(series, offset)`: series[i + offset]."""
    before = at(ending, -1)
    return before, _step_bar(before, at(ending, -reach - 1), thresholds)


def _step_bar(before: np.ndarray, prior: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """`_first_bar`'s bar from the medians before a row (`before`) and `reach` rows
    earlier (`prior`)."""
    with np.errstate(invalid="ignore"):
        bar = np.minimum(
            -thresholds.level_change_frac * np.abs(before),
            -(thresholds.level_change_ratio * np.abs(before - prior)),
        )
    np.minimum(bar, -LEAST_ABOVE_ZERO, out=bar)  # under 0: at or under the float nearest it
    return bar


class _SumsFrom:
    """Per count j of points, whether any row's mean of the j points from it on may be
    under 1 - `level_change_frac` times the upper bound of the median before it (see
    `_may_pass`), from the plain sum of those points: it and polars' running sum differ
    by a rounding of each point added, far under a slack of the chunk's largest value.
    Without a row that may, polars' means are never worked out (on most of a long log)."""

    def __init__(self, values: np.ndarray, high: np.ndarray, thresholds: Thresholds):
        fall = fall_ceiling(thresholds.level_change_frac)
        self.values, self.ceiling = values, high * fall
        self.ceiling += BOUND_SLACK * float(values.max())  # values above 0 (`bounded`)
        self.sums: tuple[int, np.ndarray] = (1, values)

    def may_pass(self, j: int) -> bool:
        have, sums = self.sums
        for m in range(have + 1, j + 1):  # one sum more per count: the j values from a row
            sums = sums[:-1] + self.values[m - 1 :]
        self.sums = (j, sums)
        n = self.values.size
        # row i (1 .. n - j) reads the median ending at i - 1
        with np.errstate(invalid="ignore"):  # NaN at the first rows: no median, no bar
            return bool(np.any(sums[1 : n - j + 1] <= self.ceiling[: n - j] * j))


def _may_pass(
    chunk: ChunkLoss,
    high: np.ndarray,
    rolled: np.ndarray,
    j: int,
    thresholds: Thresholds,
) -> bool:
    """Whether a row's mean of the `j` points from it on (`rolled`, per row they end at)
    passes `_first_bar`, read where the bar's medians have a cheap upper bound `high`
    (`ChunkLoss.median_bounds`, values above 0): the rows whose mean is under
    1 - `level_change_frac` times the upper bound of the median before (on most of a
    long log none) and, at those, the medians themselves."""
    k = int(thresholds.level_change_points)
    reach, n = 2 * k, rolled.size
    fall = fall_ceiling(thresholds.level_change_frac)
    # row i (1 .. n - j): its mean ends at i + j - 1, the median before it at i - 1 (the
    # slack allows for the step's own rounding)
    with np.errstate(invalid="ignore"):  # NaN at the first rows: no median, no bar
        rows = np.flatnonzero(rolled[j:] <= high[: n - j] * fall) + 1
    if rows.size == 0:
        return False
    if 2 * rows.size * reach >= n:  # many rows: the whole chunk's medians are cheaper
        return True
    before = chunk.medians_at(reach, k + 1, rows - 1)
    prior = chunk.medians_at(reach, k + 1, rows - reach - 1)
    bar = _step_bar(before, prior, thresholds)
    with np.errstate(invalid="ignore"):
        return bool(np.any(rolled[rows + j - 1] - before <= bar))


def _extreme_from(values: np.ndarray, rows: np.ndarray, points: int, reduce) -> np.ndarray:
    """Per row of `rows`: the max or min (`reduce`) of the `points` values from it on, NaN
    where one of them is not finite or lies past the end: polars' rolling max or min over
    `points` with every point asked for, read from the row's window only (the very value:
    an extreme takes no arithmetic)."""
    at = rows[:, None] + np.arange(points)[None, :]
    held = np.where(at < values.size, values[np.minimum(at, values.size - 1)], np.nan)
    held[~np.isfinite(held)] = np.nan
    return reduce(held, axis=1)


def merge_short(chunk: ChunkLoss, rows: np.ndarray, short: np.ndarray, apart: int) -> np.ndarray:
    """`rows` (the medians' changes) and the `short` ones; of a pair within `apart` rows,
    the medians' row unless the loss drops there by less than half as much as at the short
    one (the median of the `apart` points before the row less that of the `apart` from it
    on). The medians' row can land before the drop, where they straddle the dip and an event
    after it; a short one after an event right after the drop, whose end reads as a step
    down too."""
    if short.size == 0 or rows.size == 0:
        # np.union1d(rows, short), without numpy.ma (`frame.plain_numpy`)
        return plain_numpy.unique(np.concatenate((rows, short), axis=None)).astype(np.int64)
    padded = np.concatenate([[np.iinfo(np.int64).min // 2], short, [np.iinfo(np.int64).max // 2]])
    at = np.searchsorted(padded, rows)
    left, right = padded[at - 1], padded[at]
    other = np.where(rows - left <= right - rows, left, right)
    paired = np.abs(other - rows) <= apart
    depth = _drop_depth(chunk, np.concatenate([rows, other[paired]]), apart)
    mine, theirs = depth[: rows.size][paired], depth[rows.size :]
    # the medians' row stands where the loss is already nearer the new level from it on
    # (its noise may draw the first point of the new level less deep than a later one's)
    kept = mine >= theirs / 2.0
    lost_short = other[paired][kept]
    lost_rows = rows[paired][~kept]
    kept_rows = np.setdiff1d(rows, lost_rows)
    kept_short = np.setdiff1d(short, lost_short)
    return np.union1d(kept_rows, kept_short).astype(np.int64)


def _drop_depth(chunk: ChunkLoss, rows: np.ndarray, k: int) -> np.ndarray:
    """Per row: the median of the `k` points before it less that of the `k` from it on
    (-inf where either is missing). Medians: a spike right after the drop is no shallower
    drop, nor a noisy first point of the new level."""
    ending = chunk.medians_ending(k, k // 2 + 1)
    n = chunk.values.size
    before = np.where(rows >= 1, ending[np.clip(rows - 1, 0, n - 1)], np.nan)
    after = np.where(rows + k - 1 < n, ending[np.clip(rows + k - 1, 0, n - 1)], np.nan)
    return np.nan_to_num(before - after, nan=-np.inf)
