"""Loss bumps after planned LR restarts: the schedule working, or a spike the restart caused.

A warm restart raises the LR back to its peak and the loss bumps up and decays back; the
spike rule builds the event as it does any other and names the restart as its cause
(`LrRestart`), and this module decides which it was. Decayed: the median of
`recovery_median_points` points back within `restart_back_sigma` of the baseline mean
before the restart, within `restart_decay_period_frac` of the period (or
`recovery_window_steps`, if longer), and not far longer (`restart_decay_ratio`) than the
earlier restarts took. Such a bump is an informational `schedule-restart`; any other stays
a spike (persistent or divergent, caused by the restart), so a blow-up after a restart is
reported.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding
from stabilitycli.detect.kinds.spike import (
    SCHEDULE_RESTART,
    LrRestart,
    ScheduleRestartEvidence,
    SpikeEvent,
)
from stabilitycli.detect.lr_plan import LrPlan


def restart_cause(event: SpikeEvent) -> LrRestart | None:
    return next((c for c in event.causes if isinstance(c, LrRestart)), None)


def split_restart_bumps(
    spikes: list[SpikeEvent],
    plan: LrPlan | None,
    steps: np.ndarray,
    loss: np.ndarray,
    thresholds: Thresholds,
) -> tuple[list[SpikeEvent], list[Finding]]:
    """The spikes left, and a `schedule-restart` finding for each decayed restart bump."""
    if plan is None or not plan.restarts:
        return spikes, []
    kept: list[SpikeEvent] = []
    bumps: list[Finding] = []
    decays: list[int] = []  # of the earlier restarts that decayed
    later = [r.step for r in plan.restarts]
    for event in spikes:
        cause = restart_cause(event)
        if cause is None:
            kept.append(event)
            continue
        step = cause["restart_step"]
        following = [s for s in later if s > step]
        period = plan.period_steps or ((following[0] if following else int(steps[-1])) - step)
        limit = int(
            max(thresholds.recovery_window_steps, thresholds.restart_decay_period_frac * period)
        )
        back = _back_step(steps, loss, event, step + limit, thresholds)
        decay = None if back is None else back - step
        slower = bool(
            decays
            and decay is not None
            # against at least the recovery window: a few quick earlier bumps (20 steps)
            # must not make an ordinary one (70 steps) "far longer"
            and decay
            > thresholds.restart_decay_ratio
            * max(float(np.median(decays)), thresholds.recovery_window_steps)
        )
        # back within the limit is decayed, whatever later restarts do (a type-3 spike's
        # "kept rising" looks at the whole rest of the log, the next restarts' bumps too)
        if decay is None or decay > limit or slower:
            kept.append(event)
            continue
        decays.append(decay)
        bumps.append(_finding(event, cause, int(back or 0), decay, limit, plan, thresholds))
    return kept, bumps


def _back_step(
    steps: np.ndarray, loss: np.ndarray, event: SpikeEvent, until: int, thresholds: Thresholds
) -> int | None:
    """The first step from the bump's peak on, up to `until`, where the median of it and the
    next points is within `restart_back_sigma` of the baseline mean (NaN: never back).

    Not the spike's recovery (back to mu + 0.5 sigma): a baseline of ten points in a sparse
    log can sit a sigma low by chance, and the loss then seems never to come back."""
    width = thresholds.recovery_median_points
    start = int(np.searchsorted(steps, event.peak_step))
    stop = int(np.searchsorted(steps, until, side="right"))
    part = loss[start : stop + width - 1]
    if part.size < width or stop <= start:
        return None
    medians = np.median(np.lib.stride_tricks.sliding_window_view(part, width), axis=1)
    with np.errstate(invalid="ignore"):
        hit = np.flatnonzero(medians <= event.mu + thresholds.restart_back_sigma * event.sigma)
    hit = hit[hit < stop - start]
    return int(steps[start + hit[0]]) if hit.size else None


def _finding(
    event: SpikeEvent,
    cause: LrRestart,
    back: int,
    decay: int,
    limit: int,
    plan: LrPlan,
    thresholds: Thresholds,
) -> Finding:
    restart = next(r for r in plan.restarts if r.step == cause["restart_step"])
    bump = event.peak - event.mu
    origin = "declared" if restart.declared else "planned"
    return SCHEDULE_RESTART.finding(
        f"{origin} LR restart at step {restart.step} (LR {restart.lr_before:.3g} at step "
        f"{restart.step_before} -> {restart.lr_after:.3g}): the loss bumped +{bump:.3g} "
        f"(peak {event.peak:.4g} at step {event.peak_step} over the baseline mean "
        f"{event.mu:.4g}) and was back within {thresholds.restart_back_sigma:g} sigma of it "
        f"by step {back}, "
        f"{decay} steps after the restart (a decayed bump is back within {limit} steps)",
        step=restart.step,
        end_step=back,
        metric="loss",
        evidence=ScheduleRestartEvidence(
            restart_step=restart.step,
            step_before=restart.step_before,
            lr_before=restart.lr_before,
            lr_after=restart.lr_after,
            baseline_mean=event.mu,
            baseline_first_step=event.baseline_first_step,
            baseline_last_step=event.baseline_last_step,
            peak=event.peak,
            peak_step=event.peak_step,
            bump=float(bump),
            recovery_step=back,
            decay_steps=int(decay),
            decay_limit_steps=limit,
            declared=restart.declared,
        ),
    )
