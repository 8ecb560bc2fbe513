"""§3: fp16 overflows and the loss-scale history."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding, Skip
from stabilitycli.core.numfmt import step_runs
from stabilitycli.core.quantity_schema import STEP, STEPS
from stabilitycli.detect.facts import Facts, OverflowSummary
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_HALVING,
    LOSS_SCALE_STATIC,
    RULE,
    Fp16OverflowEvidence,
    LineOrderNumbers,
    LossScaleCollapsedEvidence,
    LossScaleHalvingEvidence,
    LossScaleStaticEvidence,
)
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView

if TYPE_CHECKING:
    from stabilitycli.detect.overflow_ledger import OverflowLedger

__all__ = ["overflow_per_step", "runs_fp16"]


def overflow_per_step(view: SeriesView) -> np.ndarray:
    """How many overflows the ledger puts at each logged row (0 where none), for the readers
    that plot or compare it row by row."""
    from stabilitycli.detect.overflow_ledger import ledger_of

    return ledger_of(view).per_row(view.steps)


def _finite_scale(view: SeriesView) -> np.ndarray:
    return view.finite_points("loss_scale")[1] if view.has("loss_scale") else np.zeros(0)


def runs_fp16(view: SeriesView) -> bool:
    """fp16 by the stated dtype or, with none stated, by the scaler's own series.

    The evidence then is an overflow series (what a dynamic scaler reports) or a
    loss scale other than 1 (a scale only fp16 training applies); a scale that
    stays at 1 is what Megatron prints for bf16 and fp32 runs too.
    """
    if view.dtype is not None:
        return view.dtype == "fp16"
    return view.has("overflow") or bool(np.any(_finite_scale(view) != 1.0))


def _not_fp16(view: SeriesView) -> str | None:
    """Why §3 cannot judge this run as fp16, or None when it can."""
    if runs_fp16(view):
        return None
    regime = view.dtype
    scale = _finite_scale(view)
    grad_steps = 0
    if view.has("grad_norm"):
        grad = view.columns["grad_norm"]
        grad_steps = int(np.count_nonzero(view.logged["grad_norm"] & ~np.isfinite(grad)))
    left = (
        f"; {grad_steps} non-finite grad-norm step(s) left to the NaN check (Q1.1)"
        if grad_steps
        else ""
    )
    if regime is None:
        seen = (
            f"loss scale constant at 1 over {scale.size} point(s), as bf16 and fp32 runs print it"
            if scale.size
            else "no loss-scale or overflow series"
        )
        return (
            f"dtype unknown ({seen}): nothing shows fp16, so no overflow is read as an fp16 one"
            f"{left}; pass --dtype to say which it was"
        )
    why = f"{regime} run ({view.source.dtype_origin}): no fp16 range limit or loss scaler to judge"
    moved = int(np.count_nonzero(scale[1:] != scale[:-1])) if scale.size else 0
    if moved:
        why += f"; yet the loss scale changed {moved} time(s), which only an fp16 scaler does"
    return why + left


@rule(
    RULE,
    FP16_OVERFLOW.section,
    "fp16 overflows and the dynamic loss scale's history",
    emits=(FP16_OVERFLOW, LOSS_SCALE_HALVING, LOSS_SCALE_STATIC, LOSS_SCALE_COLLAPSED),
    series=("loss_scale", "overflow", "grad_norm"),
    reads=(
        "cause_lead_steps",
        "min_loss_scale",
        "overflow_rate_unabsorbed",
        "static_scale_min_overflows",
        "failing_scaler_window_steps",
        "failing_scaler_overflow_fraction",
        "failing_scaler_min_overflows",
        "scale_search_steps",
        "overflow_loss_jump_ratio",
    ),
    needs=("spikes",),
    provides=("overflow", "overflow_ledger"),
)
def detect_loss_scale(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """fp16 overflow steps and what the loss scaler did about them.

    What it detects: the run's overflows, read once into the overflow ledger
    from every source the log holds (an `OVERFLOW!` message with its attempted
    and new scale, a skipped-step counter, a non-finite grad norm, a fall of
    the loss scale; Q3.1), and the loss-scale history (Q3.2). An overflow
    followed by a halving, after which the overflows stop, is the scaler
    working (info). A scale that stays constant through
    {static_scale_min_overflows} or more overflows means dynamic scaling is off
    (`loss-scale-static`); a scale below {min_loss_scale:g} has collapsed
    (`loss-scale-collapsed`). `fp16-overflow` is a scaler that does not absorb
    the overflows: overflows with no scaler evidence on more than
    {overflow_rate_unabsorbed:.0%} of steps; overflows on more than
    {failing_scaler_overflow_fraction:.0%} (and at least
    {failing_scaler_min_overflows}) of the last {failing_scaler_window_steps}
    steps with the scale falling and never regrowing (a failing scaler; not
    within the first {scale_search_steps} steps, where it searches for its
    scale); an overflow at a step whose loss is {overflow_loss_jump_ratio:g}x
    the one before; or overflows during a loss spike or in the
    {cause_lead_steps} steps before it.

    Why it matters: fp16 tops out at 65504. A working dynamic scaler skips
    the overflowing step and halves its scale, and training goes on; a static,
    collapsing or endlessly halving scale means activations are systematically
    too large and updates are being lost or poisoned (Q3.4: dynamic scaler,
    halve the LR, or move to bf16).
    """
    result = RuleResult()
    if (not_fp16 := _not_fp16(view)) is not None:
        # a loss scale of 1, or a non-finite grad norm, is what every regime can print:
        # calling it an fp16 overflow would be a guess, and §1 reads the grad norm instead
        result.skipped.append(Skip(RULE, not_fp16))
        return result
    # the ledger only where the log may be fp16: a run this rule skips never loads it
    # (start-up, #40)
    from stabilitycli.detect.overflow_ledger import ledger_of

    ledger = ledger_of(view)
    result.facts["overflow_ledger"] = ledger
    result.facts["overflow"] = overflow = _summary(ledger)
    if ledger.at_minimum_steps.size:
        result.findings.append(_at_minimum(ledger))
    elif ledger.scale is not None:
        _scale_history(view, thresholds, ledger, result)
    if any(f.kind in (LOSS_SCALE_COLLAPSED, LOSS_SCALE_STATIC) for f in result.findings):
        _say_line_order(view, result)
        return result
    unabsorbed = (
        not ledger.has_scale
        and not ledger.has_messages
        and overflow["rate"] > thresholds.overflow_rate_unabsorbed
    )
    # only a log with overflows asks it: any other never loads it (start-up, #40)
    from stabilitycli.detect.scaler_failing import not_absorbed

    failing = None if unabsorbed else not_absorbed(view, thresholds, ledger, facts.spikes)
    if ledger.total and (unabsorbed or failing is not None):
        first = int(ledger.steps[0])
        if failing is None:
            why = (
                "fp16 overflow not absorbed by the scaler: "
                f"{ledger.total_text()} overflow(s) on {overflow['rate']:.1%} of "
                f"{ledger.span_steps} steps with no loss-scale series or messages"
            )
            extra: dict = {}
        else:
            why, extra = failing
        result.findings = [f for f in result.findings if f.kind is not LOSS_SCALE_HALVING]
        result.findings.append(
            FP16_OVERFLOW.finding(
                why,
                step=int(extra.get("window_first_step") or extra.get("jump_step") or first),
                metric="grad_norm",
                evidence=Fp16OverflowEvidence(
                    overflows=ledger.total,
                    overflows_exact=ledger.exact,
                    rate=round(overflow["rate"], 5),
                    first_step=first,
                    spike_step=extra.pop("spike_step", None),
                    **extra,
                ),
            )
        )
    _say_line_order(view, result)
    return result


def _say_line_order(view: SeriesView, result: RuleResult) -> None:
    """Each finding whose steps include ones a reader numbered by the order of messages that
    print none says so, in its sentence and its evidence: a DeepSpeed overflow printed
    before the first step line is "step 1" because it came first, not because the optimizer
    was at step 1."""
    numbered = view.source.line_order_steps
    if not numbered:
        return
    for at, finding in enumerate(result.findings):
        ev = finding.evidence
        assert isinstance(ev, LineOrderNumbers)  # every kind of this rule's evidence is
        said = {finding.step, finding.end_step}
        for key, spec in ev.schema().items():
            value = ev.get(key)
            if spec == STEP:
                said.add(value)
            elif spec == STEPS and value:
                said.update(value)
        hits = sorted(s for s in said if s in numbered)
        if not hits:
            continue
        how = "; ".join(sorted({numbered[s] for s in hits}))
        result.findings[at] = replace(
            finding,
            message=f"{finding.message}; step(s) {step_runs(hits)} here number loss-scale "
            f"messages that print no step by their order among the log's lines ({how}), not "
            "optimizer steps",
            evidence=replace(ev, step_numbering=how, line_order_steps=hits),
        )


def _summary(ledger: OverflowLedger) -> OverflowSummary:
    """§3's reading of the ledger for the classifier (Q3.1, Q3.2 and the remedies)."""
    summary: OverflowSummary = {
        "overflows": ledger.total,
        "overflows_exact": ledger.exact,
        "overflow_steps": ledger.steps.tolist(),
        "span_steps": ledger.span_steps,
        "has_scale": ledger.has_scale,
        "has_messages": ledger.has_messages,
        "rate": ledger.total / ledger.span_steps if ledger.span_steps else 0.0,
        "sources": ledger.sources_text(),
        "hidden": ledger.hidden_text(),
    }
    if ledger.scale is not None:
        sc = ledger.scale
        summary.update(
            {
                "scale_min": sc.min,
                "scale_max": sc.max,
                "scale_final": sc.final,
                "scale_drops": sc.drops,
                "scale_halvings": sc.halvings,
                "halvings_exact": sc.halvings_exact,
                "scale_rises": sc.rises,
            }
        )
    return summary


def _at_minimum(ledger: OverflowLedger) -> Finding:
    """The scaler said it could not lower its scale any more: collapsed, whatever its value."""
    from stabilitycli.detect.overflow_ledger import scale_text

    at = int(ledger.at_minimum_steps[0])
    sc = ledger.scale
    scale = f" ({scale_text(sc.max)} down to {scale_text(sc.min)})" if sc is not None else ""
    return LOSS_SCALE_COLLAPSED.finding(
        f"loss scale collapsed at step {at}: the scaler said its scale{scale} was already at "
        f"its minimum and could not be lowered on another overflow ({ledger.total_text()} "
        "overflow(s) before it)",
        step=at,
        metric="loss_scale",
        evidence=LossScaleCollapsedEvidence(
            scale_min=sc.min if sc is not None else float("nan"),
            scale_max=sc.max if sc is not None else float("nan"),
            first_step_below=at,
            first_overflow_step=int(ledger.steps[0]) if ledger.total else None,
            first_halving_step=int(sc.fall_steps[0]) if sc is not None and sc.drops else None,
            overflows=ledger.total,
            overflow_steps=ledger.steps.tolist(),
            halving_steps=sc.fall_steps.tolist() if sc is not None else [],
            halving_scales=sc.fall_to.tolist() if sc is not None else [],
            halvings=sc.halvings if sc is not None else 0,
            halvings_exact=sc.halvings_exact if sc is not None else True,
        ),
    )


def _scale_history(
    view: SeriesView, thresholds: Thresholds, ledger: OverflowLedger, result: RuleResult
) -> None:
    from stabilitycli.detect.overflow_ledger import scale_text

    sc = ledger.scale
    assert sc is not None
    total = ledger.total
    first_overflow = int(ledger.steps[0]) if total else None
    # every overflow onset and every halving, so the story of a collapse starts where it did
    history = {
        "overflow_steps": ledger.steps.tolist(),
        "halving_steps": sc.fall_steps.tolist(),
        "halving_scales": sc.fall_to.tolist(),
    }
    steps, scale = view.finite_points("loss_scale")
    if sc.min < thresholds.min_loss_scale:
        below = sc.fall_steps[sc.fall_to < thresholds.min_loss_scale]
        at = (
            int(below[0])
            if below.size
            else int(steps[np.argmax(scale < thresholds.min_loss_scale)])
        )
        began = int(sc.fall_steps[0]) if sc.drops else None
        known = [s for s in (first_overflow, began) if s is not None]
        start = min(known) if known else None
        result.findings.append(
            LOSS_SCALE_COLLAPSED.finding(
                f"loss scale collapsed below {thresholds.min_loss_scale:g} at step {at} "
                f"(from {scale_text(sc.max)} down to {scale_text(sc.min)}): overflow on "
                "nearly every step"
                + (
                    f"; the overflows began at step {start} ({ledger.total_text()} overflow(s), "
                    f"{sc.halvings_text()} halving(s))"
                    if start is not None
                    else ""
                ),
                step=at,
                metric="loss_scale",
                evidence=LossScaleCollapsedEvidence(
                    scale_min=sc.min,
                    scale_max=sc.max,
                    first_step_below=at,
                    first_overflow_step=first_overflow,
                    first_halving_step=began,
                    overflows=total,
                    halvings=sc.halvings,
                    halvings_exact=sc.halvings_exact,
                    **history,
                ),
            )
        )
    elif sc.drops == 0 and sc.rises == 0 and total >= thresholds.static_scale_min_overflows:
        result.findings.append(
            LOSS_SCALE_STATIC.finding(
                f"loss scale constant at {scale_text(sc.first)} while {ledger.total_text()} "
                "overflow(s) happened: dynamic loss scaling is not active",
                step=first_overflow,
                metric="loss_scale",
                evidence=LossScaleStaticEvidence(scale=sc.first, overflows=total, **history),
            )
        )
    elif sc.drops:
        result.findings.append(
            LOSS_SCALE_HALVING.finding(
                f"the loss scaler backed off {sc.halvings_text()} time(s) ({sc.chain()}); "
                f"final scale {scale_text(sc.final)}, minimum {scale_text(sc.min)}, regrew "
                f"{sc.rises} time(s): overflow followed by a halving is the scaler doing its job",
                step=int(sc.fall_steps[0]),
                end_step=int(sc.fall_steps[-1]),
                metric="loss_scale",
                evidence=LossScaleHalvingEvidence(
                    drops=sc.drops,
                    rises=sc.rises,
                    first_drop_step=int(sc.fall_steps[0]),
                    scale_min=sc.min,
                    scale_final=sc.final,
                    drop_steps=sc.fall_steps[:20].tolist(),
                    halvings=sc.halvings,
                    halvings_exact=sc.halvings_exact,
                    **history,
                ),
            )
        )
