"""Which raw metric key means which canonical metric.

One table for every ingester, built from the key names real frameworks write
(shared/research/anchors.md section d). Within a canonical metric the keys are
in order of preference: when a log carries several (a run logging both
`loss_metrics/global_avg_loss` and `loss`), the earlier one wins and the
others stay available under their raw names.
"""

from __future__ import annotations

import functools
import re

from stabilitycli.core.records import dataclass

# canonical metric -> raw keys, most preferred first. Keys are compared after
# `normalise_key` (lower case, single spaces).
METRIC_ALIASES: dict[str, tuple[str, ...]] = {
    "loss": (
        "loss",
        "train/loss",
        "train_loss",
        "training_loss",
        "train/loss_step",
        "train_loss_step",
        "loss_step",
        "lm loss",
        "lm_loss",
        "lm-loss",
        "trl",  # llm.c main.log
        "loss_metrics/global_avg_loss",  # torchtitan
        "train/ce loss",  # OLMo-core
        "train/crossentropyloss",  # OLMo (legacy)
        "loss/train/total",  # Composer / LLM Foundry
        "train/samples/train_loss",  # DeepSpeed monitor
        "trainer/loss",
        "train/lm_loss",
        "train/lm loss",
    ),
    "eval_loss": (
        "eval_loss",
        "eval/loss",
        "val_loss",
        "val/loss",
        "validation_loss",
        "validation/loss",
        "valid/loss",
        "lm loss value",  # Megatron validation line
        "tel",  # llm.c validation
    ),
    "grad_norm": (
        "grad_norm",
        "grad norm",
        "grad-norm",
        "gradnorm",
        "train/grad_norm",
        "norm",  # llm.c main.log
        "optim/total grad norm",  # OLMo-core
        "optim/total_grad_norm",  # OLMo (legacy)
        "grad/norm/total",  # Levanter
        "l2_norm/grad/global",  # Composer (may be post-clip)
        "train/grad-norm",
        "gradient_norm",
        "total_norm",
    ),
    "lr": (
        "lr",
        "learning_rate",
        "learning rate",
        "learning-rate",
        "train/lr",
        "train/learning_rate",
        "optim/learning_rate",
        "optim/lr",
        "train/samples/lr",
        "optim/learning_rate_group0",
        "optim/lr (group 0)",
    ),
    "loss_scale": (
        "loss_scale",
        "loss scale",
        "loss-scale",
        "train/loss_scale",
        "train/samples/loss_scale",
        "scaler/scale",
        "grad_scale",
        "amp/loss_scale",
    ),
    "param_norm": (
        "param_norm",
        "params norm",
        "params-norm",
        "params_norm",
        "weight_norm",
        "params/norm/total",
        "optim/param_norm",
    ),
    "adam_v_norm": ("adam_v_norm", "optim/exp_avg_sq_norm"),
    "tokens_per_s": (
        "tokens_per_s",
        "tokens_per_sec",
        "tokens_per_second",
        "tok/s",
        "tok_per_sec",
        "throughput(tps)",  # torchtitan
        "throughput/tokens_per_sec",
        "throughput/tokens_per_second",
        "throughput/device/tokens_per_sec",
        "throughput/device/tokens_per_second",
        "throughput/device/tps",
        "tokens_per_sec_per_gpu",
        "train_tokens_per_second",
        # not "samples per second" (Megatron forks): samples are not tokens
        "throughput",
    ),
    "step_time_ms": (
        "step_time_ms",
        "elapsed time per iteration (ms)",
        "iteration-time",
        "iteration_time_ms",
    ),
    "tflops": (
        "tflops",
        "tflops_per_gpu",
        "throughput per gpu (tflop/s/gpu)",
        "model_tflops_per_gpu",
    ),
    "tokens": (
        "tokens",
        "num_tokens",
        "consumed_tokens",
        "consumed tokens",
        "n_tokens_seen",
        "throughput/total tokens",
        "num_input_tokens_seen",
        "tokens_seen",
    ),
    "samples": ("consumed samples", "consumed_samples", "global_samples", "samples"),
    "batch_id": ("batch_id", "batch_idx", "batch_index", "batch_hash", "data_index"),
    "skipped_steps": (
        "skipped_steps",
        "number of skipped iterations",
        "optim/step skipped",
        "optim/skipped_step",
        "skipped",
    ),
    "nan_steps": ("nan_steps", "number of nan iterations"),
    "overflow": ("overflow", "found_inf", "grad_overflow"),
    # the scale an overflowed step ran with, from DeepSpeed's `Attempted loss scale: A`
    "loss_scale_attempted": ("loss_scale_attempted",),
    # 1 where DeepSpeed said the scale was already at its minimum (`cannot decrease scale`)
    "loss_scale_at_minimum": ("loss_scale_at_minimum",),
}

STEP_KEYS: tuple[str, ...] = (
    "step",
    "global_step",
    "trainer/global_step",
    "iteration",
    "iter",
    "_step",
    "train/step",
    "steps",
)

RANK_KEYS: tuple[str, ...] = ("rank", "global_rank", "dp_rank", "data_parallel_rank")


# Families whose member name follows a prefix: `act_norm/<layer>`, `lr-AdamW`...
# The first group of each pattern is the suffix kept in the canonical name. Compiled at
# the first key the alias table does not hold: a log of known names never needs them, and
# they took re ~1 ms at every start-up (#40).
@functools.cache
def _prefix_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    return (
        (
            re.compile(r"^(?:act_norm|activation_norm|activations?/norm)[/.](.+)$", re.IGNORECASE),
            "act_norm/{}",
        ),
        (
            re.compile(r"^(?:grad_norm|grad/norm|optim/grad)[/.](.+?)(?:\.norm)?$", re.IGNORECASE),
            "grad_norm/{}",
        ),
        (
            re.compile(
                r"^(?:param_norm|params/norm|optim/param)[/.](.+?)(?:\.norm)?$", re.IGNORECASE
            ),
            "param_norm/{}",
        ),
        (re.compile(r"^l2_norm/grad/(.+)$", re.IGNORECASE), "grad_norm/{}"),
        (re.compile(r"^l2_norm/param/(.+)$", re.IGNORECASE), "param_norm/{}"),
    )


# Learning rates named after the optimizer (`lr-AdamW`, `lr/AdamW/0`).
@functools.cache
def _lr_pattern() -> re.Pattern[str]:
    return re.compile(r"^(?:lr[-/][a-z0-9_]+(?:/group)?[/ ]?0?|optim/lr \(group 0\))$")


def normalise_key(key: str) -> str:
    return " ".join(str(key).strip().lower().split())


_LOOKUP: dict[str, tuple[str, int]] = {}
for _canonical, _keys in METRIC_ALIASES.items():
    for _priority, _key in enumerate(_keys):
        _LOOKUP.setdefault(normalise_key(_key), (_canonical, _priority))


def canonical_for(raw_key: str) -> tuple[str, int] | None:
    """(canonical name, preference) for a raw key, or None when it is not known."""
    key = normalise_key(raw_key)
    hit = _LOOKUP.get(key)
    if hit is not None:
        return hit
    if _lr_pattern().match(key):
        return "lr", 50
    for pattern, template in _prefix_patterns():
        # match the raw spelling so the layer name is kept as the log wrote it
        match = pattern.match(str(raw_key).strip())
        if match and match.group(1).lower() not in ("total", "global"):
            return template.format(match.group(1)), 0
    return None


@dataclass(frozen=True)
class Resolution:
    mapping: dict[str, str]  # canonical metric -> the one raw key used for it
    notes: list[str]  # one per metric found by name or stood in for, said with the mapping
    origin: dict[str, str]  # canonical -> "--metric", "alias", "name" or "validation"


def resolve(
    raw_keys: list[str], overrides: dict[str, str] | None = None, *, per_rank: bool = False
) -> Resolution:
    """Map canonical metric -> the one raw key used for it, and say how each was found.

    `overrides` (canonical -> raw key, from `--metric loss=KEY`) always win;
    then the alias table; then, for the metrics every rule needs and that
    the table did not find, `metric_names` (a match on the key's words).
    """
    from stabilitycli.core import metric_names

    overrides = overrides or {}
    chosen: dict[str, tuple[int, str]] = {}
    taken = set(overrides.values())
    known: set[str] = set()
    for raw in raw_keys:
        if raw in taken:
            continue
        hit = canonical_for(raw)
        if hit is None:
            continue
        known.add(raw)
        canonical, priority = hit
        if canonical in overrides:
            continue
        if canonical not in chosen or priority < chosen[canonical][0]:
            chosen[canonical] = (priority, raw)
    mapping = {canonical: raw for canonical, (_, raw) in chosen.items()}
    mapping.update(overrides)
    origin = {c: ("--metric" if c in overrides else "alias") for c in mapping}

    notes: list[str] = []
    wanted = {m for m in MATCHED_BY_NAME if m not in mapping}
    free = [k for k in raw_keys if k not in known and k not in taken]
    matches = metric_names.match_keys(free, wanted, per_rank=per_rank) if wanted else {}
    for canonical in MATCHED_BY_NAME:
        fits = [m for m in matches.get(canonical, []) if m.key not in mapping.values()]
        fits = [m for m in fits if m.score >= metric_names.MIN_SCORE]
        if not fits:
            continue
        mapping[canonical] = fits[0].key
        origin[canonical] = "name"
        others = ", ".join(repr(m.key) for m in fits[1:6])
        notes.append(
            f"{canonical} <- {fits[0].key!r}: found by its name"
            + (f" (also fit: {others}; chosen by {metric_names.RULE})" if others else "")
            + f"; --metric {canonical}=KEY to choose another"
        )
    if "loss" not in mapping and "eval_loss" in mapping and "loss" not in overrides:
        # a log with only a validation loss (DPO and reward-model stages log no train loss)
        # is judged on it rather than refused; the note says which curve the verdict is about
        mapping["loss"] = mapping.pop("eval_loss")
        origin["loss"] = "validation"
        del origin["eval_loss"]
        notes.append(
            f"loss <- {mapping['loss']!r}: the log has no training loss, so the validation loss "
            "is analysed as the loss (points are sparser; spikes are in evaluation, not training)"
        )
    return Resolution(mapping, notes, origin)


# the metrics the rules need most, looked for by name when the table does not know the key
MATCHED_BY_NAME: tuple[str, ...] = ("loss", "eval_loss", "grad_norm", "lr", "loss_scale")


def find_key(raw_keys: list[str], candidates: tuple[str, ...]) -> str | None:
    """The first raw key (by preference of `candidates`) present in `raw_keys`."""
    by_norm = {normalise_key(k): k for k in raw_keys}
    for candidate in candidates:
        if candidate in by_norm:
            return by_norm[candidate]
    return None
