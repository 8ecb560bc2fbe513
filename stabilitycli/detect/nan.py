"""§1: is the loss NaN or Inf, when did it start, and where in the network."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Skip
from stabilitycli.core.quantity_schema import ABSENT
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.nan import NAN, NAN_COUNT, FiniteLoss, NanEvidence
from stabilitycli.detect.mixed_precision import runs_fp16
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView

# Forward order of a transformer's layers (spec Q1.3); a layer name is placed by
# the first of these words it contains, then by its block index.
_FORWARD_STAGES: tuple[tuple[str, ...], ...] = (
    ("embed", "wte", "wpe", "tok_emb"),
    ("attn", "attention", "self_attn", "q_proj", "k_proj", "v_proj", "o_proj"),
    ("mlp", "ffn", "feed_forward", "fc", "up_proj", "down_proj", "gate_proj"),
    ("ln_f", "final_norm", "norm_f", "final_layernorm"),
    ("lm_head", "logits", "output"),
    ("log_softmax", "logsoftmax"),
    ("softmax",),
    ("loss",),
)


@functools.cache
def _block_index() -> re.Pattern[str]:
    # compiled at the first layer a log names (some 0.3M instructions at every start-up; #40)
    return re.compile(r"(?:^|[._/-])(?:h|layers?|blocks?|block)[._/-]?(\d+)", re.IGNORECASE)


def forward_order_key(layer: str) -> tuple[int, int, int]:
    """Sort key: (before/within/after the blocks, block index, stage within block)."""
    name = layer.lower()
    stage = next((i for i, words in enumerate(_FORWARD_STAGES) if any(w in name for w in words)), 3)
    if "log_softmax" in name or "logsoftmax" in name:
        stage = 5
    block = _block_index().search(name)
    if stage == 0:
        return (0, 0, 0)
    if block is not None:
        return (1, int(block.group(1)), stage)
    if stage in (1, 2):
        return (1, 0, stage)
    return (2, 0, stage)


def _nonfinite_summary(values: np.ndarray) -> dict[str, Any]:
    return {
        NAN_COUNT: int(np.isnan(values).sum()),
        "pos_inf": int(np.isposinf(values).sum()),
        "neg_inf": int(np.isneginf(values).sum()),
    }


@rule(
    NAN.rule,
    NAN.section,
    "loss is NaN or Inf (or a logger hid it)",
    emits=(NAN,),
    series=("loss", "grad_norm", "nan_steps", "skipped_steps"),
    provides=("nonfinite",),
)
def detect_nan(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Non-finite loss: the first step, how many follow, and the layer it started in.

    What it detects: any logged step whose loss is NaN, +Inf or -Inf (Q1.1);
    and a NaN the logger hid - the Hugging Face Trainer averages NaN losses
    away, Megatron drops a non-finite `lm loss` field - when the grad norm
    (outside fp16, where an infinite grad norm is a routine overflow) or a
    NaN-iteration counter shows it. With per-layer series (`act_norm/<layer>`,
    `grad_norm/<layer>`) it walks the layers in forward order at the first
    non-finite step and names the first one that is non-finite while the one
    before it is finite (Q1.3).

    Why it matters: a NaN loss ends useful training; every update after it is
    garbage. The first step and the origin layer are what the fix depends on
    (log_softmax vs log(softmax), clip-by-value, loss scaling; Q1.4).
    """
    result = RuleResult()
    if not view.has("loss"):
        result.skipped.append(Skip(NAN.rule, "loss not read: no loss series in the log"))
        return result
    steps, loss = view.points("loss")
    bad = ~np.isfinite(loss)
    evidence_series = "loss"
    hidden_by = None
    if not bad.any():
        steps, bad, hidden_by = _hidden_nan(view)
        if hidden_by is None:
            result.facts["nonfinite"] = FiniteLoss(count=0, points=int(loss.size))
            return result
        evidence_series = hidden_by
    first = int(np.argmax(bad))
    first_step = int(steps[first])
    count = int(bad.sum())
    # the NaN / +Inf / -Inf breakdown of the series that shows it: the loss, or a hidden NaN's
    # grad norm; a counter (NaN iterations, skipped steps) counts steps, not values: no breakdown
    if hidden_by is None:
        values: np.ndarray | None = loss[bad]
    elif hidden_by == "grad_norm":
        values = view.points("grad_norm")[1][bad]
    else:
        values = None
    origin = _origin_layer(view, first_step)
    earliest = _earliest_nonfinite(view, first_step)
    evidence = NanEvidence(
        first_step=first_step,
        count=count,
        following=count - 1,
        points=int(steps.size),
        series=evidence_series,
        **(_nonfinite_summary(values) if values is not None else {}),
        last_finite_loss=_last_finite_before(view, first_step),
        last_finite_step=_last_finite_step_before(view, first_step),
        dtype=view.dtype,
        earliest_nonfinite=ABSENT if earliest is None else earliest,
        origin=ABSENT if origin is None else origin["layer"],
        origin_evidence=ABSENT if origin is None else origin,
        **(_beside_finite_loss(view, steps, first) if hidden_by else {}),
    )
    message = (
        _hidden_message(evidence)
        if hidden_by
        else f"loss non-finite from step {first_step}: {count} of {steps.size} points"
    ) + (f"; first non-finite layer: {origin['layer']}" if origin else "")
    result.findings.append(
        NAN.finding(
            message,
            step=first_step,
            end_step=int(steps[bad][-1]),
            metric="loss",
            evidence=evidence,
        )
    )
    result.facts["nonfinite"] = evidence
    return result


def only_some_steps(ev: Mapping[str, Any]) -> bool:
    """A NaN shown by another series than the loss on some of its points from the first only."""
    return ev.get("series", "loss") != "loss" and ev["count"] < ev.get(
        "points_from_first", ev["count"]
    )


def nan_summary(ev: Mapping[str, Any]) -> str:
    """The NaN in words: of the loss, or of a series that shows one while the loss is finite."""
    first, count, series = ev["first_step"], ev["count"], ev.get("series", "loss")
    if series == "loss":
        return f"loss went non-finite at step {first} ({count} non-finite points)"
    trend = ""
    if ev.get("loss_last_step") is not None:
        trend = (
            f" (it {'falls' if ev['loss_falls'] else 'does not fall'}: {ev['loss_at_first']:.4g} "
            f"at step {first}, {ev['loss_last']:.4g} at step {ev['loss_last_step']})"
        )
    if only_some_steps(ev):
        named = "the grad norm" if series == "grad_norm" else series
        return (
            f"{named} is non-finite on {count} of {ev['points_from_first']} logged points from "
            f"step {first} while the loss stays finite{trend}; inferred, not seen in the log: a "
            "grad norm non-finite on some steps only usually means steps a loss scaler skipped "
            "on an overflow, or a bug in how the grad norm is reported, not NaN weights"
        )
    return (
        f"the run went non-finite at step {first}: {series} shows it (non-finite at every "
        f"logged point from there, {count} points) while the logged loss hides it{trend}"
    )


def _beside_finite_loss(view: SeriesView, steps: np.ndarray, first: int) -> dict[str, Any]:
    """How many points of the hidden NaN's series follow its first, and what the (finite) loss
    did from there: its value at the first, its last, and whether its last third sits below
    its first third."""
    loss_steps, loss = view.finite_points("loss")
    after = loss_steps >= steps[first]
    tail_steps, tail = loss_steps[after], loss[after]
    out: dict[str, Any] = {"points_from_first": int(steps.size - first)}
    if tail.size >= 3:
        third = max(tail.size // 3, 1)
        out |= {
            "loss_at_first": float(tail[0]),
            "loss_last": float(tail[-1]),
            "loss_last_step": int(tail_steps[-1]),
            "loss_falls": bool(np.median(tail[-third:]) < np.median(tail[:third])),
        }
    return out


def _hidden_message(ev: NanEvidence) -> str:
    """What the series that shows a hidden NaN shows, beside the finite loss."""
    if ev.count < ev.points_from_first:
        return (
            f"{ev.series} non-finite on {ev.count} of {ev.points_from_first} logged points from "
            f"step {ev.first_step} while the loss stays finite"
        )
    return (
        f"{ev.series} non-finite at every logged point from step {ev.first_step} "
        f"({ev.count} points) while the logged loss stays finite"
    )


def _hidden_nan(view: SeriesView) -> tuple[np.ndarray, np.ndarray, str | None]:
    """A NaN the loss series does not show but another series does."""
    fp16 = runs_fp16(view)
    if view.has("nan_steps"):
        steps, counts = view.points("nan_steps")
        hit = np.nan_to_num(counts, nan=1.0) > 0
        if hit.any():
            return steps, hit, "nan_steps (NaN-iteration counter)"
    if view.has("grad_norm") and not fp16:
        steps, grad = view.points("grad_norm")
        hit = ~np.isfinite(grad)
        if hit.any():
            return steps, hit, "grad_norm"
    if view.has("skipped_steps") and not fp16:
        steps, counts = view.points("skipped_steps")
        hit = np.nan_to_num(counts, nan=0.0) > 0
        if hit.any():
            return steps, hit, "skipped_steps (skipped-step counter outside fp16)"
    return view.steps, np.zeros(view.steps.size, dtype=bool), None


# counters and the scaler's own series are not where a NaN starts
_NOT_ORIGINS = ("loss", "overflow", "skipped_steps", "nan_steps", "loss_scale")


def _earliest_nonfinite(view: SeriesView, before_step: int) -> dict | None:
    """The series that went non-finite first, when that is before the loss did."""
    best: dict[str, Any] | None = None
    for name in view.columns:
        if name in _NOT_ORIGINS:
            continue
        steps, values = view.points(name)
        bad = ~np.isfinite(values)
        if bad.any():
            step = int(steps[np.argmax(bad)])
            if step < before_step and (best is None or step < best["step"]):
                best = {"series": name, "step": step}
    return best


def _last_finite_before(view: SeriesView, step: int) -> float | None:
    steps, loss = view.points("loss")
    ok = np.isfinite(loss) & (steps < step)
    return float(loss[ok][-1]) if ok.any() else None


def _last_finite_step_before(view: SeriesView, step: int) -> int | None:
    steps, loss = view.points("loss")
    ok = np.isfinite(loss) & (steps < step)
    return int(steps[ok][-1]) if ok.any() else None


def _origin_layer(view: SeriesView, nan_step: int) -> dict | None:
    layers = view.layer_columns()
    if not layers:
        return None
    # the earliest step at which any layer (or the loss) goes non-finite
    first_step = nan_step
    for name in layers:
        steps, values = view.points(name)
        bad = ~np.isfinite(values)
        if bad.any():
            first_step = min(first_step, int(steps[np.argmax(bad)]))
    ordered = sorted(
        layers, key=lambda n: (n.startswith("grad_norm/"), forward_order_key(n.split("/", 1)[1]))
    )
    previous = None
    for name in ordered:
        steps, values = view.points(name)
        at = np.searchsorted(steps, first_step)
        if at < steps.size and steps[at] == first_step and not np.isfinite(values[at]):
            return {
                "layer": name.split("/", 1)[1],
                "series": name,
                "step": first_step,
                "input_layer": previous.split("/", 1)[1] if previous else None,
                "order": [n.split("/", 1)[1] for n in ordered if n.startswith(name.split("/")[0])],
            }
        previous = name
    return None
