"""§2: loss spikes - onset, frozen baseline, recovery, type and cause."""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Skip
from stabilitycli.core.records import dataclass
from stabilitycli.detect.after_change import AfterChange, after_change_baseline, replace_at
from stabilitycli.detect.autocorr import NoiseMemory, excess_bar_sigma, loss_noise_memory
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.fall_curve import read_fall
from stabilitycli.detect.kinds.spike import (
    BLIP,
    GRAD_NORM_JUMP,
    LOSS_JUMP,
    RECURRING_SPIKES,
    SCHEDULE_RESTART,
    SPIKE,
    BlipEvidence,
    SpikeEvent,
)
from stabilitycli.detect.level import (
    WINDOW_NAMES,
    level_changes,
    local_level,
    local_level_at,
    planned_fall_rows,
    ratio_reference,
    segment_steps,
)
from stabilitycli.detect.lr_plan import LrPlan
from stabilitycli.detect.pointwise import KeptAt
from stabilitycli.detect.pooled_noise import pooled_sigma
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.restart_bumps import split_restart_bumps
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.settle import (
    back_on_curve,
    curve_ahead,
    recent_level,
    settled_rise,
    settled_shift,
)
from stabilitycli.detect.short_log_jumps import short_log_jumps
from stabilitycli.detect.spike_around import AroundPoints, flag_around, surge_rows
from stabilitycli.detect.spike_causes import CauseContext, spike_causes
from stabilitycli.detect.spike_open import open_rows
from stabilitycli.detect.spike_words import (
    recurring_finding,
    recurring_spikes,
    recurring_summary,
    spike_finding,
)
from stabilitycli.detect.windows import (
    ForwardMedian,
    WindowPlan,
    median_interval,
    plan_window,
    trailing_chunks,
    trailing_counts_at,
)
from stabilitycli.frame import plain_numpy

# extent/recovery scans look ahead in chunks, never over the whole tail
_SCAN_CHUNK_POINTS = 256


def carried_fall(candidates: np.ndarray, at: np.ndarray, fall: tuple[np.ndarray, KeptAt]):
    """Per flagged point (rows) and each row `at` after it (columns): how far a sparse
    log's plain fall (`_Baseline.carry`, per step, <= 0) has carried the curve down from
    the flag; 0 where there is none."""
    steps, carry = fall
    ahead = steps[np.minimum(at, steps.size - 1)] - steps[candidates][:, None]
    return carry[candidates][:, None] * ahead


def _accumulated_excess(
    candidates: np.ndarray,
    loss: np.ndarray,
    mean: KeptAt,
    sigma: KeptAt,
    thresholds: Thresholds,
    fall: tuple[np.ndarray, KeptAt] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per flagged point: the excess over its own frozen baseline, summed over it and the
    next logged points (`spike_excess_points` in all), in sigmas; their mean rise as a
    fraction of the baseline; and the lowest of those points, in sigmas.

    Each point counts at most `spike_excess_cap_sigma`, so one huge point cannot pass
    for a sustained event (that is the large-z bar's job); a non-finite point counts
    the cap. A level shift whose points only sometimes cross mu + 3 sigma still sums
    well past the bar; noise, even heavy-tailed, rarely puts three points in a row
    that far up. Counted in logged points, so a sparse log is judged as a dense one.
    """
    m = thresholds.spike_excess_points
    cap = thresholds.spike_excess_cap_sigma
    offsets = np.arange(m)
    at = candidates[:, None] + offsets[None, :]
    inside = at < loss.size
    values = loss[np.minimum(at, loss.size - 1)]
    mu = mean[candidates][:, None]
    if fall is not None:  # the curve carried on down from the flag (`_Baseline.carry`)
        mu = mu + carried_fall(candidates, at, fall)
    sd = sigma[candidates][:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(np.isfinite(values), (values - mu) / sd, cap)
        z = np.where(inside, np.clip(z, -cap, cap), 0.0)
        rise = np.where(inside & np.isfinite(values), values - mu, 0.0).sum(axis=1) / (
            np.maximum(inside.sum(axis=1), 1) * np.abs(mean[candidates])
        )
    return z.sum(axis=1), rise, z.min(axis=1)


def _sustained(
    candidates: np.ndarray,
    loss: np.ndarray,
    mean: KeptAt,
    sigma: KeptAt,
    thresholds: Thresholds,
    memory: NoiseMemory,
    reference: KeptAt,
    fall: tuple[np.ndarray, KeptAt] | None = None,
) -> np.ndarray:
    """Materiality (a), read as an accumulated excess rather than a run of flagged points,
    over `reference` (`_Baseline.near`), over three points or more (`bump_excess`)."""
    if candidates.size == 0:
        return np.zeros(0, dtype=bool)
    excess, rise, lowest = _accumulated_excess(candidates, loss, reference, sigma, thresholds, fall)
    # where sigma is its floor the floor, not the noise, sets the scale: no widening there
    floored = sigma[candidates] <= thresholds.sigma_floor_frac * np.abs(mean[candidates])
    bar = np.where(floored, thresholds.spike_excess_sigma, excess_bar_sigma(memory, thresholds))
    # a level only means something for a loss that is never negative (cross-entropy); a
    # signed objective (a PPO actor loss swings through zero) has no level to rise above,
    # so only the large-z bar or a cause can make its spike. (NaN compares false: a
    # finite negative value, without a finite copy of the loss to find it)
    if np.any((loss < 0) & (loss > -np.inf)):
        return np.zeros(candidates.size, dtype=bool)
    three = (excess >= bar) & (lowest >= thresholds.spike_excess_min_sigma)
    three &= rise >= thresholds.spike_sustained_min_rise_frac
    # imported here: a log without a spike candidate never loads it (start-up, #40)
    from stabilitycli.detect.bump_excess import sustained_longer

    return three | sustained_longer(candidates, loss, reference, sigma, bar, thresholds, fall)


def _lone_blips(
    candidates,
    steps,
    loss,
    mean,
    sigma,
    thresholds: Thresholds,
    ctx: CauseContext,
    sustained: np.ndarray,
    ratio_level: KeptAt,
) -> np.ndarray:
    """Which flagged points are plainly noise: not sustained, not large, no possible cause."""
    if candidates.size == 0:
        return np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (loss[candidates] - mean[candidates]) / sigma[candidates]
        large = (z >= thresholds.spike_large_z) & (
            loss[candidates] >= thresholds.spike_large_ratio * ratio_level[candidates]
        )
    large |= ~np.isfinite(loss[candidates])
    maybe_cause = ctx.maybe_cause(candidates, steps, thresholds)
    return ~sustained & ~large & ~maybe_cause


def _blip_list(lone, events, steps, loss, mean, sigma) -> tuple[np.ndarray, np.ndarray]:
    """Lone points outside every event, plus events that fell short of a spike."""
    inside = np.zeros(lone.size, dtype=bool)
    for event in events:  # events are few
        inside |= (steps[lone] >= event.onset_step) & (steps[lone] <= event.end_step)
    lone = lone[~inside]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (loss[lone] - mean[lone]) / sigma[lone]
    weak = [e for e in events if not e.material]
    all_steps = np.concatenate(
        [steps[lone], np.array([e.onset_step for e in weak], dtype=np.int64)]
    )
    all_z = np.concatenate([z, np.array([e.z for e in weak], dtype=float)])
    order = np.argsort(all_steps, kind="stable")
    return all_steps[order], all_z[order]


def _pooled_noise(
    loss: np.ndarray,
    first: int,
    stop: int,
    points: int,
    memory: NoiseMemory,
    changes: np.ndarray,
    planned: np.ndarray | None,
    thresholds: Thresholds,
) -> np.ndarray:
    """The pooled noise (`pooled_sigma`) at rows [first, stop); in the rows of the LR's
    planned warmup read relative to the loss, at the level of a window's worth of points
    before the row, from as few changes as `stable_std_points` (see `pooled_sigma`)."""
    reach = max(0, first - points - 1)
    pooled = pooled_sigma(
        loss[reach:stop],
        points,
        memory,
        changes - reach,
        level_points=thresholds.level_change_points,
    )[first - reach :]
    if planned is None or not planned.any():
        return pooled
    # planned rows are the chunk's first ones: those up to the warmup's end and a window
    last = first + int(np.flatnonzero(planned)[-1]) + 1
    # a window's worth of points: a few drawn low by AR(1) noise took sigma down with them
    level_points = max(1, points // thresholds.noise_level_windows)
    warm = pooled_sigma(
        loss[reach:last],
        points,
        memory,
        changes - reach,
        (level_points, thresholds.stable_std_points),
    )[first - reach :]
    return np.concatenate(
        [np.where(planned[: warm.size], warm, pooled[: warm.size]), pooled[warm.size :]]
    )


@dataclass
class _Baseline:
    candidates: np.ndarray  # rows above mu + k * sigma with a baseline
    mean: KeptAt  # the trailing mean, or the local level where the mean lags a fall
    sigma: KeptAt
    first_eligible_step: int | None  # the first point with a baseline
    falling: KeptAt  # 1 where mean is the local level of a falling curve
    rise_slope: KeptAt  # the trend's slope per step on a rising stretch, else 0
    line: KeptAt  # the trend read at the row on a rising stretch, else the mean
    changes: np.ndarray  # rows where the loss stepped down to a new level
    # what a sustained event's excess is measured over: the local level where a dense
    # window's mean lags the curve (`LocalLevel.near`), else the mean
    near: KeptAt
    # the trailing window's own mean (the level since a change, just after one): how far
    # it lags `near` says how fast the curve falls (`settle.curve_ahead`)
    trail: KeptAt
    # a sparse log's plain fall, per step (0 elsewhere): an excess over the points after a
    # flag is measured against the curve carried on down from it, not a level frozen there
    carry: KeptAt

    # the rows judged against the level since a change, and where their sigma came from
    after: AfterChange = field(default_factory=AfterChange.none)

    # a sparse log's local level lags its fall by part of a window: a ratio is also taken
    # against the loss's neighbours there (`level.ratio_reference`); a dense log's level is
    # read at the row (`fall_curve`), and its neighbours would count the noise twice
    ratio_lags: bool = True
    # the rows with a grad-norm surge judged against the curve around them instead
    around: AroundPoints = field(default_factory=AroundPoints.none)


def _flag_above_baseline(
    steps: np.ndarray,
    loss: np.ndarray,
    plan: WindowPlan,
    thresholds: Thresholds,
    pooled_points: int | None,
    memory: NoiseMemory,
    lr_plan: LrPlan | None = None,
) -> _Baseline:
    """Every eligible, finite loss above mu + k * sigma of its trailing window, taken a
    chunk of rows at a time; mu and sigma kept at those rows only.

    mu is the window's mean, or the curve's local level where the mean lags a fall
    (`level.local_level`); the window restarts where the loss stepped down to a new
    level (`level.level_changes`), except in a widened window of the last points.
    sigma is the window's std (around its trend where mu is the local level) with a
    floor of sigma_floor_frac * |mu|; with `pooled_points`, the noise pooled from
    successive differences where there is one (see `pooled_noise.pooled_sigma`), under the
    same floor.
    """
    window = thresholds.spike_window_steps
    first_row_step = steps[0] + (0 if plan.widened else window)
    found: dict[str, list[np.ndarray]] = {
        k: []
        for k in ("rows", "mean", "sigma", "falling", "slope", "line", "near", "trail", "carry")
    }
    first_eligible_step = None
    # a sparse log's window of the last points is not restarted; its first points after a
    # change are judged against the level since it (`after_change_baseline`)
    changes = level_changes(steps, loss, thresholds, memory)
    after = after_change_baseline(
        steps,
        loss,
        changes,
        thresholds,
        thresholds.widened_window_points if plan.widened else thresholds.min_points_per_window,
        pooled_points,
        memory,
    )
    window_steps = steps
    if changes.size and not plan.widened:  # windows by step that never reach back across one
        window_steps = segment_steps(steps, changes, window)
        plan = WindowPlan(True, 0, 1, False, plan.description)
    # a dense log's local level is read at a few rows of a chunk only (`spike_open`): the
    # counts only it reads are worked out there (`trailing_counts_at`)
    later = LEVEL_AT_ROWS if pooled_points is None else ()
    for first, stats in trailing_chunks(window_steps, loss, window, plan, WINDOW_NAMES, later):
        count = stats["count"]
        stop = first + count.size
        planned = planned_fall_rows(steps[first:stop], lr_plan, window)
        pooled = None
        if pooled_points is not None:
            # a window this sparse holds too few points for its own std: pool the noise
            # over the last several windows' worth of points instead
            pooled = _pooled_noise(
                loss, first, stop, pooled_points, memory, changes, planned, thresholds
            )
        fall = read_fall(loss, first, count, pooled is not None, thresholds, memory)
        at, after_level, after_sigma = after.within(first, stop)
        picked = None  # the rows `level` holds: None, every row of the chunk
        if pooled is None and fall.dense:
            # the local level only where a point may pass the bar (`spike_open`); every
            # other row is judged against the window's mean and floored std
            picked, std = open_rows(stats, loss[first:stop], planned, thresholds)
            picked = np.union1d(picked, at) if at.size else picked
            missing = tuple(name for name in WINDOW_NAMES if name not in stats)
            at_rows = trailing_counts_at(
                window_steps, loss, window, plan, missing, (first, stop), picked
            )
            level = local_level_at(stats, thresholds, fall, planned, picked, at_rows)
            del at_rows
            mean, sigma = stats["mean"].copy(), std
            mean[picked], sigma[picked] = level.level, level.sigma
            del std
        else:
            level = local_level(stats, thresholds, pooled, fall, planned)
            mean, sigma = level.level, level.sigma
        # a sparse window lags a plain fall by half its span: the line through it and the
        # window before follows the curve (`fall_curve.sparse_fall`)
        # (carried on only where it is the level judged by: a local level under it
        # already took the fall, and the two together took it twice)
        if pooled is None:  # a dense log's window has no such line (`sparse_fall`)
            carry = np.zeros(count.size)
        else:
            carry = np.where(level.fall_line < mean, level.fall_slope, 0.0)
            mean = np.where(carry < 0, level.fall_line, mean)
        eligible = count >= thresholds.min_points_per_window
        sigma_floor = np.abs(mean) * thresholds.sigma_floor_frac
        if pooled is not None:
            sigma = np.maximum(np.where(np.isfinite(pooled), pooled, sigma), sigma_floor)
        trail = stats["mean"]
        if at.size:
            trail = trail.copy()
            trail[at] = after_level
            if picked is None:  # else copies already
                mean, sigma = mean.copy(), sigma.copy()
            mean[at], sigma[at], eligible[at] = after_level, after_sigma, True
            carry = carry.copy()
            carry[at] = 0.0  # the level since a change is flat
            level = replace_at(level, at if picked is None else _held(picked, at), after_level)
        eligible &= steps[first:stop] > first_row_step
        eligible &= np.isfinite(mean)
        if first_eligible_step is None and eligible.any():
            first_eligible_step = int(steps[first + int(np.argmax(eligible))])
        chunk_loss = loss[first:stop]
        threshold = sigma * thresholds.spike_sigma
        threshold += mean
        with np.errstate(invalid="ignore"):
            flagged = np.flatnonzero(eligible & np.isfinite(chunk_loss) & (chunk_loss > threshold))
        found["rows"].append(flagged + first)
        found["mean"].append(mean[flagged])
        found["sigma"].append(sigma[flagged])
        held = flagged if picked is None else _held(picked, flagged)  # flagged rows: picked
        found["falling"].append(level.falling[held].astype(np.float64))
        found["slope"].append(level.rise_slope[held])
        found["line"].append(level.line[held])
        # a sparse window's halves and quarter are a few points each: their trend is noise
        found["near"].append(level.near[held] if pooled is None else mean[flagged])
        found["trail"].append(trail[flagged])
        found["carry"].append(carry[flagged])
        # this chunk's arrays go before the next chunk's are computed beside them
        del stats, level, fall, mean, sigma, eligible, sigma_floor, threshold, flagged, pooled
        del trail, planned, carry, picked, held
    # one chunk at least: the rule runs only on a series of several points
    candidates = np.concatenate(found["rows"])

    def kept(name: str) -> KeptAt:
        return KeptAt(loss.size, candidates, np.concatenate(found[name]))

    return _Baseline(
        candidates,
        kept("mean"),
        kept("sigma"),
        first_eligible_step,
        kept("falling"),
        kept("slope"),
        kept("line"),
        changes,
        kept("near"),
        kept("trail"),
        kept("carry"),
        after,
        pooled_points is not None,
    )


# the counts of a trailing window only the local level reads
LEVEL_AT_ROWS: tuple[str, ...] = ("count_quarter", "count_double", "x_mean", "x_mean_half")
LEVEL_AT_ROWS += ("x_mean_quarter", "x_mean_double")


def _held(picked: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where each of `rows` (all among the sorted `picked`) sits in `picked`."""
    return np.searchsorted(picked, rows)


def _with_around(
    baseline: _Baseline,
    loss: np.ndarray,
    steps: np.ndarray,
    ctx: CauseContext,
    thresholds: Thresholds,
    memory: NoiseMemory,
    noise_points: int,
) -> _Baseline:
    """`baseline` with the points of a grad-norm surge that stand over the curve around
    them (`spike_around`) added to its candidates, judged against that curve."""
    assert baseline.first_eligible_step is not None
    rows = surge_rows(steps, ctx, thresholds)
    rows = rows[steps[rows] >= baseline.first_eligible_step]
    rows = plain_numpy.setdiff(rows, baseline.candidates)  # flagged by the trailing window already
    around = flag_around(loss, rows, baseline.changes, thresholds, memory, noise_points)
    if around.rows.size == 0:
        return baseline
    candidates = np.concatenate([baseline.candidates, around.rows])
    order = np.argsort(candidates, kind="stable")
    zeros = np.zeros(around.rows.size)

    def merged(kept: KeptAt, extra: np.ndarray) -> KeptAt:
        return KeptAt(loss.size, candidates[order], np.concatenate([kept.values, extra])[order])

    return replace(
        baseline,
        candidates=candidates[order],
        mean=merged(baseline.mean, around.level),
        sigma=merged(baseline.sigma, around.sigma),
        falling=merged(baseline.falling, zeros),
        rise_slope=merged(baseline.rise_slope, zeros),
        line=merged(baseline.line, around.level),
        near=merged(baseline.near, around.level),
        trail=merged(baseline.trail, around.level),
        carry=merged(baseline.carry, zeros),
        around=around,
    )


def _first_back(
    loss: np.ndarray,
    smooth: ForwardMedian | None,
    level: float,
    start: int,
    trend: tuple[np.ndarray, int, float] | None = None,
) -> int | None:
    """`_first_at_or_below(np.maximum(smooth, loss), level, start)` over the forward
    median (the loss itself without one), which is computed only over the chunks
    scanned; they double in length, so a long scan costs a few polars calls.

    `trend` (steps, onset step, slope per step > 0): the level rises from the onset
    by the slope, as the curve the run was on did."""
    if trend is not None and trend[2] > 0:
        steps, onset, slope = trend
    elif smooth is None:
        return _first_at_or_below(loss, level, start)
    else:
        steps, onset, slope = np.zeros(0), 0, 0.0
    pos, chunk_points = start, _SCAN_CHUNK_POINTS
    while pos < loss.size:
        end = min(loss.size, pos + chunk_points)
        chunk = (
            loss[pos:end] if smooth is None else np.maximum(smooth.slice(pos, end), loss[pos:end])
        )
        bar = level + slope * (steps[pos:end] - onset) if slope > 0 else level
        with np.errstate(invalid="ignore"):
            hit = np.isfinite(chunk) & (chunk <= bar)
        if hit.any():
            return pos + int(np.argmax(hit))
        pos, chunk_points = end, 2 * chunk_points
    return None


def _first_at_or_below(values: np.ndarray, level: float, start: int) -> int | None:
    """Index of the first finite value <= level in values[start:], scanned in chunks.

    Chunked so that each event costs what it scans, not the whole log: the
    scan is linear over all events together because events do not overlap.
    """
    n = values.size
    pos = start
    while pos < n:
        chunk = values[pos : pos + _SCAN_CHUNK_POINTS]
        with np.errstate(invalid="ignore"):
            hit = np.isfinite(chunk) & (chunk <= level)
        if hit.any():
            return pos + int(np.argmax(hit))
        pos += _SCAN_CHUNK_POINTS
    return None


@rule(
    SPIKE.rule,
    SPIKE.section,
    "loss spike above mu + {spike_sigma:g} sigma of the trailing {spike_window_steps} steps",
    emits=(SPIKE, RECURRING_SPIKES, BLIP, LOSS_JUMP, GRAD_NORM_JUMP, SCHEDULE_RESTART),
    series=("loss", "grad_norm", "lr", "batch_id"),
    reads=(
        "level_change_frac",
        "level_change_points",
        "level_change_ratio",
        "level_change_sigma",
        "level_change_short_points",
        "level_change_short_se",
        "level_fall_speedup",
        "level_fall_z",
        "level_lag_sigma",
        "level_recent_points",
        "lr_restart_peak_frac",
        "lr_restart_period_frac",
        "lr_restarts_intended",
        "planned_lr_restart_steps",
        "restart_back_sigma",
        "restart_decay_period_frac",
        "restart_decay_ratio",
        "cause_lead_steps",
        "duplicate_batch_window_steps",
        "grad_norm_outlier_ratio",
        "grad_norm_spike_ratio",
        "lr_jump_cause_steps",
        "lr_jump_ratio",
        "lr_jump_still_up_frac",
        "min_points_per_window",
        "noise_level_windows",
        "recurring_spike_min_count",
        "recovery_median_points",
        "recovery_sigma",
        "recovery_window_steps",
        "restart_spike_steps",
        "short_log_grad_norm_jump_ratio",
        "short_log_jump_min_frac",
        "short_log_loss_jump_ratio",
        "sigma_floor_frac",
        "spike_large_ratio",
        "spike_large_z",
        "spike_sigma",
        "spike_excess_points",
        "spike_excess_sigma",
        "spike_excess_cap_sigma",
        "spike_excess_min_sigma",
        "spike_excess_max_points",
        "spike_excess_max_sigma",
        "noise_autocorr_min",
        "noise_far_lag_points",
        "spike_sustained_min_rise_frac",
        "spike_persistent_min_rise_frac",
        "spike_window_steps",
        "sparse_fall_z",
        "stable_std_points",
        "widened_window_points",
    ),
    provides=("spikes", "recurring_spikes", "blips", "spike_window", "spike_insufficient"),
)
def detect_spikes(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Loss spikes, whether they recovered, their type and their cause.

    What it detects: a step t where loss[t] > mu + {spike_sigma:g}*sigma of the loss
    over the steps [t-{spike_window_steps}, t) (Q2.1). Consecutive flagged points are
    one event with the baseline frozen at its onset; sigma has a floor of
    {sigma_floor_frac:.0%} of |mu|. An event is a spike when it is sustained, has an
    evident cause (pre-clip grad norm >= {grad_norm_spike_ratio:g}x its trailing mean
    within the {cause_lead_steps} steps before, an LR jump of more than
    {lr_jump_ratio:.0%} within the {lr_jump_cause_steps} steps before, its batch id
    seen within the {duplicate_batch_window_steps} steps before, a restart within the
    {restart_spike_steps} steps before), or is large (z >= {spike_large_z:g} and peak
    >= {spike_large_ratio:g}x the baseline); anything else is a blip (info).
    A bump after a planned LR restart (warm restarts recognised from the LR, or
    declared in `planned_lr_restart_steps`) that is back within
    {restart_back_sigma:g} sigma of its baseline mean within
    {restart_decay_period_frac:.0%} of the restart period (or the recovery window,
    if longer) and no slower than {restart_decay_ratio:g}x the earlier restarts is a
    `schedule-restart` (info); one that does not decay stays a spike caused by the
    restart. A cause resting on an ignored code (`--ignore lr-jump`) is not named.
    Sustained is read as an accumulated excess: the {spike_excess_points} logged
    points from the flagged one on, each counting at most {spike_excess_cap_sigma:g}
    sigma and none under {spike_excess_min_sigma:g}, sum to >= {spike_excess_sigma:g}
    sigma (more where the noise is autocorrelated, as a sum of correlated points spreads
    wider, up to {spike_excess_max_sigma:g}) over the frozen baseline and rise
    >= {spike_sustained_min_rise_frac:.0%} above it on average (or, over up to
    {spike_excess_max_points} points, their mean excess reaches that bar's share per point), so a
    level shift counts even where some of its points dip under {spike_sigma:g} sigma; one
    not back within the recovery window whose later half of the stretch below is not back under
    half its first points' excess must also have settled
    >= {spike_persistent_min_rise_frac:.0%} above the level
    (its mean over the {spike_window_steps} steps from the onset, at least
    {widened_window_points} points, each counting at most {spike_excess_cap_sigma:g} sigma,
    against the curve the run was on: a slow fall's level less the fall the trailing mean's
    lag says comes next; on a fast fall the curve fitted through as many points either side
    of the onset, a cubic in the step plus a step at the onset, the event's first
    {spike_excess_points} points left out). A point is sustained too when
    the loss from it on settles there, its mean over those points (each counting at most
    {spike_excess_cap_sigma:g} sigma) and the median of its first
    {recovery_median_points} at least {spike_persistent_min_rise_frac:.0%} and
    {spike_sigma:g} sigma above that curve, the point after it {spike_sigma:g} sigma
    above it too: a shift whose first points the noise drew low (on a fast fall, over
    the fitted curve, its level at the point never under the one read before it). In a
    widened window a
    sustained excess is measured over the higher of its level and the median of the
    {level_change_points} points just before. Points above the
    baseline until the loss is back are one event. Recovered when the loss is back to
    <= mu + {recovery_sigma:g}*sigma within {recovery_window_steps} steps (Q2.2), on a fast
    fall mu carried along that fitted curve (where it could be fitted): the
    spike is recoverable; else persistent, or divergent when the loss's level (a median
    over a recovery window's worth of points) goes {spike_sigma:g} sigma above the spike's
    own peak (its top within the recovery window) before the loss is ever back: a rise
    after it came back is another event.
    The baseline follows the curve: where the loss falls fast (warmup, a decay's
    tail) and the trailing mean lags it by {level_lag_sigma:g} sigma or more, a
    point is judged against the local level (the window's trend at t) and the spread
    around that trend; the window restarts where the loss stepped down by
    {level_change_frac:.0%} or more to a new level (an epoch boundary, an LR step),
    and until it holds {min_points_per_window} points ({widened_window_points} in a
    sparse log) a point is judged against the mean of the points since the drop, with
    the noise of the stretch before it scaled to the new level; in the LR's planned warmup
    and {spike_window_steps} steps after it a fall that quickens is the LR's doing, read
    as a fall on half the proof, and in a sparse log (too few points a window for its own
    std) where the window before sits {sparse_fall_z:g} standard errors of the two means
    above the trailing one, a point is judged against the line through the two means read
    at it (never under the mean of the {level_recent_points} points before it, less two of
    its standard errors) and the points after it against that line carried on, with the
    noise pooled from the changes relative to the loss; on a rising stretch, recovery is
    judged against the rising trend. A point whose grad norm surged
    ({grad_norm_spike_ratio:g}x within the {cause_lead_steps} steps before) is also
    judged against the curve around it, where the trailing window lags it (a warmup's
    fall that speeds up, an epoch drop inside the window): the median of the
    {recovery_median_points} logged points either side, with the noise from the changes
    between successive points before it (over the spike window's points, at least
    {stable_std_points}, from the last level change on).

    Why it matters: a recoverable spike names a data or schedule problem to
    fix before it recurs; a persistent one has corrupted the optimizer moments
    and the run must go back to the last checkpoint before it (Q2.4).
    """
    result = RuleResult()
    if not view.has("loss"):
        result.skipped.append(Skip(SPIKE.rule, "loss not read: no loss series in the log"))
        return result
    steps, loss = view.points("loss")
    window = thresholds.spike_window_steps
    finite = np.isfinite(loss)
    finite_steps = steps if finite.all() else steps[finite]  # most logs: no copy
    del finite
    interval = median_interval(finite_steps)
    sparse = not (interval > 0 and window / interval >= thresholds.min_points_per_window)
    span = int(finite_steps[-1] - finite_steps[0]) if finite_steps.size else 0
    finite_points = finite_steps.size
    del finite_steps  # a copy of the steps: a long log holds the rest of the rule beside it
    too_short = (
        (finite_points <= thresholds.widened_window_points)
        if sparse
        else (span <= window or finite_points <= thresholds.min_points_per_window)
    )
    if too_short:
        result.skipped.append(
            Skip(
                SPIKE.rule,
                f"insufficient data: {finite_points} finite loss points over {span} steps; "
                f"a spike needs a {window}-step baseline of >= {thresholds.min_points_per_window} "
                f"points before it (or {thresholds.widened_window_points} points in a sparse log)",
            )
        )
        result.facts["spike_insufficient"] = True
        short_log_jumps(view, thresholds, result)
        return result

    plan = plan_window(
        steps, window, thresholds.min_points_per_window, thresholds.widened_window_points
    )
    widened, window_text = plan.widened, plan.description
    pooled_points = None
    if interval > 0 and window / interval < thresholds.stable_std_points:
        window_points = thresholds.widened_window_points if widened else round(window / interval)
        pooled_points = max(
            thresholds.stable_std_points, window_points * thresholds.noise_level_windows
        )
    memory = loss_noise_memory(view, thresholds)
    baseline = _flag_above_baseline(
        steps, loss, plan, thresholds, pooled_points, memory, facts.lr_plan
    )
    candidates, mean, sigma = baseline.candidates, baseline.mean, baseline.sigma
    first_eligible = baseline.first_eligible_step
    causes_ctx = CauseContext.build(view, steps, thresholds, facts)
    if first_eligible is not None:
        window_points = max(1, round(window / interval)) if interval > 0 else 1
        baseline = _with_around(
            baseline, loss, steps, causes_ctx, thresholds, memory, pooled_points or window_points
        )
        candidates, mean, sigma = baseline.candidates, baseline.mean, baseline.sigma
    # "back to baseline" is judged on a 5-point rolling median in dense logs, so
    # one lucky low mini-batch inside a still-elevated stretch is not a recovery
    # (a forward-looking median: point t and the 4 after it, so the pre-spike
    # points never count as "back")
    # taken a slice at a time by the recovery scans, which read a few points per event
    smooth = None if widened else ForwardMedian.of(loss, thresholds.recovery_median_points)

    # points before any baseline exists (the first 100 steps) can still show a jump
    short_log_jumps(
        view,
        thresholds,
        result,
        before_step=first_eligible,
    )
    excess_over = baseline.near
    if widened and candidates.size:  # a window of the last points, however many steps
        recent = recent_level(candidates, loss, baseline.changes, thresholds.level_change_points)
        near = baseline.near[candidates]
        # on a fast fall the points just before lag above the curve as the mean does
        fall = (baseline.falling[candidates] > 0) | (baseline.carry[candidates] < 0)
        higher = np.where(fall, near, np.fmax(near, recent))
        excess_over = KeptAt(loss.size, candidates, higher)
    sustained = _sustained(
        candidates, loss, mean, sigma, thresholds, memory, excess_over, (steps, baseline.carry)
    )
    settled_at: set[int] = set()
    if not np.any((loss < 0) & (loss > -np.inf)):  # a signed objective has no level to settle
        # a shift whose first points the noise drew low is sustained by where it settled
        ahead = KeptAt(loss.size, candidates, _curve_ahead_at(baseline, candidates, thresholds))
        # a fast fall (warmup, a decay's tail) changes pace within the stretch: only the
        # curve fitted through both sides of the point reads a settled rise there
        settled = settled_shift(
            candidates,
            steps,
            loss,
            ahead,
            sigma,
            thresholds,
            baseline.changes,
            baseline.falling[candidates] > 0,
        )
        sustained |= settled
        settled_at = set(candidates[settled].tolist())
    # most flagged points are lone noise (about 1% of a healthy run): settle those
    # vectorised, and build full events only where something more might be going on
    ratio_level = KeptAt(
        loss.size,
        candidates,
        ratio_reference(
            loss,
            candidates,
            mean[candidates],
            (baseline.falling[candidates] > 0) & baseline.ratio_lags,
            thresholds,
        ),
    )
    lone = _lone_blips(
        candidates, steps, loss, mean, sigma, thresholds, causes_ctx, sustained, ratio_level
    )
    sustained_at = set(candidates[sustained].tolist())
    events: list[SpikeEvent] = []
    next_free = 0
    for idx in candidates[~lone]:  # a handful of real candidates, not rows
        if idx < next_free:
            continue
        event = _build_event(
            int(idx),
            steps,
            loss,
            smooth,
            baseline,
            thresholds,
            causes_ctx,
            int(idx) in sustained_at,
            widened,
            int(idx) in settled_at,
        )
        event.window = window_text
        events.append(event)
        next_free = _after_event(event, steps, thresholds)

    spikes, restart_bumps = split_restart_bumps(
        [e for e in events if e.material], facts.lr_plan, steps, loss, thresholds
    )
    result.findings.extend(restart_bumps)
    blip_steps, blip_z = _blip_list(candidates[lone], events, steps, loss, mean, sigma)
    recurring = recurring_spikes(spikes, thresholds)
    if recurring:
        result.findings.append(recurring_finding(recurring))
        # the tree and the post-mortem see the group as one incident: its first spike
        spikes = [e for e in spikes if e not in recurring[1:]]
        result.facts["recurring_spikes"] = recurring_summary(recurring)
    for event in spikes:
        if not (recurring and event is recurring[0]):
            result.findings.append(spike_finding(event, thresholds))
    if blip_steps.size:
        result.findings.append(
            BLIP.finding(
                f"{blip_steps.size} isolated single-point loss bump(s) "
                f"above mu + {thresholds.spike_sigma:g} sigma with no cause and below the "
                "materiality bar (heavy-tailed mini-batch noise)",
                step=int(blip_steps[0]),
                metric="loss",
                evidence=BlipEvidence(
                    count=int(blip_steps.size),
                    steps=blip_steps[:20].tolist(),
                    largest_z=round(float(blip_z.max()), 2),
                ),
            )
        )
    result.facts["spikes"] = spikes
    result.facts["blips"] = blip_steps.tolist()
    result.facts["spike_window"] = window_text
    return result


def _build_event(
    idx,
    steps,
    loss,
    smooth,
    baseline: _Baseline,
    thresholds: Thresholds,
    ctx: CauseContext,
    sustained: bool,
    widened: bool,
    settled: bool = False,
) -> SpikeEvent:
    mu, sd = float(baseline.mean[idx]), float(baseline.sigma[idx])
    thr = sd * thresholds.spike_sigma + mu  # the flagging threshold at idx, to the last bit
    onset = int(steps[idx])
    # the trailing window mu and sigma were taken over: [t - W, t), or the last
    # widened_window_points points in a sparse log; from a level change, if one is later
    base_lo = (
        max(0, idx - thresholds.widened_window_points)
        if widened
        else int(np.searchsorted(steps, onset - thresholds.spike_window_steps, side="left"))
    )
    restart = baseline.changes[baseline.changes <= idx]
    restart_row = int(restart[-1]) if restart.size and restart[-1] > base_lo else None
    if restart_row is not None:
        base_lo = restart_row
    rise_slope = float(baseline.rise_slope[idx])
    # extent: consecutive points still above the frozen threshold (non-finite counts as above)
    first_below = _first_at_or_below(loss, thr, idx + 1)
    end_idx = (first_below - 1) if first_below is not None else loss.size - 1
    segment = loss[idx : end_idx + 1]
    finite_segment = segment[np.isfinite(segment)]
    peak = float(finite_segment.max()) if finite_segment.size else float("inf")
    peak_idx = idx + (
        int(np.nanargmax(np.where(np.isfinite(segment), segment, -np.inf)))
        if finite_segment.size
        else 0
    )
    z = (peak - mu) / sd if sd > 0 else float("inf")
    # on a rising stretch the run was on a trend, not at its mean: back is back at that
    # trend, carried on from the onset
    start_level = float(baseline.line[idx]) if rise_slope > 0 else mu
    recovery_level = start_level + thresholds.recovery_sigma * sd
    # back means the point itself is back and so are most of the next few
    rec_idx = _first_back(loss, smooth, recovery_level, idx + 1, (steps, onset, rise_slope))
    # a fast fall soon leaves a frozen level behind: back is back on the curve it was on
    carried = (
        back_on_curve(idx, steps, loss, smooth, baseline.changes, (mu, sd, end_idx), thresholds)
        if baseline.falling[idx]
        else None
    )
    curve_fields: dict[str, Any] = {}
    if carried is not None:
        rec_idx, recovery_level, curve_first, curve_last = carried
        curve_fields["recovery_curve_first_step"] = int(steps[max(curve_first, 0)])
        curve_fields["recovery_curve_last_step"] = int(steps[curve_last])
    recovery_step = int(steps[rec_idx]) if rec_idx is not None else None
    next_step = int(steps[idx + 1]) if idx + 1 < steps.size else None
    # a sparse log may have no point within recovery_window_steps: the next logged point decides
    horizon = max(thresholds.recovery_window_steps, (next_step - onset) if next_step else 0)
    recovered = recovery_step is not None and recovery_step - onset <= horizon
    after_nonfinite = not np.all(np.isfinite(segment))  # the event runs on into NaN/Inf
    spike_type = 1 if recovered else 2
    if not recovered and (
        after_nonfinite
        or _keeps_rising(steps, loss, ctx.suffix_max, (idx, end_idx, rec_idx), sd, thresholds)
    ):
        spike_type = 3
    after_window = _point_after(
        steps, loss, int(steps[peak_idx]) + thresholds.recovery_window_steps
    )
    ratio_level = float(
        ratio_reference(
            loss,
            np.array([peak_idx]),
            np.array([mu]),
            (baseline.falling[[idx]] > 0) & baseline.ratio_lags,
            thresholds,
        )[0]
    )
    large = bool(
        z >= thresholds.spike_large_z and peak >= thresholds.spike_large_ratio * ratio_level
    )
    causes = spike_causes(idx, peak_idx, steps, ctx, thresholds, onset, large)
    points = end_idx - idx + 1
    # a restart names the cause of a real spike; it does not turn one noisy
    # point after a resume into a spike (the replay rule judges the resume itself)
    explaining = [c for c in causes if c["cause"] != "optimizer-reset"]
    # (a point whose stretch after it settled high has been judged by that level already)
    if sustained and not (recovered or explaining or large or after_nonfinite or settled):
        # a step that stays up is judged by the level it settled at, not its first points
        from stabilitycli.detect.bump_end import bump_ended  # a spike's only (start-up, #40)

        ahead = float(_curve_ahead_at(baseline, np.array([idx]), thresholds)[0])
        fall = bool(baseline.falling[idx])
        sustained = settled_rise(
            idx, rec_idx, steps, loss, (ahead, sd, fall), baseline.changes, thresholds
        ) or bump_ended(idx, steps, loss, ahead, thresholds)
    material = sustained or bool(explaining) or large or not np.isfinite(peak)
    noise = baseline.after.source_of(idx)
    fields = dict(
        baseline_first_step=int(steps[min(base_lo, idx - 1)]) if idx > 0 else None,
        baseline_last_step=int(steps[idx - 1]) if idx > 0 else None,
        baseline_basis="local-level" if baseline.falling[idx] else "mean",
        window_restart_step=int(steps[restart_row]) if restart_row is not None else None,
        **(noise.fields(steps) if noise is not None else {}),
    )
    fields.update(_around_fields(baseline.around, idx, steps))
    return SpikeEvent(
        onset_step=onset,
        end_step=int(steps[end_idx]),
        peak_step=int(steps[peak_idx]),
        points=points,
        mu=mu,
        sigma=sd,
        threshold=thr,
        peak=peak,
        z=float(z),
        recovered=recovered,
        recovery_step=recovery_step,
        recovery_steps=(recovery_step - onset) if recovery_step is not None else None,
        spike_type=spike_type,
        material=material,
        causes=causes,
        after_window_loss=after_window[1] if after_window else None,
        after_window_step=after_window[0] if after_window else None,
        recovery_level=recovery_level,
        recovery_horizon_steps=int(horizon),
        recovery_slope_per_step=rise_slope if rise_slope > 0 else None,
        **fields,
        **curve_fields,
    )


def _around_fields(around: AroundPoints, idx: int, steps: np.ndarray) -> dict:
    """The SpikeEvent fields of a point judged against the curve around it: the steps that
    curve was read over, and where its sigma came from; {} for any other point."""
    at = around.index(idx)
    if at is None:
        return {}
    out = {
        "baseline_first_step": int(steps[around.first[at]]),
        "baseline_last_step": int(steps[around.last[at]]),
        "baseline_basis": "around",
        "window_restart_step": None,
        "sigma_basis": "differences-floor" if around.floored[at] else "differences",
        "sigma_first_step": int(steps[around.noise_first[at]]),
        "sigma_last_step": int(steps[idx - 1]),
        "sigma_noise_lag1": round(around.lag1, 3),
    }
    if np.isfinite(around.noise[at]):
        out["sigma_noise_before"] = float(around.noise[at])
    return out


def _curve_ahead_at(baseline: _Baseline, rows: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """The curve a settled level after each of `rows` is measured against."""
    return curve_ahead(
        baseline.near[rows],
        baseline.trail[rows],
        baseline.line[rows],
        baseline.rise_slope[rows],
        baseline.falling[rows] > 0,
        thresholds.spike_window_steps / 2,
    )


def _after_event(event: SpikeEvent, steps: np.ndarray, thresholds: Thresholds) -> int:
    """First index a new event may start at: one event, one finding.

    Points above the frozen threshold until the loss is back belong to the event
    that began the rise; a level that never comes back is one persistent event,
    and a new one can start only once the trailing baseline has moved onto it.
    """
    if event.recovery_step is not None:
        until = max(event.end_step, event.recovery_step - 1)
    elif event.material:
        until = max(event.end_step, event.onset_step + thresholds.spike_window_steps)
    else:
        until = event.end_step
    return int(np.searchsorted(steps, until, side="right"))


def _keeps_rising(
    steps, loss, suffix_max, rows: tuple[int, int, int | None], sd: float, thresholds: Thresholds
) -> bool:
    """Does the loss, past the recovery window and before it is ever back at the baseline
    band, go on rising above the spike's own peak (type 3)? Its level does, not one noisy
    point: the median of a recovery window's worth of points (at least
    recovery_median_points) goes above the peak by spike_sigma sigma (the spike bar's
    height over its baseline). A loss that settled on a higher level is persistent (type 2).

    `rows`: the onset, the event's last row and the first row back (None: never back).
    The spike's own peak is its highest point within the recovery window: a loss that keeps
    climbing never falls under the spike bar, so the event runs to the end of the log and
    its whole-event peak is the climb's last top, which no median of the climb can pass.
    Against that early top a plain "above" is not enough: over thousands of points of a
    settled level a five-point median somewhere tops the few points of the window. A rise
    after the loss came back is another story (the divergence rule's, or a later spike's):
    measured over the whole rest of the log, a run back at its baseline for thousands of
    steps was called divergent by an unrelated rise at its end.
    """
    idx, end_idx, back = rows
    later = int(np.searchsorted(steps, steps[idx] + thresholds.recovery_window_steps, side="right"))
    stop = loss.size if back is None else back
    own = loss[idx : min(later, end_idx + 1)]
    own = own[np.isfinite(own)]
    if later >= stop or own.size == 0:
        return False  # back within the window, or no finite point to measure a peak by
    peak = float(own.max()) + thresholds.spike_sigma * sd
    if not suffix_max[later] > peak:
        return False  # no point above the peak at all: no median above it either
    span = int(np.searchsorted(steps, steps[idx] + 2 * thresholds.recovery_window_steps)) - later
    points = max(thresholds.recovery_median_points, span)
    tail = pl.Series(loss[later:stop]).fill_nan(None)
    if tail.len() < points:
        level = tail.median()
    else:
        level = tail.rolling_median(points, min_samples=points // 2 + 1).max()
    return level is not None and float(level) > peak  # type: ignore[arg-type]


def _point_after(steps, loss, at_step: int) -> tuple[int, float] | None:
    """(step, loss) of the first point logged at or after `at_step`."""
    idx = int(np.searchsorted(steps, at_step))
    if idx >= steps.size:
        return None
    return int(steps[idx]), float(loss[idx])
