"""The eval/validation loss series: non-finite evaluations (§1) and over-fitting (§4).

Evaluations are sparse (every 100-1000 steps, 5-50 points in a run), so these
rules count evaluations, not steps, and measure the eval loss against its own
noise, read from its successive differences.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.metric_names import MIN_SCORE, match_keys
from stabilitycli.core.model import Severity, Skip
from stabilitycli.detect.facts import EvalSeries, Facts
from stabilitycli.detect.kinds.eval import (
    EVAL_NONFINITE,
    OVERFITTING,
    EvalNonfiniteEvidence,
    OverfittingEvidence,
)
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView

EVAL_LOSS = "eval_loss"
_NO_EVAL = "no eval/validation loss series in the log"
# 1.4826 * MAD estimates a normal sigma; a second difference (x[i+1] - 2 x[i] + x[i-1]) of
# independent noise has sqrt(6) of it, and a smooth decay adds almost nothing to it
_MAD_SIGMA = 1.4826 / np.sqrt(6.0)


def eval_series(view: SeriesView) -> list[tuple[str, str]]:
    """(column, logged key) of every eval loss the view holds: `eval_loss`, then any other
    column whose name reads as a validation loss (a second eval set)."""
    out = []
    if view.has(EVAL_LOSS):
        out.append((EVAL_LOSS, view.source.metrics.get(EVAL_LOSS, EVAL_LOSS)))
    # a column the aliases did not map keeps the key it was logged under
    unmapped = [c for c in view.columns if c not in view.source.metrics]
    found = match_keys(unmapped, {EVAL_LOSS}).get(EVAL_LOSS, [])
    return out + [(m.key, m.key) for m in found if m.score >= MIN_SCORE and view.has(m.key)]


@rule(
    EVAL_NONFINITE.rule,
    EVAL_NONFINITE.section,
    "a logged eval/validation loss is NaN or Inf",
    emits=(EVAL_NONFINITE,),
    needs=("nonfinite",),
    provides=("evals",),
    series=(EVAL_LOSS,),
)
def detect_eval_nonfinite(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Every evaluation of every eval/validation loss series that is NaN or Inf.

    What it detects: an eval loss (`eval_loss`, `val_loss`, `eval/loss`, or a
    second eval set's loss found by its name) logged as NaN, +Inf or -Inf at
    any evaluation; the first such step, and how many of the evaluations.
    When the training loss went non-finite too (before or after: the same
    broken weights), §1 tells that event and the eval NaN is kept at info.

    Why it matters: the training loss can stay finite while every evaluation
    is NaN (an empty or fully masked eval batch, an fp16 eval overflow, broken
    weights the training loss does not show yet); nothing else reads the eval
    series, and checkpoint selection by eval loss quietly goes wrong.
    """
    result = RuleResult()
    series = eval_series(view)
    if not series:
        result.skipped.append(Skip(EVAL_NONFINITE.rule, _NO_EVAL))
        return result
    bad = []
    read: list[EvalSeries] = []
    for name, key in series:
        steps, values = view.points(name)
        nonfinite = ~np.isfinite(values)
        read.append(
            EvalSeries(
                series=name,
                key=key,
                points=int(steps.size),
                nonfinite=int(nonfinite.sum()),
                first_step=int(steps[0]),
                last_step=int(steps[-1]),
            )
        )
        if nonfinite.any():
            bad.append((int(steps[np.argmax(nonfinite)]), name, key, steps, values, nonfinite))
    result.facts["evals"] = read
    if not bad:
        return result
    bad.sort(key=lambda b: b[0])
    first_step, name, key, steps, values, nonfinite = bad[0]
    before = np.isfinite(values) & (steps < first_step)
    train = facts.nonfinite
    train_step = getattr(train, "first_step", None) if train is not None and train.count else None
    count = int(nonfinite.sum())
    if train_step is None:
        told = ""
    elif train_step <= first_step:
        told = f"; it follows the training loss, non-finite from step {train_step}"
    else:  # the weights broke before a training step showed it: one event, §1 tells it
        told = f"; the training loss went non-finite too, from step {train_step}"
    message = (
        f"eval loss '{key}' non-finite from step {first_step}: {count} of {steps.size} evaluations"
        + told
        + (f"; also non-finite: {', '.join(repr(b[2]) for b in bad[1:])}" if len(bad) > 1 else "")
    )
    evidence = EvalNonfiniteEvidence(
        series=name,
        key=key,
        first_step=first_step,
        count=count,
        points=int(steps.size),
        last_finite=float(values[before][-1]) if before.any() else None,
        last_finite_step=int(steps[before][-1]) if before.any() else None,
        train_loss_finite=train_step is None,
        also=", ".join(b[2] for b in bad[1:]),
    )
    result.findings.append(
        EVAL_NONFINITE.finding(
            message,
            severity=Severity.INFO if train_step is not None else None,
            step=first_step,
            end_step=int(steps[nonfinite][-1]),
            metric=name,
            evidence=evidence,
        )
    )
    return result


@rule(
    OVERFITTING.rule,
    OVERFITTING.section,
    "the eval loss rises over its last {overfit_rising_evals} evaluations while the training "
    "loss falls",
    emits=(OVERFITTING,),
    reads=(
        "overfit_min_evals",
        "overfit_rising_evals",
        "overfit_sigma",
        "overfit_rel_floor",
        "overfit_train_drop_frac",
    ),
    series=(EVAL_LOSS, "loss"),
)
def detect_overfitting(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """An eval loss that turned up at its minimum and stayed up while training loss fell.

    What it detects: the lowest finite eval loss (the onset) comes before the
    last {overfit_rising_evals} evaluations, and each of those sits above the
    minimum by {overfit_sigma:g} sigma of the eval loss's noise (1.4826 MAD of
    its second differences over the later half of its fall to the minimum,
    scaled to one point's noise) and by at least
    {overfit_rel_floor:.0%} of it; over the same steps the training loss's
    median fell by {overfit_train_drop_frac:.0%} or more (last third of the
    training points after the onset against the first third). Needs
    {overfit_min_evals} finite evaluations.

    Why it matters: from the eval minimum on, each step makes the model worse
    on held-out data while the training loss says it improves; the checkpoint
    to keep is the one at the minimum.
    """
    result = RuleResult()
    series = [s for s in eval_series(view) if np.isfinite(view.points(s[0])[1]).any()]
    if not series:
        result.skipped.append(Skip(OVERFITTING.rule, _NO_EVAL))
        return result
    if not view.has("loss"):
        result.skipped.append(Skip(OVERFITTING.rule, "no training loss series in the log"))
        return result
    name, key = series[0]
    steps, values = view.finite_points(name)
    if values.size < thresholds.overfit_min_evals:
        result.skipped.append(
            Skip(
                OVERFITTING.rule,
                f"insufficient data: {values.size} finite {name} evaluations "
                f"(needs {thresholds.overfit_min_evals})",
            )
        )
        return result
    evidence = _overfitting(view, steps, values, name, key, thresholds)
    if evidence is not None:
        result.findings.append(
            OVERFITTING.finding(
                f"eval loss '{key}' rose from {evidence.eval_at_onset:.4g} at step "
                f"{evidence.onset_step} (its minimum) to {evidence.eval_end:.4g} at step "
                f"{evidence.end_step} (points), above {evidence.bar:.4g} at each of its last "
                f"{evidence.rising_evals} evaluations, while the training loss fell "
                f"{evidence.train_drop:.1%} (median {evidence.train_start:.4g} over steps "
                f"{evidence.train_start_steps[0]}-{evidence.train_start_steps[1]} -> "
                f"{evidence.train_end:.4g} over steps {evidence.train_end_steps[0]}-"
                f"{evidence.train_end_steps[1]})",
                step=evidence.onset_step,
                end_step=evidence.end_step,
                metric=name,
                evidence=evidence,
            )
        )
    return result


def _overfitting(
    view: SeriesView,
    steps: np.ndarray,
    values: np.ndarray,
    name: str,
    key: str,
    thresholds: Thresholds,
) -> OverfittingEvidence | None:
    n, last = values.size, thresholds.overfit_rising_evals
    onset = int(np.argmin(values))
    if onset >= n - last:
        return None
    # noise from the later half of the fall to the minimum (the first evaluations fall steeply:
    # their curvature is no noise); too few evaluations there: all of them
    half = onset // 2
    upto = slice(half, onset + 1) if onset - half >= 4 else slice(0, n)
    diffs = np.diff(values[upto], n=2)
    sigma = float(_MAD_SIGMA * np.median(np.abs(diffs - np.median(diffs))))
    low = float(values[onset])
    bar = low + max(thresholds.overfit_sigma * sigma, thresholds.overfit_rel_floor * abs(low))
    after = values[onset + 1 :]
    above = after > bar
    # the last evaluations, each above the bar: a rise that held, not one bad evaluation
    rising = int(np.argmin(above[::-1])) if not above.all() else int(above.size)
    if rising < last:
        return None
    t_steps, t_values = view.finite_points("loss")
    inside = (t_steps >= steps[onset]) & (t_steps <= steps[-1])
    t_steps, t_values = t_steps[inside], t_values[inside]
    if t_values.size < 6:
        return None
    third = t_values.size // 3
    start, end = float(np.median(t_values[:third])), float(np.median(t_values[-third:]))
    drop = (start - end) / abs(start) if start else 0.0
    if drop < thresholds.overfit_train_drop_frac:
        return None
    sigma_steps = steps[upto]
    return OverfittingEvidence(
        series=name,
        key=key,
        onset_step=int(steps[onset]),
        eval_at_onset=low,
        eval_end=float(values[-1]),
        end_step=int(steps[-1]),
        rising_evals=rising,
        evals_after_onset=int(after.size),
        evals=n,
        eval_sigma=sigma,
        sigma_steps=[int(sigma_steps[0]), int(sigma_steps[-1])],
        bar=bar,
        train_start=start,
        train_end=end,
        train_start_steps=[int(t_steps[0]), int(t_steps[third - 1])],
        train_end_steps=[int(t_steps[-third]), int(t_steps[-1])],
        train_drop=drop,
    )
