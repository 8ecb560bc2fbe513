"""§3: fp16 overflows and the loss-scale history."""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Skip
from stabilitycli.detect import windows
from stabilitycli.detect.facts import Facts, OverflowSummary
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_HALVING,
    LOSS_SCALE_STATIC,
    RULE,
    Fp16OverflowEvidence,
    LossScaleCollapsedEvidence,
    LossScaleHalvingEvidence,
    LossScaleStaticEvidence,
)
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView


def overflow_per_step(view: SeriesView) -> np.ndarray:
    """How many overflows each logged row stands for (0 where none): `overflow_points`
    spread over every row, for the readers that plot or compare it row by row."""
    counts = np.zeros(view.steps.size)
    rows, per_row = overflow_points(view)
    counts[rows] = per_row
    return counts


def overflow_points(view: SeriesView) -> tuple[np.ndarray, np.ndarray]:
    """The rows that stand for one overflow or more, in order, and how many each.

    Evidence, any of: an overflow message (DeepSpeed `OVERFLOW!`), a skipped
    iteration counter (Megatron counts per log interval), a non-finite grad
    norm, or a loss scale lower than at the previous logged point. Taken a
    chunk of rows at a time and kept where there is one: a count for every row
    was a float column as long as the log (240 MB at 30M steps) for a few
    overflows.
    """
    chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
    rows, counts = [np.zeros(0, dtype=np.int64)], [np.zeros(0)]
    for first in range(0, view.steps.size, chunk_rows):
        seen = _evidence(view, np.arange(first, min(view.steps.size, first + chunk_rows)))
        hit = np.flatnonzero(seen > 0)
        rows.append(hit + first)
        counts.append(seen[hit])
    if view.has("loss_scale"):
        scale_steps, scale = view.points("loss_scale")
        every_step = scale_steps is view.steps  # `points` hands out the view's own steps
        for first in range(0, scale.size, chunk_rows):
            # from the point before the chunk: a drop is against it, and an overflow there
            # may be what this point's drop answers
            lo, stop = max(0, first - 1), min(scale.size, first + chunk_rows)
            at = (
                np.arange(lo, stop)
                if every_step
                else np.searchsorted(view.steps, scale_steps[lo:stop])
            )
            before = _evidence(view, at)
            drops = scale[lo + 1 : stop] < scale[lo : stop - 1]
            # a logger that records the scale a step ran with shows the backoff one
            # row after the overflow it answers: that drop is the same overflow
            drops &= ~(before[:-1] > 0)
            drops &= before[1:] == 0
            hit = at[1:][drops]
            rows.append(hit)
            counts.append(np.ones(hit.size))
    # a drop is counted only on a row without other evidence, so no row is listed twice
    all_rows, all_counts = np.concatenate(rows), np.concatenate(counts)
    order = np.argsort(all_rows, kind="stable")
    return all_rows[order], all_counts[order]


def _evidence(view: SeriesView, rows: np.ndarray) -> np.ndarray:
    """Overflows at `rows` by messages, skipped-step counters and non-finite grad norms."""
    counts = np.zeros(rows.size)
    for name in ("overflow", "skipped_steps"):
        if view.has(name):
            part = np.nan_to_num(view.columns[name][rows], nan=0.0, posinf=1.0)
            np.maximum(counts, part, out=counts)
    if view.has("grad_norm"):
        bad_grad = view.logged["grad_norm"][rows] & ~np.isfinite(view.columns["grad_norm"][rows])
        np.maximum(counts, bad_grad, out=counts)
    return counts


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


def scale_text(value: float) -> str:
    """A loss scale as logged: a whole scale in full (2097152, not 2.09715e+06)."""
    value = float(value)
    if np.isfinite(value) and value >= 1 and value == int(value):
        return str(int(value))
    return f"{value:g}"


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
    ),
    needs=("spikes",),
    provides=("overflow",),
)
def detect_loss_scale(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """fp16 overflow steps and what the loss scaler did about them.

    What it detects: steps where the gradients overflowed (a non-finite grad
    norm, a skipped-step counter, an `OVERFLOW!` message, or a loss-scale
    drop; Q3.1), and the loss-scale history (Q3.2): an overflow followed by a
    halving is the scaler working (info, however often); a scale that stays
    constant through {static_scale_min_overflows} or more overflows means dynamic
    scaling is off (`loss-scale-static`); a scale below {min_loss_scale:g} has
    collapsed (`loss-scale-collapsed`); overflows with no scaler evidence on more
    than {overflow_rate_unabsorbed:.0%} of steps, or overflows during a loss spike
    or in the {cause_lead_steps} steps before it, are `fp16-overflow`.

    Why it matters: fp16 tops out at 65504. A working dynamic scaler skips
    the overflowing step and halves its scale, and training goes on; a static
    or collapsing scale means activations are systematically too large and
    updates are being lost or poisoned (Q3.4: dynamic scaler, halve the LR,
    or move to bf16).
    """
    result = RuleResult()
    has_scale = view.has("loss_scale")
    has_messages = view.has("overflow")
    if (not_fp16 := _not_fp16(view)) is not None:
        # a loss scale of 1, or a non-finite grad norm, is what every regime can print:
        # calling it an fp16 overflow would be a guess, and §1 reads the grad norm instead
        result.skipped.append(Skip(RULE, not_fp16))
        return result
    overflow_rows, counts = overflow_points(view)
    total = float(counts.sum())
    span_steps = int(view.steps[-1] - view.steps[0] + 1) if view.steps.size else 0
    overflow: OverflowSummary = {
        "overflows": int(total),
        "overflow_steps": view.steps[overflow_rows].tolist(),
        "span_steps": span_steps,
        "has_scale": has_scale,
        "has_messages": has_messages,
    }
    result.facts["overflow"] = overflow
    if has_scale:
        _scale_history(view, thresholds, overflow, result)
    rate = total / span_steps if span_steps else 0.0
    overflow["rate"] = rate
    spikes = facts.spikes
    at_spike = [
        s
        for s in spikes
        if np.any(
            (view.steps[overflow_rows] >= s.onset_step - thresholds.cause_lead_steps)
            & (view.steps[overflow_rows] <= s.end_step)
        )
    ]
    unabsorbed = not has_scale and not has_messages and rate > thresholds.overflow_rate_unabsorbed
    if total and (unabsorbed or at_spike):
        why = (
            f"{int(total)} overflow(s) on {rate:.1%} of {span_steps} steps "
            "with no loss-scale series or messages"
            if unabsorbed
            else f"overflow at the loss spike of step {at_spike[0].onset_step}"
        )
        first = int(view.steps[overflow_rows[0]])
        result.findings.append(
            FP16_OVERFLOW.finding(
                f"fp16 overflow not absorbed by the scaler: {why}",
                step=first,
                metric="grad_norm",
                evidence=Fp16OverflowEvidence(
                    overflows=int(total),
                    rate=round(rate, 5),
                    first_step=first,
                    spike_step=at_spike[0].onset_step if at_spike else None,
                ),
            )
        )
    return result


def _scale_history(
    view: SeriesView, thresholds: Thresholds, overflow: OverflowSummary, result: RuleResult
) -> None:
    steps, scale = view.finite_points("loss_scale")
    if not scale.size:
        return
    drops = np.flatnonzero(scale[1:] < scale[:-1]) + 1
    rises = np.flatnonzero(scale[1:] > scale[:-1]) + 1
    overflow.update(
        {
            "scale_min": float(scale.min()),
            "scale_max": float(scale.max()),
            "scale_final": float(scale[-1]),
            "scale_drops": int(drops.size),
            "scale_rises": int(rises.size),
        }
    )
    total = overflow["overflows"]
    # every overflow onset and every halving, so the story of a collapse starts where it did
    history = {
        "overflow_steps": list(overflow["overflow_steps"]),
        "halving_steps": steps[drops].tolist(),
        "halving_scales": scale[drops].tolist(),
    }
    if scale.min() < thresholds.min_loss_scale:
        at = int(np.argmax(scale < thresholds.min_loss_scale))
        first_overflow = history["overflow_steps"][0] if history["overflow_steps"] else None
        began = int(steps[drops[0]]) if drops.size else None
        known = [s for s in (first_overflow, began) if s is not None]
        start = min(known) if known else None
        result.findings.append(
            LOSS_SCALE_COLLAPSED.finding(
                f"loss scale collapsed below {thresholds.min_loss_scale:g} at step {steps[at]} "
                f"(from {scale_text(scale.max())} down to {scale_text(scale.min())}): overflow on "
                "nearly every step"
                + (
                    f"; the overflows began at step {start} ({drops.size} halvings in all)"
                    if start is not None
                    else ""
                ),
                step=int(steps[at]),
                metric="loss_scale",
                evidence=LossScaleCollapsedEvidence(
                    scale_min=float(scale.min()),
                    scale_max=float(scale.max()),
                    first_step_below=int(steps[at]),
                    first_overflow_step=first_overflow,
                    first_halving_step=began,
                    overflows=total,
                    **history,
                ),
            )
        )
    elif np.all(scale == scale[0]) and total >= thresholds.static_scale_min_overflows:
        result.findings.append(
            LOSS_SCALE_STATIC.finding(
                f"loss scale constant at {scale_text(scale[0])} while {total} overflow(s) "
                "happened: dynamic loss scaling is not active",
                step=int(overflow["overflow_steps"][0]) if overflow["overflow_steps"] else None,
                metric="loss_scale",
                evidence=LossScaleStaticEvidence(scale=float(scale[0]), overflows=total, **history),
            )
        )
    broken = any(f.kind in (LOSS_SCALE_COLLAPSED, LOSS_SCALE_STATIC) for f in result.findings)
    if drops.size and not broken:
        chain = " -> ".join(f"{v:g}" for v in scale[np.concatenate(([drops[0] - 1], drops))][:6])
        result.findings.append(
            LOSS_SCALE_HALVING.finding(
                f"the loss scaler backed off {drops.size} time(s) "
                f"({chain}{' ...' if drops.size > 5 else ''}); "
                f"final scale {scale_text(scale[-1])}, minimum {scale_text(scale.min())}, regrew "
                f"{rises.size} time(s): "
                "overflow followed by a halving is the scaler doing its job",
                step=int(steps[drops[0]]),
                end_step=int(steps[drops[-1]]),
                metric="loss_scale",
                evidence=LossScaleHalvingEvidence(
                    drops=int(drops.size),
                    rises=int(rises.size),
                    first_drop_step=int(steps[drops[0]]),
                    scale_min=float(scale.min()),
                    scale_final=float(scale[-1]),
                    drop_steps=steps[drops][:20].tolist(),
                    **history,
                ),
            )
        )
