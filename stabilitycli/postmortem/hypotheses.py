"""Post-mortem hypotheses (seed 003 sections 2-3), each tested against a series.

Every candidate cause the tree knows is put to the run's own data: it is
`supported` (the number crosses the rule's threshold), `possible` (the data
leans towards it without settling it), `ruled out` (the series was logged and
says no, with the number), or `not testable` (the series that would decide it
was not logged: that is work for a human). The list comes back ranked in that
order, so the first supported hypothesis is the root cause.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field
from typing import Any

import numpy as np

from stabilitycli.classify.remedies import FP16_MAX
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Analysis, Finding
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.data import DUPLICATE_BATCH
from stabilitycli.detect.kinds.mixed_precision import FP16_OVERFLOW
from stabilitycli.detect.kinds.ranks import RANK_NONFINITE, RANK_OUTLIER
from stabilitycli.detect.kinds.spike import CAUSE_CODES
from stabilitycli.detect.log_words import grad_norm_is_preclip, loss_is_token_ce
from stabilitycli.detect.mixed_precision import overflow_per_step, runs_fp16
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.spike_words import baseline_name
from stabilitycli.detect.windows import trailing_stats

STATUS_ORDER = ("supported", "possible", "not testable", "ruled out")


@dataclass
class Hypothesis:
    code: str
    title: str
    status: str  # one of STATUS_ORDER
    evidence: str  # the observation, with its numbers
    series: str  # the series (the "dashboard panel") the evidence comes from
    root_sentence: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)


def _rank(hyps: list[Hypothesis], first: list[str] | None = None) -> list[Hypothesis]:
    preferred = {code: i for i, code in enumerate(first or [])}
    return sorted(
        hyps, key=lambda h: (STATUS_ORDER.index(h.status), preferred.get(h.code, len(preferred)))
    )


def _g(value: float) -> str:
    return f"{value:.4g}"


def _window(view: SeriesView, metric: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    steps, values = view.points(metric)
    a, b = np.searchsorted(steps, lo), np.searchsorted(steps, hi, side="right")
    return steps[a:b], values[a:b]


# ---------------------------------------------------------------- spikes


def spike_hypotheses(
    finding: Finding, view: SeriesView, analysis: Analysis, thr: Thresholds
) -> list[Hypothesis]:
    ev = finding.evidence
    onset, end = int(ev["onset_step"]), int(ev.get("end_step") or ev["onset_step"])
    lo = onset - thr.cause_lead_steps
    hyps = [
        _grad_norm_test(view, lo, onset, ev, thr),
        _planned_restart(_lr_test(view, lo, onset, thr), analysis, onset),
        _batch_test(view, onset, ev, thr),
        _restart_test(view, onset, thr),
        _overflow_test(view, lo, end),
    ]
    rank = _rank_test(analysis, ev)
    if rank is not None:
        hyps.append(rank)
    found = [c["cause"] for c in ev.get("causes") or []]
    # a cause resting on a code the user ignored is not put forward (`--ignore lr-jump`)
    ignored = set(analysis.extras.get("ignored") or [])
    kept = [h for h in hyps if h is not None and CAUSE_CODES.get(h.code) not in ignored]
    return _rank(kept, [RANK_OUTLIER.code, *found])


def _planned_restart(hyp: Hypothesis, analysis: Analysis, onset: int) -> Hypothesis:
    """An LR jump that is a planned restart of the schedule is no scheduler bug."""
    step = hyp.numbers.get("lr_step")
    restarts = (analysis.extras.get("lr_schedule") or {}).get("restarts") or []
    planned = next((r for r in restarts if r["step"] <= (step or -1) <= r["top_step"]), None)
    if hyp.status != "supported" or planned is None:
        return hyp
    origin = "declared" if planned["declared"] else "recognised from the LR series"
    return Hypothesis(
        "lr-restart",
        "planned LR restart: the loss did not come back after it",
        "supported",
        f"the LR rise at step {planned['step']} ({_g(planned['lr_before'])} -> "
        f"{_g(planned['lr_after'])}) is a planned warm restart ({origin})",
        "lr",
        root_sentence=f"The loss rose after the planned LR restart at step {planned['step']} "
        f"(LR {_g(planned['lr_before'])} -> {_g(planned['lr_after'])}), {onset - planned['step']} "
        "step(s) before the spike, and did not decay as the restart's bump should: the "
        "restarted LR is too high for this stage of training (the schedule is as planned, "
        "not a scheduler bug).",
        numbers=hyp.numbers,
    )


def grad_norm_name(view: SeriesView) -> str:
    """'pre-clip grad norm' only when the writer logs the norm before clipping."""
    return "pre-clip grad norm" if grad_norm_is_preclip(view.source).holds else "grad norm"


def _grad_norm_test(view, lo, onset, ev, thr: Thresholds) -> Hypothesis:
    title = (
        "long-tail / rare-token batch"
        if loss_is_token_ce(view).holds
        else "long-tail batch (unusual samples)"
    ) + ": one batch's gradient dominated the update"
    gn = grad_norm_name(view)
    if not view.has("grad_norm"):
        return Hypothesis(
            "long-tail-token", title, "not testable", "no grad norm logged", "grad_norm"
        )
    steps, grad = view.points("grad_norm")
    stats = trailing_stats(
        steps, grad, thr.spike_window_steps, thr.min_points_per_window, thr.widened_window_points
    )
    a, b = np.searchsorted(steps, lo), np.searchsorted(steps, onset, side="right")
    if a == b:
        return Hypothesis(
            "long-tail-token",
            title,
            "not testable",
            f"grad norm not logged within [{lo}, {onset}]",
            "grad_norm",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(grad[a:b]), grad[a:b] / stats.mean[a:b], np.nan)
    if not np.isfinite(ratio).any():
        return Hypothesis(
            "long-tail-token",
            title,
            "ruled out",
            f"grad norm non-finite within [{lo}, {onset}]: an overflow or NaN, "
            "not a long-tail batch",
            "grad_norm",
        )
    at = a + int(np.nanargmax(ratio))
    numbers: dict[str, Any] = {
        "grad_norm_step": int(steps[at]),
        "grad_norm": float(grad[at]),
        "grad_norm_baseline": float(stats.mean[at]),
        # the logged steps the trailing mean is over: [step - window, step), or the last
        # points before it when the window was widened
        "grad_norm_baseline_steps": _trailing_steps(steps, grad, at, stats.widened, thr),
        "ratio": float(np.nanmax(ratio)),
    }
    over = _over(numbers["grad_norm_baseline_steps"])
    text = (
        f"{gn} {_g(numbers['grad_norm'])} at step {numbers['grad_norm_step']} = "
        f"{numbers['ratio']:.1f}x its trailing mean {_g(numbers['grad_norm_baseline'])}{over}"
    )
    # the bar the spike rule held this spike to (a large spike needs less of a grad-norm jump)
    bar = next(
        (
            float(c["bar"])
            for c in ev.get("causes") or []
            if c.get("cause") == "long-tail-token" and c.get("bar") is not None
        ),
        thr.grad_norm_spike_ratio,
    )
    if numbers["ratio"] < bar:
        return Hypothesis(
            "long-tail-token",
            title,
            "ruled out",
            f"{text} (a long-tail batch needs >= {bar:g}x)",
            "grad_norm",
            numbers=numbers,
        )
    lead = onset - numbers["grad_norm_step"]
    root = (
        f"At step {numbers['grad_norm_step']} the {gn} reached "
        f"{_g(numbers['grad_norm'])}, {numbers['ratio']:.0f}x its trailing mean of "
        f"{_g(numbers['grad_norm_baseline'])}"
        + (
            f" (steps {numbers['grad_norm_baseline_steps'][0]}-"
            f"{numbers['grad_norm_baseline_steps'][1]})"
            if over
            else ""
        )
        + f", {lead} step(s) before the loss jumped from its "
        + f"{baseline_name(ev.get('baseline_basis'))} "
        + f"{_g(float(ev['mu']))}"
        + (
            f" (steps {ev['baseline_first_step']}-{ev['baseline_last_step']})"
            if ev.get("baseline_first_step") is not None
            else ""
        )
        + f" to {_g(float(ev['peak']))} at step {int(ev['peak_step'])}: "
        "one batch's gradient dominated the update (which tokens: needs a human)."
    )
    return Hypothesis(
        "long-tail-token",
        title,
        "supported",
        f"{text} (>= {bar:g}x), leading the loss by {lead} step(s)",
        "grad_norm",
        root_sentence=root,
        numbers=numbers,
    )


def _trailing_steps(steps, values, at: int, widened: bool, thr: Thresholds) -> list[int] | None:
    """The first and last logged step whose finite value is in the trailing mean at `at`."""
    if widened:
        keep = np.zeros(steps.size, dtype=bool)
        keep[max(0, at - thr.widened_window_points) : at] = True
    else:
        keep = (steps >= steps[at] - thr.spike_window_steps) & (steps < steps[at])
    keep &= np.isfinite(values)
    return [int(steps[keep][0]), int(steps[keep][-1])] if keep.any() else None


def _over(pair: list[int] | None) -> str:
    return f" over steps {pair[0]}-{pair[1]}" if pair else ""


def _lr_test(view, lo, onset, thr: Thresholds) -> Hypothesis:
    title = "LR schedule discontinuity: the learning rate jumped"
    if not view.has("lr"):
        return Hypothesis("lr-discontinuity", title, "not testable", "no LR logged", "lr")
    steps, lr = view.points("lr")
    a, b = (
        max(0, int(np.searchsorted(steps, lo)) - 1),
        int(np.searchsorted(steps, onset, side="right")),
    )
    seg_steps, seg = steps[a:b], lr[a:b]
    if seg.size < 2:
        return Hypothesis(
            "lr-discontinuity",
            title,
            "not testable",
            f"fewer than 2 LR points around [{lo}, {onset}]",
            "lr",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.nan_to_num(np.diff(seg) / np.abs(seg[:-1]), nan=0.0, posinf=np.inf)
    at = int(np.argmax(rel))
    before, after, step = float(seg[at]), float(seg[at + 1]), int(seg_steps[at + 1])
    if rel[at] <= thr.lr_jump_ratio:
        return Hypothesis(
            "lr-discontinuity",
            title,
            "ruled out",
            f"the LR's largest rise between logged points in [{lo}, {onset}] is "
            f"{rel[at]:+.1%} ({before:.4g} at step {int(seg_steps[at])} -> {after:.4g} at step "
            f"{step}; a jump needs > +{thr.lr_jump_ratio:.0%})",
            "lr",
        )
    return Hypothesis(
        "lr-discontinuity",
        title,
        "supported",
        f"LR jumped {before:.4g} -> {after:.4g} ({rel[at]:+.0%}) at step {step}",
        "lr",
        root_sentence=f"The learning rate jumped from {before:.4g} to {after:.4g} at step {step}, "
        f"{onset - step} step(s) before the loss spike: a schedule or scheduler-state bug.",
        numbers={"lr_step": step, "lr_before": before, "lr": after},
    )


def _batch_test(view, onset, ev, thr: Thresholds) -> Hypothesis:
    title = "data-loader bug: the same batch was served again"
    if not view.has("batch_id"):
        return Hypothesis(
            DUPLICATE_BATCH.code,
            title,
            "not testable",
            "no batch id logged (hash the batches at the spike and the steps before: "
            "needs a human)",
            "batch_id",
        )
    cause = next((c for c in ev.get("causes") or [] if c["cause"] == DUPLICATE_BATCH.code), None)
    if cause is None:
        steps, ids = _window(view, "batch_id", onset - thr.duplicate_batch_window_steps, onset)
        current = ids[-1] if steps.size and steps[-1] == onset else math.nan
        return Hypothesis(
            DUPLICATE_BATCH.code,
            title,
            "ruled out",
            f"batch id {_g(current)} at step {onset} differs from every id in the "
            f"{thr.duplicate_batch_window_steps} steps before",
            "batch_id",
        )
    bid = cause["batch_id"]
    bid_text = str(int(bid)) if float(bid).is_integer() else _g(bid)
    return Hypothesis(
        DUPLICATE_BATCH.code,
        title,
        "supported",
        f"batch id {bid_text} at step {onset} repeats step {cause['repeat_of_step']}",
        "batch_id",
        root_sentence=f"The batch at step {onset} (id {bid_text}) "
        f"is the batch of step {cause['repeat_of_step']} served again: a data-loader bug.",
    )


def _restart_test(view, onset, thr: Thresholds) -> Hypothesis:
    title = "optimizer reset: a resume that did not restore optimizer/scheduler/data state"
    resumed = [r.resumed_from_step for r in view.restarts]
    near = [s for s in resumed if onset - thr.restart_spike_steps <= s <= onset]
    if not near:
        where = (
            f"restarts at step(s) {', '.join(map(str, resumed[:5]))}"
            if resumed
            else "no restart in the log"
        )
        return Hypothesis(
            "optimizer-reset",
            title,
            "ruled out",
            f"no restart within the {thr.restart_spike_steps} steps before step {onset} ({where})",
            "step order (restarts)",
        )
    step = near[-1]
    return Hypothesis(
        "optimizer-reset",
        title,
        "supported",
        f"the run resumed at step {step}, {onset - step} step(s) before the spike",
        "step order (restarts)",
        root_sentence=(
            f"The run resumed from a checkpoint at step {step} and spiked {onset - step} step(s) "
            "later: the checkpoint did not restore the optimizer moments, "
            "scheduler or data cursor."
        ),
    )


def _overflow_test(view, lo, end) -> Hypothesis | None:
    title = f"fp16 overflow: an activation or gradient exceeded {FP16_MAX:g}"
    dtype = view.dtype
    evidence_series = [m for m in ("loss_scale", "overflow", "skipped_steps") if view.has(m)]
    if dtype in ("fp32", "bf16"):
        return Hypothesis(
            FP16_OVERFLOW.code,
            title,
            "ruled out",
            f"{dtype} run: no fp16 range limit (dtype from {view.source.dtype_origin})",
            "dtype",
        )
    if not runs_fp16(view):
        return Hypothesis(
            FP16_OVERFLOW.code,
            title,
            "not testable",
            "dtype unknown, and no overflow series or loss scale other than 1 shows fp16 "
            "(pass --dtype)",
            "dtype",
        )
    counts = overflow_per_step(view)
    in_window = (view.steps >= lo) & (view.steps <= end) & (counts > 0)
    series = "/".join(evidence_series) or "grad_norm"
    if not in_window.any():
        return Hypothesis(
            FP16_OVERFLOW.code,
            title,
            "ruled out",
            f"no overflow (non-finite grad norm, skipped step or scale drop) in [{lo}, {end}]",
            series,
        )
    first = int(view.steps[np.argmax(in_window)])
    return Hypothesis(
        FP16_OVERFLOW.code,
        title,
        "supported",
        f"overflow at step {first}, within the spike [{lo}, {end}]",
        series,
        root_sentence=f"An fp16 overflow at step {first} coincides with the spike: "
        "activations or gradients exceeded the fp16 range.",
    )


def _rank_test(analysis: Analysis, ev: Mapping[str, Any]) -> Hypothesis | None:
    title = "one data-parallel rank went bad and moved the mean"
    ranks = ev.get("explained_by_ranks")
    if ranks:
        names = ", ".join(map(str, ranks))
        outliers = [
            f
            for f in analysis.findings
            if f.kind in (RANK_OUTLIER, RANK_NONFINITE) and f.rank in ranks
        ]
        detail = "; ".join(
            f"rank {f.rank} from step {f.step}: {_g(f.evidence['value'])} against a cohort median "
            f"of {_g(f.evidence['cohort_median'])}"
            for f in outliers[:3]
            if isinstance(f.evidence.get("value"), float)
            and isinstance(f.evidence.get("cohort_median"), float)
        )
        return Hypothesis(
            RANK_OUTLIER.code,
            title,
            "supported",
            f"rank(s) {names} left the cohort at or before the spike"
            + (f" ({detail})" if detail else ""),
            "per-rank loss",
            root_sentence=(
                f"Rank(s) {names} diverged from the cohort "
                "and the mean over ranks shows it as a spike."
            ),
        )
    if analysis.source.ranks:
        return Hypothesis(
            RANK_OUTLIER.code,
            title,
            "ruled out",
            f"{analysis.source.ranks} ranks agree at the spike",
            "per-rank loss",
        )
    return None


# ---------------------------------------------------------------- NaN


def nan_hypotheses(
    finding: Finding, view: SeriesView, analysis: Analysis, thr: Thresholds
) -> list[Hypothesis]:
    ev = finding.evidence
    first = int(ev["first_step"])
    origin = ev.get("origin_evidence") or {}
    hyps = [
        _nan_dtype_test(view, first, origin),
        _nan_gradient_test(view, first, thr),
        _poisoned_test(view, first),
    ]
    if origin:
        layer, before = origin["layer"], origin.get("input_layer") or "the input"
        hyps.append(
            Hypothesis(
                "layer-origin",
                f"the op in layer {layer} produced the first non-finite value",
                "supported",
                f"{origin['series']} non-finite at step {origin['step']} while {before} was finite "
                f"(forward order: {' -> '.join(origin.get('order', []))})",
                origin["series"],
                root_sentence=(
                    f"At step {origin['step']} layer {layer} went non-finite while its input "
                    f"({before}) was finite: the NaN was created inside {layer}, not fed to it."
                ),
            )
        )
    return _rank([h for h in hyps if h is not None], ["layer-origin"])


def _nan_dtype_test(view, first, origin) -> Hypothesis:
    dtype = view.dtype
    if dtype == "fp32":
        inner = origin and not any(
            w in origin["layer"].lower() for w in ("loss", "softmax", "lm_head", "logits")
        )
        why = (
            "fp32: a NaN there is almost always log(0) "
            "in the loss or 0/0 in its reduction (spec Q1.2)"
        )
        if inner:
            why += f"; but the first non-finite layer, {origin['layer']}, is upstream of the loss"
        return Hypothesis(
            "log-of-zero",
            "log(0) or 0/0 in the loss",
            "possible" if inner else "supported",
            why,
            "dtype",
            root_sentence=f"In fp32 the loss went non-finite at step {first}: "
            "a probability driven to exactly 0 (log(0)) or a 0/0 in the loss reduction.",
        )
    scaler = [m for m in ("loss_scale", "overflow", "skipped_steps") if view.has(m)]
    overflow_before = bool(scaler) and bool(
        np.any((overflow_per_step(view) > 0) & (view.steps <= first))
    )
    if runs_fp16(view) and (dtype == "fp16" or overflow_before):
        why = (
            f"dtype fp16 ({view.source.dtype_origin})"
            if dtype == "fp16"
            else "overflows logged before the NaN"
        )
        return Hypothesis(
            "activation-overflow",
            f"fp16 activation overflow (a value above {FP16_MAX:g})",
            "supported",
            why,
            "/".join(scaler) or "dtype",
            root_sentence=(
                f"In fp16 an activation exceeded {FP16_MAX:g} at or before step {first} and "
                "the loss went non-finite."
            ),
        )
    if dtype == "bf16":
        return Hypothesis(
            "activation-overflow",
            "bf16 exponent overflow (near 3e38)",
            "possible",
            "bf16: rarer than fp16; exponent overflow or an overflowed gradient",
            "dtype",
        )
    return Hypothesis(
        "log-of-zero",
        "log(0) / 0/0 in the loss, or an fp16 overflow",
        "not testable",
        "dtype unknown (no manifest, run parameter or flag states it, and no loss scaler is "
        "seen at work; pass --dtype)",
        "dtype",
    )


def _nan_gradient_test(view, first, thr: Thresholds) -> Hypothesis:
    title = "an exploding gradient drove the weights non-finite"
    if not view.has("grad_norm"):
        return Hypothesis(
            "exploding-gradient", title, "not testable", "no grad norm logged", "grad_norm"
        )
    steps, grad = view.points("grad_norm")
    stats = trailing_stats(
        steps, grad, thr.spike_window_steps, thr.min_points_per_window, thr.widened_window_points
    )
    a, b = (
        np.searchsorted(steps, first - thr.cause_lead_steps),
        np.searchsorted(steps, first, side="right"),
    )
    seg, base = grad[a:b], stats.mean[a:b]
    if seg.size == 0:
        return Hypothesis(
            "exploding-gradient",
            title,
            "not testable",
            f"grad norm not logged within [{first - thr.cause_lead_steps}, {first}]",
            "grad_norm",
        )
    if not np.all(np.isfinite(seg)):
        at = int(steps[a + int(np.argmax(~np.isfinite(seg)))])
        # at the loss's own step it may be a consequence; before it, it led
        return Hypothesis(
            "exploding-gradient",
            title,
            "supported" if at < first else "possible",
            f"grad norm non-finite at step {at}"
            + (" (before the loss)" if at < first else " (the same step as the loss)"),
            "grad_norm",
            root_sentence=(
                f"The gradient went non-finite at step {at} "
                "and the update carried it into the weights."
            ),
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = seg / base
    k = int(np.nanargmax(ratio)) if np.isfinite(ratio).any() else 0
    text = f"max {grad_norm_name(view)} {_g(float(seg[k]))} at step {int(steps[a + k])}"
    if math.isfinite(float(ratio[k])):
        over = _over(_trailing_steps(steps, grad, a + k, stats.widened, thr))
        text += f" = {float(ratio[k]):.1f}x its trailing mean {_g(float(base[k]))}{over}"
    status = (
        "supported"
        if np.isfinite(ratio[k]) and ratio[k] >= thr.grad_norm_spike_ratio
        else "ruled out"
    )
    return Hypothesis(
        "exploding-gradient",
        title,
        status,
        text + f" (an explosion needs >= {thr.grad_norm_spike_ratio:g}x)",
        "grad_norm",
    )


def _poisoned_test(view, first) -> Hypothesis:
    title = "a destructive update wrote NaN into a parameter, which then propagates forever"
    steps, loss = view.points("loss")
    later = (steps > first) & np.isfinite(loss)
    if later.any():
        return Hypothesis(
            "poisoned-weights",
            title,
            "ruled out",
            f"the loss is finite again at step {int(steps[later][0])}: "
            "the weights were not poisoned",
            "loss",
        )
    after = int((steps > first).sum())
    return Hypothesis(
        "poisoned-weights",
        title,
        "supported" if after else "possible",
        f"every one of the {after} loss points after step {first} is non-finite"
        if after
        else f"step {first} is the last logged step",
        "loss",
    )
