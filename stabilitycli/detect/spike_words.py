"""What the spike rule's findings say: the sentences of a spike, its baseline, its sigma and
its recovery level, read from its evidence (the classifier and the post-mortem use them too),
and the one finding that tells many one-point spikes with no cause at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding, Severity
from stabilitycli.detect.kinds.spike import (
    RECURRING_SPIKES,
    SPIKE,
    RecurringSpikesEvidence,
    SpikeEvent,
    SpikeEvidence,
)


def recurring_spikes(spikes: list[SpikeEvent], thresholds: Thresholds) -> list[SpikeEvent]:
    """One-point spikes with no cause that came straight back, when the run has many.

    A healthy large run can show dozens of single-step jumps of 1.5-2x that revert
    at once (type 1, from rare batches): each is the same story, told
    once with its count, steps and sizes, not as dozens of findings.
    """
    isolated = [
        e for e in spikes if e.points == 1 and e.recovered and not e.causes and np.isfinite(e.peak)
    ]
    return isolated if len(isolated) >= thresholds.recurring_spike_min_count else []


def recurring_summary(group: list[SpikeEvent]) -> RecurringSpikesEvidence:
    ratios = [e.peak / e.mu for e in group if e.mu > 0]
    return RecurringSpikesEvidence(
        count=len(group),
        steps=[e.onset_step for e in group],
        ratio_min=float(min(ratios)) if ratios else None,
        ratio_max=float(max(ratios)) if ratios else None,
        z_min=float(min(e.z for e in group)),
        z_max=float(max(e.z for e in group)),
        recovered_share=1.0,
        longest_recovery_steps=max(e.recovery_steps or 0 for e in group),
    )


def recurring_finding(group: list[SpikeEvent]) -> Finding:
    summary = recurring_summary(group)
    size = (
        f"{summary['ratio_min']:.2f}-{summary['ratio_max']:.2f}x the trailing mean"
        if summary["ratio_min"] is not None
        else f"z {summary['z_min']:.1f}-{summary['z_max']:.1f}"
    )
    shown = ", ".join(map(str, summary["steps"][:8]))
    more = f", ... ({summary['count'] - 8} more)" if summary["count"] > 8 else ""
    return RECURRING_SPIKES.finding(
        f"{summary['count']} one-point loss spikes with no evident cause, each {size}, "
        f"all back at baseline within {summary['longest_recovery_steps']} steps "
        f"(steps {shown}{more}): rare batches, worth a look at the data, not a rollback",
        step=group[0].onset_step,
        end_step=group[-1].onset_step,
        metric="loss",
        evidence=summary,
    )


def baseline_text(event: SpikeEvent) -> str:
    """'baseline mean 3.11 over steps 700-799': mu and the steps it was taken over; 'local
    level 4.63 at step 200 (the trend of steps 100-199)' where the mean lagged a fall."""
    steps = (
        f"steps {event.baseline_first_step}-{event.baseline_last_step}"
        if event.baseline_first_step is not None
        else ""
    )
    restart = (
        f", the window restarted at the level change at step {event.window_restart_step}"
        if event.window_restart_step is not None
        else ""
    )
    if event.baseline_basis == "local-level":
        return (
            f"local level {event.mu:.4g} at step {event.onset_step} "
            f"(the trend of {steps or 'the window'}{restart})"
        )
    if event.baseline_basis == "around":
        return (
            f"the curve around step {event.onset_step}, {event.mu:.4g} (the median of the "
            f"points logged over {steps} either side of it)"
        )
    return (
        f"baseline mean {event.mu:.4g}"
        + (f" over {steps}" if steps else "")
        + (f" ({restart[2:]})" if restart else "")
    )


def sigma_text(ev: Mapping[str, Any], thresholds: Thresholds) -> str:
    """'sigma 0.032', and where it came from when not from the baseline's steps: in the first
    points after a level change, the noise measured before the change, scaled to the level
    since it (`after_change`), or the floor. Read from a spike's evidence."""
    text = f"sigma {ev['sigma']:.3g}"
    basis = ev.get("sigma_basis")
    if not basis:
        return text
    if basis in ("differences", "differences-floor"):
        return f"{text} ({_around_sigma_text(ev, thresholds)})"
    before = (
        f"the noise over steps {ev['sigma_first_step']}-{ev['sigma_last_step']} before the "
        f"level change, {ev['sigma_noise_before']:.3g}"
    )
    if basis == "floor":
        return (
            f"{text} (the floor, {thresholds.sigma_floor_frac:.0%} of the baseline mean; "
            f"{before}, scaled to the level since it, was under it)"
        )
    if basis == "before-change-differences":
        lag1 = ev.get("sigma_noise_lag1")
        memory = (
            f", allowing for their lag-1 autocorrelation {lag1:.2f}"
            if lag1
            else ", with no lag-1 autocorrelation to allow for"
        )
        how = f"from the changes between successive points{memory}"
    else:
        how = "the spread around a line fitted to those points"
    return f"{text} ({before} {how}, scaled to the level since the change)"


def _around_sigma_text(ev: Mapping[str, Any], thresholds: Thresholds) -> str:
    """Where the sigma of a point judged against the curve around it came from."""
    lag1 = ev.get("sigma_noise_lag1")
    memory = f", allowing for their lag-1 autocorrelation {lag1:.2f}" if lag1 else ""
    stretch = (
        f"the changes between successive points over steps {ev['sigma_first_step']}-"
        f"{ev['sigma_last_step']}"
    )
    if ev["sigma_basis"] == "differences":
        return f"from {stretch}{memory}"
    measured = ev.get("sigma_noise_before")
    said = f"gave {measured:.3g}{memory}" if measured is not None else "were too few to measure"
    return f"the floor, {thresholds.sigma_floor_frac:.0%} of that level; {stretch} {said}"


def baseline_name(basis: str | None) -> str:
    """What a spike's mu is called, by its `baseline_basis`."""
    return {"local-level": "local level", "around": "curve around it"}.get(
        basis or "mean", "baseline mean"
    )


def recovery_level_text(event: SpikeEvent, thresholds: Thresholds) -> str:
    """'3.15 (baseline mean + 0.5*sigma)': the level the loss had to come back to, and what
    it was made of."""
    added = f"{thresholds.recovery_sigma:g}*sigma"
    if event.recovery_slope_per_step is not None:
        return (
            f"{event.recovery_level:.4g} at step {event.onset_step}, rising "
            f"{event.recovery_slope_per_step:.3g} a step (the rising trend of steps "
            f"{event.baseline_first_step}-{event.baseline_last_step} + {added})"
        )
    what = baseline_name(event.baseline_basis)
    if isinstance(event.recovery_curve_last_step, int):
        return (
            f"{event.recovery_level:.4g} at step {event.onset_step} ({what} + {added}), "
            "falling with the curve fitted through the points of steps "
            f"{event.recovery_curve_first_step}-{event.recovery_curve_last_step} (a step at "
            f"{event.onset_step} fitted apart, the event's own points left out)"
        )
    return f"{event.recovery_level:.4g} ({what} + {added})"


# what a spike type is, in the words the outputs use (the number stays in the evidence)
SPIKE_TYPE_WORDS: dict[int, str] = {1: "recoverable", 2: "persistent", 3: "divergent"}


def spike_type_note(spike_type: int) -> str:
    """' (divergent: the loss kept rising)' for a type 3 spike; '' for the others, whose
    "recovered" / "did not recover" already says what they are."""
    return " (divergent: the loss kept rising)" if spike_type == 3 else ""


def spike_finding(event: SpikeEvent, thresholds: Thresholds) -> Finding:
    kind = SPIKE_TYPE_WORDS[event.spike_type]
    back = f"back to <= {recovery_level_text(event, thresholds)}"
    recovery = (
        f"above the spike bar through step {event.end_step}, {back} by step "
        f"{event.recovery_step} ({event.recovery_steps} steps after onset)"
        if event.recovered
        else (
            "did not recover"
            + (f" ({back} only at step {event.recovery_step})" if event.recovery_step else "")
        )
    )
    evidence = SpikeEvidence.of(event)
    message = (
        f"loss spike at step {event.onset_step}: peak {event.peak:.4g} at step {event.peak_step} "
        f"> {baseline_text(event)} + {thresholds.spike_sigma:g}*"
        f"{sigma_text(evidence, thresholds)}; "
        f"{kind}, {recovery}" + (f"; cause: {event.cause}" if event.cause else "")
    )
    return SPIKE.finding(
        message,
        severity=Severity.WARNING if event.recovered else Severity.ERROR,
        step=event.onset_step,
        end_step=event.end_step,
        metric="loss",
        evidence=evidence,
    )
