"""The largest step-over-step jumps of a log too short for the spike baseline, or of the
stretch before that baseline exists."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.kinds.spike import GRAD_NORM_JUMP, LOSS_JUMP, JumpEvidence
from stabilitycli.detect.registry import RuleResult
from stabilitycli.detect.series import SeriesView


def short_log_jumps(
    view: SeriesView, thresholds: Thresholds, result: RuleResult, before_step: int | None = None
) -> None:
    """What a log too short for a baseline still shows: its largest step-over-step jumps.

    With `before_step`, only the stretch before the first step that has a
    baseline is looked at (the start of a run the spike rule cannot judge), and only
    when that stretch holds `short_log_jump_min_frac` of the log's points: in a long
    run it is the warmup, whose mini-batch losses jump by nature, not a short log.
    """
    # early in training the grad norm is jumpy by nature: before a baseline exists
    # only the loss is watched; in a log that is all too short, both are
    metrics = ("loss",) if before_step is not None else ("loss", "grad_norm")
    jumps = {}
    for metric in metrics:
        if not view.has(metric):
            continue
        steps, values = view.points(metric)
        finite = np.isfinite(values)
        if before_step is not None:
            total = int(finite.sum())
            finite &= steps < before_step
            if finite.sum() < thresholds.short_log_jump_min_frac * total:
                continue
        jump = _largest_jump(steps[finite], values[finite])
        if jump is not None and jump["ratio"] >= {
            "loss": thresholds.short_log_loss_jump_ratio,
            "grad_norm": thresholds.short_log_grad_norm_jump_ratio,
        }.get(metric, math.inf):
            jumps[metric] = jump
    loss_jump, grad_jump = jumps.get("loss"), jumps.get("grad_norm")
    if loss_jump and grad_jump and grad_jump["to_step"] == loss_jump["to_step"]:
        # one step, one event: the grad norm's jump there is told with the loss's
        jumps["loss"] = replace(loss_jump, grad_norm_ratio=grad_jump["ratio"])
        del jumps["grad_norm"]
    why = (
        "before the spike baseline exists"
        if before_step is not None
        else "too few points for the spike baseline"
    )
    for metric, jump in jumps.items():
        kind = LOSS_JUMP if metric == "loss" else GRAD_NORM_JUMP
        with_grad = (
            f", the grad norm jumping {jump['grad_norm_ratio']:.1f}x at the same step"
            if jump.get("grad_norm_ratio")
            else ""
        )
        result.findings.append(
            kind.finding(
                f"{metric} jumped {jump['ratio']:.1f}x from {jump['before']:.4g} "
                f"(step {jump['from_step']}) to {jump['after']:.4g} (step {jump['to_step']})"
                f"{with_grad}; {why}, so not judged as a spike",
                step=jump["to_step"],
                metric=metric,
                evidence=jump,
            )
        )


def _largest_jump(s: np.ndarray, v: np.ndarray) -> JumpEvidence | None:
    """The largest rise from one finite logged point to the next, as a ratio."""
    if s.size < 2:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = v[1:] / np.abs(v[:-1])
    # 0/0 (a grad norm logged as 0.000) says nothing
    ratio = np.where(np.isfinite(ratio), ratio, 0.0)
    at = int(np.argmax(ratio))
    return JumpEvidence(
        from_step=int(s[at]),
        to_step=int(s[at + 1]),
        before=float(v[at]),
        after=float(v[at + 1]),
        ratio=float(ratio[at]),
    )
