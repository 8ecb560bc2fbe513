"""Remedies as data: the actions that address a verdict's cause (spec §1-§5).

A remedy is kept for a run only when the log does not show it already in
place; its text is a template over the `Thresholds` in force (the clip
numbers it advises among them), the fp16 limit and the event's own words.
`tree.py` picks a run's list with `remedies_for`; `stab explain` and
docs/rules.md read the whole table.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.data import DUPLICATE_BATCH
from stabilitycli.detect.kinds.divergence import DIVERGENCE, GRAD_NORM_RISING, PLATEAU
from stabilitycli.detect.kinds.eval import EVAL_NONFINITE, OVERFITTING
from stabilitycli.detect.kinds.learning import LOSS_COLLAPSE
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_STATIC,
)
from stabilitycli.detect.kinds.nan import NAN
from stabilitycli.detect.kinds.ranks import RANK_OUTLIER, RANK_SILENT
from stabilitycli.detect.kinds.schedule import LR_INCREASING
from stabilitycli.detect.log_words import clip_how_to_choose

# ---------------------------------------------------------------- remedies
#
# A remedy is the action that addresses a verdict's cause: the table below is keyed by
# (verdict, cause), and a cause with no row of its own falls back to (verdict, None). A remedy
# can need something the log must show (bf16 is advice for an fp16 run) and is dropped when the
# log shows it is already in place (a loss scale that moves means dynamic loss scaling is on).
# Texts are templates over the `Thresholds` fields, `FORMAT_LIMITS`, and the event:
# `{start}` is where it began ("step 800"), `{who}` the rank ("rank 41"), `{clip_at}` the clip
# taken from the run's own grad norms, `{grad_norm}` the grad norm as the writer logs it
# ("pre-clip grad norm" only when it logs that one), `{outlier_samples}` what a batch that
# dominates the update holds (rare tokens only for a token loss).

# What a log can show, for `Remedy.needs` and `Remedy.unless` (`tree.log_shows` finds them).
SHOWS_FP16 = "fp16"  # stated, or the loss scaler's own series say so
SHOWS_BF16 = "bf16"
SHOWS_SCALE_MOVING = "loss scale moving"  # the scale drops and rises: dynamic scaling is on
SHOWS_SCALE_CONSTANT = "loss scale constant"  # logged, and never moved
SHOWS_NO_SCALE = "no loss scale"  # neither a loss-scale series nor scaler messages
SHOWS_CLIPPING = "grad clipping"  # the grad norm is logged as the pre-clip one: the run clips
# the writer scales an fp16 loss dynamically on its own (nanoGPT's GradScaler), logged or not
SHOWS_WRITER_SCALER = "writer's loss scaler"

# how `stab explain` says a condition, after "only when the log shows" / "unless the log shows"
SHOWS_WORDS: dict[str, str] = {
    SHOWS_FP16: "an fp16 run",
    SHOWS_BF16: "a bf16 run",
    SHOWS_SCALE_MOVING: "a loss scale that moves, so dynamic loss scaling is on",
    SHOWS_SCALE_CONSTANT: "a loss scale that never moved",
    SHOWS_NO_SCALE: "no loss scale at all",
    SHOWS_CLIPPING: "gradient clipping in place: a grad norm logged as the pre-clip one",
    SHOWS_WRITER_SCALER: "a writer that scales an fp16 loss dynamically by itself",
}

# The largest finite fp16 value: a property of the number format, so no setting can move it.
# (The clip numbers the remedies advise are `Thresholds` fields: a team sets its own practice.)
FP16_MAX = 65504.0

# the format limits a text may name, by their template field
FORMAT_LIMITS: dict[str, float] = {"fp16_max": FP16_MAX}

# the event words when no run is at hand (`stab explain`)
GENERIC_EVENT: dict[str, str] = {"start": "the first step of the event", "who": "the outlying rank"}
# and the words a run's log decides (`tree.event_words`), as they read without a log
GENERIC_LOG_WORDS: dict[str, str] = {
    "grad_norm": "grad norm",
    "outlier_samples": "unusual or long-tail samples (rare tokens, for a language model)",
}


@dataclass(frozen=True)
class Remedy:
    """One action; kept for a run only when the log shows `needs` and none of `unless`."""

    text: str
    needs: frozenset[str] = frozenset()
    unless: frozenset[str] = frozenset()

    def fits(self, shows: frozenset[str]) -> bool:
        return self.needs <= shows and not (self.unless & shows)

    def condition(self) -> str:
        """When it applies, in words ('' when always)."""
        parts = [f"only when the log shows {SHOWS_WORDS[n]}" for n in sorted(self.needs)]
        parts += [f"not when the log shows {SHOWS_WORDS[n]}" for n in sorted(self.unless)]
        return "; ".join(parts)


def _remedy(text: str, needs: tuple[str, ...] = (), unless: tuple[str, ...] = ()) -> Remedy:
    return Remedy(text, frozenset(needs), frozenset(unless))


# Remedy-table causes that are not a verdict's cause: where a NaN with no spec cause began
# (the verdict's cause stays None; its remedies follow where the NaN showed first).
NAN_IN_WEIGHTS = "nan-in-weights"
NAN_BEFORE_LOGITS = "nan-before-logits"
# a grad norm non-finite on some steps while the loss stays finite: not NaN weights
GRAD_NAN_LOSS_FINITE = "grad-nan-loss-finite"
# and a divergence that began while warmup still raised the LR (no Q4 cause: the peak LR)
LR_TOO_HIGH = "lr-too-high"
REMEDY_ONLY_CAUSES = frozenset(
    {NAN_IN_WEIGHTS, NAN_BEFORE_LOGITS, GRAD_NAN_LOSS_FINITE, LR_TOO_HIGH}
)

# kept as names: tests and callers check that a run is (not) told these
ENABLE_DYNAMIC_SCALING = (
    "enable dynamic loss scaling, or log the loss scale so that the log shows a scaler at work"
)
MOVE_TO_BF16 = "move fp16 -> bf16 (bf16 has the fp32 exponent range and needs no loss scaling)"

# fp16
_ENABLE_SCALER = _remedy(
    ENABLE_DYNAMIC_SCALING, needs=(SHOWS_NO_SCALE,), unless=(SHOWS_WRITER_SCALER,)
)
_TURN_ON_SCALER = _remedy(
    "turn on dynamic loss scaling: the logged loss scale stayed constant through the overflows "
    '(PyTorch AMP: a GradScaler; DeepSpeed: "loss_scale": 0; Megatron: leave out --loss-scale)',
    needs=(SHOWS_SCALE_CONSTANT,),
)
_TO_BF16 = _remedy(MOVE_TO_BF16, needs=(SHOWS_FP16,))
_FIND_OVERFLOWING_OP = _remedy(
    "find the op that overflows: log the largest |activation| and |gradient| of each layer "
    "around {start}; above {fp16_max:g} is an fp16 overflow (look at init, the residual-stream "
    "magnitude and the attention logits)"
)
_HALVE_LR_SCALE_HALVING = _remedy(
    "halve the learning rate: the loss scaler kept halving instead of settling"
)
_RESUME_BEFORE_COLLAPSE = _remedy(
    "resume from the last checkpoint before {start}, where the overflows began: with the scale "
    "below {min_loss_scale:g}, small fp16 gradients underflow to zero and the updates since lost "
    "their signal"
)
_HALVE_LR_IF_OVERFLOWS_GO_ON = _remedy(
    "if the overflows keep coming after that, halve the learning rate",
    needs=(SHOWS_SCALE_MOVING,),
)

# NaN
_LOG_SOFTMAX = _remedy(
    "compute the loss with log_softmax (or cross_entropy on the logits), never "
    "log(softmax(x)); or add an epsilon inside the log"
)
_CLIP_BY_VALUE = _remedy(
    "if an embedding gradient went infinite, clip gradients by value (+-{remedy_clip_value:g}) "
    "as well as by norm"
)
_RERUN_WITH_ANOMALY_DETECTION = _remedy(
    "resume from the last checkpoint before {start} and re-run that step with anomaly detection "
    "on, to confirm which op made the NaN"
)
_RESUME_BEFORE_NAN = _remedy("resume from the last checkpoint before {start}")
_FIND_FIRST_NONFINITE_OP = _remedy(
    "re-run that step in fp32 with a NaN check after each layer to find the first op that goes "
    "non-finite"
)
_BF16_RUNAWAY = _remedy(
    "a value overflows this dtype only near 3e38: look for one that grows without bound (log "
    "each layer's activation and gradient norms) or a division by zero",
    needs=(SHOWS_BF16,),
)
_RESUME_AND_CHECKPOINT_OFTEN = _remedy(
    "resume from the last checkpoint before {start}, and checkpoint more often so that the last "
    "good one is close to a NaN"
)
_FIX_NAN_UPDATE = _remedy(
    "the weights went non-finite before the loss: the optimizer update wrote the NaN; check the "
    "optimizer's eps (too small for the dtype), the LR at that step, and clip the grad norm"
)
_FIX_NAN_LAYER = _remedy(
    "look at the first non-finite layer's weights and its input at that step: a normalisation "
    "dividing by a zero variance, a residual that keeps growing, or a bad init"
)
_CHECK_SKIPPED_STEPS = _remedy(
    "check whether the steps with a non-finite grad norm were skipped: log the loss scale and a "
    "skipped-step count (a loss scaler skips the update on an overflow, and the loss goes on as "
    "before)"
)
_CHECK_GRAD_NORM_REPORT = _remedy(
    "if no scaler skipped them, look at how the grad norm is computed and reported (a parameter "
    "with no gradient, a zero division in the norm's reduction): a finite loss says the weights "
    "are not NaN"
)
_RESUME_ONLY_IF_LOSS_BREAKS = _remedy(
    "resume from the last checkpoint before {start} only if the loss itself turns non-finite or "
    "stops falling; while it keeps falling, training is doing its work"
)
_STRUCTURAL_NAN = _remedy(
    "if log_softmax, value clipping and loss scaling are already in and the NaN persists, the bug "
    "is structural: look at the model code and the data, not the numerics"
)

# spikes
_INSPECT_LONG_TAIL_BATCH = _remedy(
    "inspect the batch at {start} for {outlier_samples}: the {grad_norm} jumped far above its "
    "trailing mean just before the loss did (`stab postmortem` lists what the log shows)"
)
_STRATIFY = _remedy("enable stratified batching, so that such samples are spread across batches")
_ADD_CLIPPING = _remedy("clip the global grad norm at {clip_at}", unless=(SHOWS_CLIPPING,))
_LOWER_CLIPPING = _remedy("lower the grad-clip threshold to {clip_at}", needs=(SHOWS_CLIPPING,))
_FIX_LR_JUMP = _remedy(
    "fix the LR schedule: the LR jumped just before {start} (look at the scheduler's state after "
    "a resume, the warmup and step bookkeeping, and any LR changed by hand)"
)
_LOWER_RESTART_PEAK = _remedy(
    "lower the peak LR the schedule restarts to (or restart less often): the loss did not "
    "come back after the planned restart at {start}"
)
_FIX_DATA_LOADER = _remedy(
    "fix the data loader: the batch at {start} repeats one seen within the "
    "{duplicate_batch_window_steps} steps before (check the sampler's seed and its position "
    "after a resume)"
)
_RESTORE_FULL_STATE = _remedy(
    "make the checkpoint save and restore the optimizer moments, the LR scheduler and the data "
    "cursor: the spike began within {restart_spike_steps} steps of a resume"
)
_CONFIRM_RESUME = _remedy(
    "resume again from that checkpoint with the full state and confirm that the replayed steps "
    "match the first run (`stab compare`)"
)
_RELOAD_BEFORE_SPIKE = _remedy(
    "reload the last checkpoint before {start}: the loss did not come back within "
    "{recovery_window_steps} steps, so the optimizer moments after it are suspect; restart from "
    "it once the cause is fixed"
)
_TRACE_UNEXPLAINED_SPIKE = _remedy(
    "inspect the batch at {start}: nothing in the log explains the spike (grad norm, LR, batch "
    "id, restarts); log the batch id and per-layer grad norms so that a recurrence can be traced"
)

# divergence, plateau
_FIX_RISING_LR = _remedy(
    "fix the LR schedule: the LR rises after warmup (a cosine written as an inverse cosine, or a "
    "warmup that never ends)"
)
_LOWER_PEAK_LR = _remedy(
    "lower the peak LR below the LR at which the loss turned up, or lengthen the warmup"
)
_ADJUST_WEIGHT_DECAY = _remedy(
    "change the weight decay by 2x: raise it if the weight norm grew, lower it if the norm "
    "collapsed"
)
_HALVE_LR_HARDER_LANDSCAPE = _remedy(
    "halve the learning rate: the grad norm's moving average is rising (the loss landscape is "
    "getting harder)"
)
_CHECK_DATA_AND_INIT = _remedy("check the data stream from {start}, and the weights for init drift")
_HALVE_LR_NO_CAUSE = _remedy(
    "halve the learning rate (no cause shows in the logged series; log the LR, the weight norms "
    "and the grad norm where they are missing)"
)
_RESUME_BEFORE_RISE = _remedy(
    "resume from the last checkpoint before {start}, where the rise began"
)
_CHECK_EVAL = _remedy(
    "check the eval loss over the same steps: if it has stopped improving too, stop training or "
    "decay the LR"
)
_KEEP_TRAINING = _remedy("if the eval loss still improves, keep training and check again later")

# eval series, a silent rank
_RERUN_EVAL = _remedy(
    "run the evaluation alone on the checkpoint of {start}: with the training loss finite, look "
    "for an empty or fully masked eval batch (0/0) or an fp16 eval overflow before suspecting "
    "the weights"
)
_SELECT_BY_FINITE_EVAL = _remedy(
    "do not select checkpoints by this eval loss until it is finite again; keep the last one "
    "with a finite evaluation"
)
_KEEP_EVAL_MINIMUM = _remedy(
    "keep the checkpoint nearest the eval minimum ({start}) and stop there (early stopping)"
)
_REGULARISE = _remedy(
    "to train on: more data or augmentation, more weight decay or dropout, or fewer epochs "
    "over the same data"
)
_SILENT_RANK_LOG = _remedy(
    "read {who}'s own log and the scheduler's record around {start}: a crash, an OOM kill or a "
    "hang ends a rank's log"
)
_SILENT_RANK_BATCH = _remedy(
    "if the job went on without it (elastic training), the global batch shrank from {start}: "
    "check that the LR and the batch size still match"
)
# never learned, collapse
_CHECK_OPTIMIZER_STEPS = _remedy(
    "check that the optimizer steps at all: the LR is not 0 after the schedule, the parameters "
    "are not frozen (requires_grad), and the optimizer holds the model's parameters"
)
_CHECK_LABELS = _remedy(
    "check the labels and the loss mask on one batch by hand: shifted or constant labels, or a "
    "mask that keeps no token, leave nothing to learn"
)
_RAISE_LR = _remedy(
    "if all of that holds, raise the learning rate (try 3x-10x) over a short run and watch the "
    "first hundred steps"
)
_CHECK_LEAKAGE = _remedy(
    "check for label leakage: is the target (or the next token) visible in the input at "
    "{start}? Compare one batch's inputs and labels by hand"
)
_CHECK_MASK = _remedy(
    "check the loss mask from {start}: a mask that drops every token gives a loss of 0 (or a "
    "0/0 that the logger writes as 0)"
)
_LOG_NAN_AS_NAN = _remedy(
    "check that the logger writes a NaN loss as NaN, not as 0 (log the grad norm too: a NaN "
    "there shows it)"
)

# ranks, short logs
_RANK_HOST = _remedy(
    "on the host that ran {who}, look for hardware faults around {start}: ECC and Xid errors "
    "(nvidia-smi -q -d ECC, dmesg), thermal throttling, NCCL warnings in that rank's log"
)
_RANK_SHARD = _remedy(
    "check {who}'s data shard: the files or sample indices it read from {start} (duplicated, "
    "empty or mis-tokenised batches move one rank's loss away from the rest)"
)
_RANK_EXCLUDE = _remedy(
    "exclude or replace that node and resume from the last checkpoint before {start}"
)
_LOG_MORE = _remedy(
    "log more steps (or pass the full log) so that the {spike_window_steps}- and "
    "{divergence_window_steps}-step windows can be judged"
)

_LONG_TAIL_FIX = (_INSPECT_LONG_TAIL_BATCH, _STRATIFY, _ADD_CLIPPING, _LOWER_CLIPPING)
_RESUME_FIX = (_RESTORE_FULL_STATE, _CONFIRM_RESUME)
_COLLAPSE = (
    _FIND_OVERFLOWING_OP,
    _HALVE_LR_SCALE_HALVING,
    _TO_BF16,
    _RESUME_BEFORE_COLLAPSE,
)
_UNABSORBED_OVERFLOW = (_ENABLE_SCALER, _TURN_ON_SCALER, _FIND_OVERFLOWING_OP, _TO_BF16)

# (verdict, cause) -> the remedies, the cause's fix first, then what to do about the damage
REMEDY_TABLE: dict[tuple[str, str | None], tuple[Remedy, ...]] = {
    (NAN.code, "log-of-zero"): (_LOG_SOFTMAX, _CLIP_BY_VALUE, _RERUN_WITH_ANOMALY_DETECTION),
    (NAN.code, "activation-overflow"): (
        _FIND_OVERFLOWING_OP,
        _ENABLE_SCALER,
        _TURN_ON_SCALER,
        _TO_BF16,
        _HALVE_LR_IF_OVERFLOWS_GO_ON,
        _RESUME_BEFORE_NAN,
    ),
    (NAN.code, NAN_IN_WEIGHTS): (
        _RESUME_AND_CHECKPOINT_OFTEN,
        _FIX_NAN_UPDATE,
        _FIND_FIRST_NONFINITE_OP,
    ),
    (NAN.code, NAN_BEFORE_LOGITS): (_RESUME_BEFORE_NAN, _FIX_NAN_LAYER, _FIND_FIRST_NONFINITE_OP),
    (NAN.code, GRAD_NAN_LOSS_FINITE): (
        _CHECK_SKIPPED_STEPS,
        _CHECK_GRAD_NORM_REPORT,
        _RESUME_ONLY_IF_LOSS_BREAKS,
    ),
    (NAN.code, None): (
        _RESUME_BEFORE_NAN,
        _FIND_FIRST_NONFINITE_OP,
        _BF16_RUNAWAY,
        _STRUCTURAL_NAN,
    ),
    (RANK_OUTLIER.code, None): (_RANK_HOST, _RANK_SHARD, _RANK_EXCLUDE),
    # a persistent spike leaves the optimizer state suspect: back to the checkpoint first (Q2.4)
    ("spike-persistent", "long-tail-token"): (_RELOAD_BEFORE_SPIKE, *_LONG_TAIL_FIX),
    ("spike-persistent", "lr-discontinuity"): (_RELOAD_BEFORE_SPIKE, _FIX_LR_JUMP),
    ("spike-persistent", DUPLICATE_BATCH.code): (_RELOAD_BEFORE_SPIKE, _FIX_DATA_LOADER),
    ("spike-persistent", "lr-restart"): (_RELOAD_BEFORE_SPIKE, _LOWER_RESTART_PEAK),
    # the resume itself lost the state: resuming again, with all of it, is the repair
    ("spike-persistent", "optimizer-reset"): _RESUME_FIX,
    # spec Q2.4: with no cause seen, the generic repair
    ("spike-persistent", None): (
        _RELOAD_BEFORE_SPIKE,
        _TRACE_UNEXPLAINED_SPIKE,
        _ADD_CLIPPING,
        _LOWER_CLIPPING,
        _STRATIFY,
    ),
    ("spike-recoverable", "long-tail-token"): _LONG_TAIL_FIX,
    ("spike-recoverable", "lr-discontinuity"): (_FIX_LR_JUMP,),
    ("spike-recoverable", DUPLICATE_BATCH.code): (_FIX_DATA_LOADER,),
    ("spike-recoverable", "lr-restart"): (_LOWER_RESTART_PEAK,),
    ("spike-recoverable", "optimizer-reset"): _RESUME_FIX,
    ("spike-recoverable", None): (_TRACE_UNEXPLAINED_SPIKE,),
    (LOSS_SCALE_COLLAPSED.code, "activation-overflow"): _COLLAPSE,
    (LOSS_SCALE_COLLAPSED.code, None): _COLLAPSE,
    (LOSS_SCALE_STATIC.code, None): (_TURN_ON_SCALER, _TO_BF16, _FIND_OVERFLOWING_OP),
    (FP16_OVERFLOW.code, "activation-overflow"): _UNABSORBED_OVERFLOW,
    (FP16_OVERFLOW.code, None): _UNABSORBED_OVERFLOW,
    (DIVERGENCE.code, LR_INCREASING.code): (_FIX_RISING_LR, _RESUME_BEFORE_RISE),
    (DIVERGENCE.code, LR_TOO_HIGH): (_LOWER_PEAK_LR, _RESUME_BEFORE_RISE),
    (DIVERGENCE.code, "weight-norm"): (_ADJUST_WEIGHT_DECAY, _RESUME_BEFORE_RISE),
    (DIVERGENCE.code, GRAD_NORM_RISING.code): (
        _HALVE_LR_HARDER_LANDSCAPE,
        _CHECK_DATA_AND_INIT,
        _RESUME_BEFORE_RISE,
    ),
    (DIVERGENCE.code, None): (_HALVE_LR_NO_CAUSE, _RESUME_BEFORE_RISE),
    (PLATEAU.code, None): (_CHECK_EVAL, _KEEP_TRAINING),
    (EVAL_NONFINITE.code, None): (_RERUN_EVAL, _SELECT_BY_FINITE_EVAL),
    (OVERFITTING.code, None): (_KEEP_EVAL_MINIMUM, _REGULARISE),
    (RANK_SILENT.code, None): (_SILENT_RANK_LOG, _SILENT_RANK_BATCH),
    (LOSS_COLLAPSE.code, None): (_CHECK_LEAKAGE, _CHECK_MASK, _LOG_NAN_AS_NAN),
    ("not-learning", None): (_CHECK_OPTIMIZER_STEPS, _CHECK_LABELS, _RAISE_LR),
    ("insufficient-data", None): (_LOG_MORE,),
    ("healthy", None): (),
}


def remedy_rows(verdict: str, cause: str | None) -> tuple[Remedy, ...]:
    """The row for a verdict and its cause (the verdict's own row when the cause has none)."""
    return REMEDY_TABLE.get((verdict, cause)) or REMEDY_TABLE.get((verdict, None), ())


def fill_remedy(remedy: Remedy, thresholds: Thresholds, event: dict[str, str] | None = None) -> str:
    """A remedy's text with the thresholds in force, the format limits and the event's words."""
    values: dict[str, Any] = {f.name: getattr(thresholds, f.name) for f in fields(thresholds)}
    clip_at = {"clip_at": clip_how_to_choose(thresholds.remedy_clip_percentile)}
    values |= FORMAT_LIMITS | GENERIC_EVENT | GENERIC_LOG_WORDS | clip_at | (event or {})
    return remedy.text.format_map(values)


def remedies_for(
    verdict: str,
    cause: str | None,
    thresholds: Thresholds,
    shows: frozenset[str],
    event: dict[str, str] | None = None,
) -> list[str]:
    """The remedies for this verdict and cause that the log does not show already in place.

    `shows` is what the log shows (`SHOWS_*`); `event` names where the event began (`start`)
    and, for a rank, which (`who`). No text appears twice.
    """
    texts = [
        fill_remedy(r, thresholds, event) for r in remedy_rows(verdict, cause) if r.fits(shows)
    ]
    return list(dict.fromkeys(texts))


def remedy_causes(verdict: str) -> list[str | None]:
    """The causes the table has a row for under this verdict (None: the verdict's own row)."""
    return [cause for (v, cause) in REMEDY_TABLE if v == verdict]
