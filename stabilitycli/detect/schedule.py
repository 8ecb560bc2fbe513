"""LR and weight-norm checks that stand on their own (Q2.3 LR jump, Q4.2, Q4.3)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..config import Thresholds
from ..model import Finding, Severity, Skip
from .registry import RuleResult, rule
from .series import SeriesView
from .windows import value_at_or_before

_JUMP_VS_LOCAL = 10.0  # a jump must also be 10x the LR's recent typical step-to-step change


@rule("lr-jump", "2", "learning rate jumped up between logged points", emits=("lr-jump",))
def detect_lr_jump(view: SeriesView, thresholds: Thresholds, context: dict) -> RuleResult:
    """An upward discontinuity in the learning rate.

    What it detects: an LR that rises by more than 50% (`lr_jump_ratio`)
    from one logged point to the next, and by more than ten times its own
    recent step-to-step change, so a linear warmup ramp is not a jump.
    Scheduled drops (step decay) are deliberate and ignored.

    Why it matters: a jumping LR is a schedule bug (Q2.3), often a scheduler
    whose state a checkpoint did not restore; the spike rule names it as the
    cause when a loss spike follows within 3 steps.
    """
    result = RuleResult()
    if not view.has("lr"):
        result.skipped.append(Skip("lr-jump", "no learning-rate series in the log"))
        return result
    steps, lr = view.points("lr")
    ok = np.isfinite(lr)
    steps, lr = steps[ok], lr[ok]
    if lr.size < 3:
        result.skipped.append(Skip("lr-jump", f"insufficient data: {lr.size} LR points"))
        return result
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(lr[:-1] > 0, np.diff(lr) / lr[:-1], 0.0)
    local = pl.Series(np.abs(rel)).shift(1).rolling_median(10, min_samples=3).fill_null(np.inf).to_numpy()
    jumps = np.flatnonzero((rel > thresholds.lr_jump_ratio) & (rel > _JUMP_VS_LOCAL * local))
    for at in jumps[:20]:
        result.findings.append(Finding(
            "lr-jump", Severity.WARNING,
            f"learning rate jumped {lr[at]:.3g} -> {lr[at + 1]:.3g} (+{rel[at]:.0%}) at step {steps[at + 1]}",
            step=int(steps[at + 1]), metric="lr",
            evidence={"lr_before": float(lr[at]), "lr_after": float(lr[at + 1]), "relative_jump": float(rel[at]),
                      "step_before": int(steps[at])},
        ))
    return result


@rule("lr-increasing", "4", "learning rate still rising after warmup", emits=("lr-increasing",))
def detect_lr_increasing(view: SeriesView, thresholds: Thresholds, context: dict) -> RuleResult:
    """A learning rate that keeps rising past the warmup.

    What it detects: the LR at step t more than 5% above its value 200 steps
    earlier, for windows that start after the first 10% of the run
    (`warmup_frac`) (Q4.2).

    Why it matters: a schedule that rises after warmup (cosine implemented as
    inverse cosine, a warmup that never ends) drives silent divergence; it is
    the first cause §4 checks.
    """
    result = RuleResult()
    if not view.has("lr"):
        result.skipped.append(Skip("lr-increasing", "no learning-rate series in the log"))
        return result
    steps, lr = view.points("lr")
    ok = np.isfinite(lr)
    steps, lr = steps[ok], lr[ok]
    if lr.size < 3:
        result.skipped.append(Skip("lr-increasing", f"insufficient data: {lr.size} LR points"))
        return result
    window = thresholds.divergence_window_steps
    warmup_end = steps[0] + thresholds.warmup_frac * (steps[-1] - steps[0])
    before = value_at_or_before(steps, lr, steps - window)
    eligible = (steps - window >= warmup_end) & np.isfinite(before) & (before > 0)
    rising = eligible & (lr > before * (1 + thresholds.lr_rise_frac))
    if rising.any():
        at = int(np.argmax(rising))
        result.findings.append(Finding(
            "lr-increasing", Severity.WARNING,
            f"learning rate still rising after warmup: {before[at]:.3g} at step {steps[at] - window} -> "
            f"{lr[at]:.3g} at step {steps[at]} (rising in {int(rising.sum())} of {int(eligible.sum())} windows)",
            step=int(steps[at] - window), end_step=int(steps[at]), metric="lr",
            evidence={"lr_before": float(before[at]), "lr_after": float(lr[at]), "warmup_end_step": float(warmup_end)},
        ))
    return result


@rule("weight-norm-change", "4", "a parameter norm changed more than 2x within 200 steps",
      emits=("weight-norm-change",))
def detect_weight_norm_change(view: SeriesView, thresholds: Thresholds, context: dict) -> RuleResult:
    """A weight norm that grows or collapses by more than 2x within 200 steps.

    What it detects: for every parameter-norm series (`param_norm`,
    `param_norm/<group>`), the ratio between its value at step t and 200
    steps earlier outside [1/2, 2] (Q4.3).

    Why it matters: weight decay set too low lets the norm grow, too high
    makes it collapse; both end in divergence. The remedy is adjusting decay
    2x and re-running from the checkpoint.
    """
    result = RuleResult()
    columns = view.param_norm_columns()
    if not columns:
        result.skipped.append(Skip("weight-norm-change", "no parameter-norm series in the log"))
        return result
    window = thresholds.divergence_window_steps
    for name in columns:
        steps, norm = view.points(name)
        ok = np.isfinite(norm) & (norm > 0)
        steps, norm = steps[ok], norm[ok]
        if norm.size < 3:
            continue
        before = value_at_or_before(steps, norm, steps - window)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = norm / before
        changed = np.isfinite(ratio) & ((ratio > thresholds.weight_norm_ratio) | (ratio < 1 / thresholds.weight_norm_ratio))
        if changed.any():
            at = int(np.argmax(changed))
            direction = "grew" if ratio[at] > 1 else "collapsed"
            result.findings.append(Finding(
                "weight-norm-change", Severity.WARNING,
                f"{name} {direction} {ratio[at]:.2f}x within {window} steps ({before[at]:.4g} -> {norm[at]:.4g} at step {steps[at]})",
                step=int(steps[at]), metric=name,
                evidence={"ratio": float(ratio[at]), "before": float(before[at]), "after": float(norm[at])},
            ))
    return result
