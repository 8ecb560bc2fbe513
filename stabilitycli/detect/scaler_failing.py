"""§3: a loss scaler that is there but does not absorb the overflows (`fp16-overflow`).

Halving after an overflow is what a dynamic scaler is for; these are the cases
where the log shows it is not working: an overflow at a material loss spike,
overflow on most of the log's last steps with the scale falling and never
regrowing (the scaler is failing: each skipped step is a lost update, and the
scale heads for its floor), or an overflow at a step whose loss jumped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.overflow_ledger import OverflowLedger, scale_text
from stabilitycli.detect.series import SeriesView

if TYPE_CHECKING:
    from stabilitycli.detect.kinds.spike import SpikeEvent


def not_absorbed(
    view: SeriesView, thresholds: Thresholds, ledger: OverflowLedger, spikes: list[SpikeEvent]
) -> tuple[str, dict] | None:
    """Why a scaler that is there does not absorb the overflows (and the evidence), or None."""
    steps = ledger.steps
    at_spike = [
        s
        for s in spikes
        if np.any((steps >= s.onset_step - thresholds.cause_lead_steps) & (steps <= s.end_step))
    ]
    if at_spike:
        spike = at_spike[0].onset_step
        return (
            f"fp16 overflow not absorbed by the scaler: overflow at the loss spike of step {spike}",
            {
                "reason": "at-spike",
                "spike_step": spike,
            },
        )
    return _failing(view, thresholds, ledger) or _loss_jump(view, thresholds, ledger)


def _failing(
    view: SeriesView, thresholds: Thresholds, ledger: OverflowLedger
) -> tuple[str, dict] | None:
    """Overflow on most of the log's last steps, the scale falling and never regrowing."""
    sc = ledger.scale
    if sc is None or not ledger.total or not view.steps.size:
        return None
    last = int(view.steps[-1])
    recent = ledger.steps >= max(last - thresholds.failing_scaler_window_steps + 1, 0)
    if not recent.any():
        return None
    begin = int(ledger.steps[recent][0])
    if begin <= thresholds.scale_search_steps:
        return None  # the scaler's first search for its scale
    window = last - begin + 1
    count = int(ledger.counts[recent].sum())
    fell = sc.fall_steps[sc.fall_steps >= begin]
    if (
        count < thresholds.failing_scaler_min_overflows
        or min(count, window) / window <= thresholds.failing_scaler_overflow_fraction
        or not fell.size
        or np.any(sc.rise_steps >= begin)
    ):
        return None
    s_steps, s_values = view.finite_points("loss_scale")
    before = s_values[s_steps < begin]
    attempted = ledger.attempted[recent]
    start = (
        float(attempted[np.isfinite(attempted)][0])
        if np.isfinite(attempted).any()
        else float(before[-1])
        if before.size
        else sc.max
    )
    return (
        f"fp16 loss scaler failing: overflow on {'at least ' if not ledger.exact else ''}"
        f"{min(count, window)} of the {window} steps {begin}-{last} (the end of the log), the "
        "scale falling from "
        f"{scale_text(start)} to {scale_text(sc.final)} in {sc.halvings_text()} halving(s) "
        "and never regrowing",
        {
            "reason": "failing",
            "window_first_step": begin,
            "window_steps": window,
            "window_overflows": count,
            "scale_from": start,
            "scale_to": sc.final,
        },
    )


def _loss_jump(
    view: SeriesView, thresholds: Thresholds, ledger: OverflowLedger
) -> tuple[str, dict] | None:
    """The first overflow at a step whose loss jumped against the loss logged before it."""
    if not view.has("loss") or not ledger.total:
        return None
    l_steps, loss = view.finite_points("loss")
    if loss.size < 2:
        return None
    # overflows at a known step (a message, a non-finite grad norm): an interval entry does not
    # say whether its overflows came before the jump or after; and not the scaler's first search
    late = (ledger.steps > thresholds.scale_search_steps) & ledger.step_known
    at = np.searchsorted(l_steps, ledger.steps[late])
    ok = (at > 0) & (at < l_steps.size)
    ok[ok] &= l_steps[at[ok]] == ledger.steps[late][ok]
    idx = at[ok]
    before, after = loss[idx - 1], loss[idx]
    jumped = np.flatnonzero((before > 0) & (after >= thresholds.overflow_loss_jump_ratio * before))
    if not jumped.size:
        return None
    entry = np.flatnonzero(late)[np.flatnonzero(ok)[jumped[0]]]
    k = idx[jumped[0]]
    step = int(l_steps[k])
    return (
        f"fp16 overflow at a loss jump: {int(ledger.counts[entry])} overflow(s) at step {step}, "
        f"where the loss jumped from {loss[k - 1]:.4g} (step "
        f"{int(l_steps[k - 1])}) to {loss[k]:.4g} (step {step}, {loss[k] / loss[k - 1]:.2f}x)",
        {
            "reason": "loss-jump",
            "jump_step": step,
            "loss_before": float(loss[k - 1]),
            "loss_at": float(loss[k]),
        },
    )
