"""LR and weight-norm checks that stand on their own (Q2.3 LR jump, Q4.2, Q4.3)."""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Skip
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.schedule import (
    GRAD_NORM_SPIKE,
    LR_INCREASING,
    LR_JUMP,
    WEIGHT_NORM_CHANGE,
    GradNormSpikeEvidence,
    LrIncreasingEvidence,
    LrJumpEvidence,
    WeightNormChangeEvidence,
)
from stabilitycli.detect.pointwise import ForwardChange, Rise
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.windows import (
    CHUNK_ROWS,
    rolling_median_at,
    rows_left_open,
    trailing_median_at,
    value_window_before,
    window_max_at,
)


@rule(
    LR_JUMP.rule,
    LR_JUMP.section,
    "learning rate jumped up between logged points",
    emits=(LR_JUMP,),
    series=("lr",),
    reads=(
        "lr_jump_local_ratio",
        "lr_jump_ratio",
        "lr_restart_peak_frac",
        "lr_restart_period_frac",
        "lr_restarts_intended",
        "planned_lr_restart_steps",
    ),
)
def detect_lr_jump(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """An upward discontinuity in the learning rate.

    What it detects: an LR that rises by more than {lr_jump_ratio:.0%} (`lr_jump_ratio`)
    from one logged point to the next, and by more than {lr_jump_local_ratio:g} times
    its own recent step-to-step change (`lr_jump_local_ratio`), so a linear warmup
    ramp is not a jump.
    Scheduled drops (step decay) are deliberate and ignored, and so are planned warm
    restarts: rises back to the same peak (within {lr_restart_peak_frac:.0%}) at a regular
    period (within {lr_restart_period_frac:.0%}), two or more of them, or one back to the
    run's earlier peak away from a resume; rises at `planned_lr_restart_steps`; every rise
    after warmup when `lr_restarts_intended`. A jump to a level never seen before is no
    restart.

    Why it matters: a jumping LR is a schedule bug (Q2.3), often a scheduler
    whose state a checkpoint did not restore; the spike rule names it as the
    cause of a loss spike that follows within {lr_jump_cause_steps} steps
    (`lr_jump_cause_steps`) while the LR stays up.
    """
    result = RuleResult()
    found = view.finite_or_skip("lr", LR_JUMP.rule, 3, result.skipped)
    if found is None:
        return result
    steps, lr = found
    # the change to the next point, computed where it is read: whole, it and its
    # magnitude were two more copies of the LR on a long log
    rel = ForwardChange(lr)
    rose = np.concatenate(
        [np.zeros(0, dtype=np.int64)]
        + [  # a chunk of rows at a time, not a row
            np.flatnonzero(rel[first : first + CHUNK_ROWS] > thresholds.lr_jump_ratio) + first
            for first in range(0, rel.size, CHUNK_ROWS)
        ]
    )
    # the recent change is needed only where the LR rose past the ratio (a warmup's first
    # few points, a jump), so its rolling median is taken there alone
    local = rolling_median_at(ForwardChange(lr, magnitude=True), 10, 3, rose)  # NaN never flags
    jumps = rose[rel[rose] > thresholds.lr_jump_local_ratio * local]
    # one jump that the log shows over several consecutive points (a x10 LR reached in
    # three logged rises) is one event: from the point before its first rise to its last
    starts = jumps[np.concatenate(([True], np.diff(jumps) > 1))] if jumps.size else jumps
    ends = jumps[np.concatenate((np.diff(jumps) > 1, [True]))] if jumps.size else jumps
    plan = facts.lr_plan
    events = [
        (first, last)
        for first, last in zip(starts, ends, strict=True)
        if plan is None or plan.restart_near(int(steps[first]), int(steps[last + 1])) is None
    ]
    for first, last in events[:20]:
        before, after = float(lr[first]), float(lr[last + 1])
        rise = after / before - 1 if before > 0 else float("inf")
        over = (
            f" over steps {steps[first]}-{steps[last + 1]} ({last - first + 1} logged rises)"
            if last > first
            else f" at step {steps[last + 1]}"
        )
        result.findings.append(
            LR_JUMP.finding(
                f"learning rate jumped {before:.3g} -> {after:.3g} (+{rise:.0%}){over}",
                step=int(steps[first + 1]),
                end_step=int(steps[last + 1]),
                metric="lr",
                evidence=LrJumpEvidence(
                    lr_before=before,
                    lr_after=after,
                    relative_jump=float(rise),
                    step_before=int(steps[first]),
                    rises=int(last - first + 1),
                ),
            )
        )
    return result


@rule(
    LR_INCREASING.rule,
    LR_INCREASING.section,
    "learning rate still rising after warmup",
    emits=(LR_INCREASING,),
    series=("lr",),
    reads=(
        "divergence_window_steps",
        "lr_restart_peak_frac",
        "lr_restart_period_frac",
        "lr_restarts_intended",
        "lr_rise_frac",
        "planned_lr_restart_steps",
        "warmup_frac",
    ),
)
def detect_lr_increasing(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A learning rate that keeps rising past the warmup.

    What it detects: the LR at step t more than {lr_rise_frac:.0%} above its value
    {divergence_window_steps} steps earlier, for windows that start after warmup: after
    the schedule first decreased, or after the first {warmup_frac:.0%} of the run
    (`warmup_frac`) (Q4.2).

    Why it matters: a schedule that rises after warmup (cosine implemented as
    inverse cosine, a warmup that never ends) drives silent divergence; it is
    the first cause §4 checks. A window that holds a planned LR restart (see lr-jump)
    is not read as rising.
    """
    result = RuleResult()
    found = view.finite_or_skip("lr", LR_INCREASING.rule, 3, result.skipped)
    if found is None:
        return result
    steps, lr = found
    window = thresholds.divergence_window_steps
    warmup_over = warmup_end(steps, lr, thresholds)
    rising_count = eligible_count = 0
    first_rise: tuple[int, float] | None = None  # the row and the LR a window before it
    for first in range(0, steps.size, CHUNK_ROWS):  # a chunk of rows at a time, not a row
        stop = min(steps.size, first + CHUNK_ROWS)
        rising, eligible, before = _rising_after_warmup(
            steps, lr, window, warmup_over, thresholds, first, stop
        )
        if facts.lr_plan is not None and facts.lr_plan.restarts:
            eligible &= ~facts.lr_plan.after_restart(steps[first:stop], window)
            rising &= eligible
        rising_count += int(rising.sum())
        eligible_count += int(eligible.sum())
        if first_rise is None and rising.any():
            at = int(np.argmax(rising))
            first_rise = (first + at, float(before[at]))
    if first_rise is not None:
        at, lr_before = first_rise
        # the LR compared with is the last one logged at or before a window earlier
        before_step = int(steps[int(np.searchsorted(steps, steps[at] - window, "right")) - 1])
        result.findings.append(
            LR_INCREASING.finding(
                "learning rate still rising after warmup: "
                f"{lr_before:.3g} at step {before_step} -> "
                f"{lr[at]:.3g} at step {steps[at]} "
                f"(rising in {rising_count} of {eligible_count} windows)",
                step=int(steps[at] - window),
                end_step=int(steps[at]),
                metric="lr",
                evidence=LrIncreasingEvidence(
                    lr_before=lr_before,
                    lr_before_step=before_step,
                    lr_after=float(lr[at]),
                    warmup_end_step=float(warmup_over),
                ),
            )
        )
    return result


def _rising_after_warmup(
    steps: np.ndarray,
    lr: np.ndarray,
    window: int,
    warmup_over: float,
    thresholds: Thresholds,
    first: int,
    stop: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At the rows [first, stop): whether the LR rose over the window before it (not in one
    jump), whether that window starts after warmup, and the LR a window before."""
    at_steps, at_lr = steps[first:stop], lr[first:stop]
    before = value_window_before(steps, lr, window, first, stop)
    eligible = (at_steps - window >= warmup_over) & np.isfinite(before) & (before > 0)
    rising = eligible & (at_lr > before * (1 + thresholds.lr_rise_frac))
    # a rise made of one jump is the lr-jump rule's finding, not a rising schedule; the
    # biggest single rise is needed only where the LR rose over the window at all, and
    # its window reaches back no further than `reach`
    rose = np.flatnonzero(rising)
    if rose.size:
        reach = int(np.searchsorted(steps, at_steps[0] - window, side="right"))
        with np.errstate(invalid="ignore"):
            biggest = window_max_at(
                steps[reach:stop], Rise(lr)[reach:stop], window, rose + first - reach
            )
            rising[rose] = biggest < 0.5 * (at_lr[rose] - before[rose])
    return rising, eligible, before


def warmup_end(steps: np.ndarray, lr: np.ndarray, thresholds: Thresholds) -> float:
    """Where warmup is over: the first scheduled LR decrease, or `warmup_frac` of the run.

    A schedule that has started to decay and then rises again is a bug (or a
    deliberate restart worth a warning); one that has not decayed by
    `warmup_frac` of the run is a warmup that never ends.
    """
    if steps.size < 2:
        return float(steps[0]) if steps.size else 0.0
    by_fraction = steps[0] + thresholds.warmup_frac * (steps[-1] - steps[0])
    for first in range(0, lr.size - 1, CHUNK_ROWS):  # the first decrease, a chunk at a time
        part = lr[first : first + CHUNK_ROWS + 1]
        decreases = np.flatnonzero(part[1:] < part[:-1])
        if decreases.size:
            return float(min(steps[first + decreases[0] + 1], by_fraction))
    return float(by_fraction)


@rule(
    WEIGHT_NORM_CHANGE.rule,
    WEIGHT_NORM_CHANGE.section,
    "a parameter norm changed more than {weight_norm_ratio:g}x within {divergence_window_steps} "
    "steps",
    emits=(WEIGHT_NORM_CHANGE,),
    series=("param_norm",),
    reads=("divergence_window_steps", "weight_norm_ratio"),
)
def detect_weight_norm_change(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A weight norm that grows or collapses by more than {weight_norm_ratio:g}x within
    {divergence_window_steps} steps.

    What it detects: for every parameter-norm series (`param_norm`,
    `param_norm/<group>`), the ratio between its value at step t and
    {divergence_window_steps} steps earlier outside
    [1/{weight_norm_ratio:g}, {weight_norm_ratio:g}] (Q4.3).

    Why it matters: weight decay set too low lets the norm grow, too high
    makes it collapse; both end in divergence. The remedy is adjusting the
    decay and re-running from the checkpoint.
    """
    result = RuleResult()
    columns = view.param_norm_columns()
    if not columns:
        result.skipped.append(Skip(WEIGHT_NORM_CHANGE.rule, "no parameter-norm series in the log"))
        return result
    window = thresholds.divergence_window_steps
    for name in columns:
        steps, norm = view.points(name)
        ok = np.isfinite(norm) & (norm > 0)
        steps, norm = steps[ok], norm[ok]
        if norm.size < 3:
            continue
        before = value_window_before(steps, norm, window)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = norm / before
        changed = np.isfinite(ratio) & (
            (ratio > thresholds.weight_norm_ratio) | (ratio < 1 / thresholds.weight_norm_ratio)
        )
        if changed.any():
            at = int(np.argmax(changed))
            before_step = int(steps[int(np.searchsorted(steps, steps[at] - window, "right")) - 1])
            direction = "grew" if ratio[at] > 1 else "collapsed"
            result.findings.append(
                WEIGHT_NORM_CHANGE.finding(
                    f"{name} {direction} {ratio[at]:.2f}x within {window} steps "
                    f"({before[at]:.4g} at step {before_step} -> {norm[at]:.4g} at step "
                    f"{steps[at]})",
                    step=int(steps[at]),
                    metric=name,
                    evidence=WeightNormChangeEvidence(
                        ratio=float(ratio[at]),
                        before=float(before[at]),
                        before_step=before_step,
                        after=float(norm[at]),
                    ),
                )
            )
    return result


@rule(
    GRAD_NORM_SPIKE.rule,
    GRAD_NORM_SPIKE.section,
    "pre-clip grad norm far above its trailing median (info)",
    emits=(GRAD_NORM_SPIKE,),
    series=("grad_norm",),
    reads=("grad_norm_outlier_ratio", "min_points_per_window", "spike_window_steps"),
)
def detect_grad_norm_spike(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A pre-clip grad-norm outlier, noted even when the loss did not spike.

    What it detects: a finite grad norm at least {grad_norm_outlier_ratio:g}x
    (`grad_norm_outlier_ratio`) its median over the previous {spike_window_steps}
    steps. Informational: clipping usually absorbs such a step; the spike rule uses
    grad norm as a cause only when the loss spikes with it ({grad_norm_spike_ratio:g}x,
    Q2.3).

    Why it matters: a grad-norm spike is the leading indicator of a loss
    spike (it leads by 1-3 steps); a run with several is one bad batch away
    from one, and the post-mortem wants the batch index.
    """
    result = RuleResult()
    found = view.finite_or_skip(
        "grad_norm", GRAD_NORM_SPIKE.rule, thresholds.min_points_per_window + 1, result.skipped
    )
    if found is None:
        return result
    steps, grad = found
    window, bar = thresholds.spike_window_steps, thresholds.grad_norm_outlier_ratio

    # the trailing median is needed exactly only where a cheap lower bound of it leaves
    # the point possibly >= bar x the median; elsewhere grad / median <= grad / bound < bar
    def below_bar(grad: np.ndarray, lower: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return (grad >= 0) & (lower > 0) & (grad / lower < bar)

    open_rows = rows_left_open(steps, grad, window, "lower", below_bar)
    # the median and the ratio at the open rows only: elsewhere no point can reach the bar
    baseline = trailing_median_at(steps, grad, window, open_rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = grad[open_rows] / baseline
    hit_at = np.flatnonzero(np.isfinite(ratio) & (ratio >= thresholds.grad_norm_outlier_ratio))
    hits = open_rows[hit_at]
    if hits.size:
        worst_at = hit_at[np.argmax(ratio[hit_at])]
        worst = open_rows[worst_at]
        result.findings.append(
            GRAD_NORM_SPIKE.finding(
                f"{hits.size} grad-norm outlier(s) >= {thresholds.grad_norm_outlier_ratio:g}x the "
                f"trailing median; largest {grad[worst]:.4g} at step {steps[worst]} "
                f"({ratio[worst_at]:.1f}x {baseline[worst_at]:.3g})",
                step=int(steps[hits[0]]),
                metric="grad_norm",
                evidence=GradNormSpikeEvidence(
                    count=int(hits.size),
                    steps=steps[hits][:20].tolist(),
                    largest_step=int(steps[worst]),
                    largest=float(grad[worst]),
                    baseline_median=float(baseline[worst_at]),
                    ratio=float(ratio[worst_at]),
                ),
            )
        )
    return result
