"""The tree's questions, verdicts, causes and remedies as data (spec §1-§5).

Renderers and `stab explain` read these; `tree.py` holds the branching code.

A number in a text that is a threshold is a `{field}` placeholder (with its
format: `{spike_sigma:g}`), never the default written out: `questions(t)`,
`verdicts(t)`, `cause_texts(t)` and `remedies_for(...)` fill them from the
`Thresholds` in force. `QUESTIONS`, `VERDICTS` and `CAUSE_TEXT` are the same
texts filled with the defaults. Remedies are in `remedies.py`.
"""

from __future__ import annotations

from dataclasses import fields

from stabilitycli.classify.remedies import (
    FORMAT_LIMITS,
    LR_TOO_HIGH,
    NAN_BEFORE_LOGITS,
    NAN_IN_WEIGHTS,
)
from stabilitycli.config import Thresholds

_QUESTIONS: dict[str, str] = {
    "R": "Does one rank sit away from the cohort (the mean hides it)?",
    "Q1.1": "Is any logged loss NaN or Inf (or a NaN the logger hid)?",
    "Q1.2": "What dtype regime was the run in, and what does that make of the NaN?",
    "Q1.3": "Which layer went non-finite first (forward order)?",
    "Q1.4": "What fixes the NaN?",
    "Q2.1": (
        "Is there a loss spike above mu + {spike_sigma:g} sigma of the trailing "
        "{spike_window_steps} steps?"
    ),
    "Q2.2": (
        "Did the loss come back to mu + {recovery_sigma:g} sigma within "
        "{recovery_window_steps} steps?"
    ),
    "Q2.3": "What caused the recoverable spike (grad norm, LR, batch, restart)?",
    "Q2.4": "Persistent elevation: what caused it?",
    "Q3.1": "Did fp16 gradients overflow (inf/NaN grad norm, skipped steps, overflow messages)?",
    "Q3.2": "What did the loss scale do (halve and recover, stay static, collapse)?",
    "Q3.3": "Did the first non-finite value show in the gradients (fp16 overflow) or the loss?",
    "Q3.4": "What fixes the overflows?",
    "Q4.1": "Has the loss risen over a {divergence_window_steps}-step window and never come back?",
    "Q4.2": "Did the LR rise in that window (outside warmup)?",
    "Q4.3": "Did a weight norm change more than {weight_norm_ratio:g}x in that window?",
    "Q4.4": "Is the grad-norm moving average rising?",
}

# verdict code -> (section, severity name, what it means)
_VERDICTS: dict[str, tuple[str | None, str, str]] = {
    "nan": (
        "1",
        "error",
        "The loss went NaN or Inf: training stopped being useful at the first such step.",
    ),
    "rank-outlier": (
        "5",
        "error",
        "One or more data-parallel ranks disagree with the cohort; the mean hides them.",
    ),
    "spike-persistent": (
        "2",
        "error",
        (
            "A loss spike that did not come back within {recovery_window_steps} steps: "
            "optimizer state is suspect."
        ),
    ),
    "loss-scale-collapsed": (
        "3",
        "error",
        "The fp16 loss scale fell below {min_loss_scale:g}: overflow on nearly every step.",
    ),
    "loss-scale-static": (
        "3",
        "error",
        "Overflows under a constant loss scale: dynamic loss scaling is off.",
    ),
    "fp16-overflow": ("3", "error", "fp16 overflows the scaler does not absorb."),
    "divergence": (
        "4",
        "error",
        "The loss rose for good (silent divergence): no NaN, no overflow, just no way back.",
    ),
    "spike-recoverable": (
        "2",
        "warning",
        (
            "A loss spike that recovered within {recovery_window_steps} steps: find its cause "
            "before it recurs."
        ),
    ),
    "plateau": (
        "4",
        "warning",
        (
            "The loss drifted up slightly with no cause: a plateau; check eval metrics and "
            "consider stopping."
        ),
    ),
    "healthy": (None, "info", "No instability found by any rule."),
    "insufficient-data": (
        None,
        "info",
        "The log is too short for the rules' windows; what it shows is listed as findings.",
    ),
}

# the verdict order of spec 0b: the first that applies names the run
VERDICT_ORDER: tuple[str, ...] = (
    "nan",
    "rank-outlier",
    "spike-persistent",
    "loss-scale-collapsed",
    "loss-scale-static",
    "fp16-overflow",
    "divergence",
    "spike-recoverable",
    "plateau",
)

_CAUSE_TEXT: dict[str, str] = {
    "long-tail-token": (
        "pre-clip grad norm far above its trailing mean just before the spike: a long-tail / "
        "rare-token batch"
    ),
    "lr-discontinuity": "the learning rate jumped just before the spike: a schedule bug",
    "duplicate-batch": "the batch at the spike repeats a recent batch id: a data-loader bug",
    "optimizer-reset": (
        "the spike began right after a restart: optimizer/scheduler/data state was not restored"
    ),
    "lr-increasing": "the learning rate rises after warmup: schedule misconfigured",
    NAN_IN_WEIGHTS: (
        "a weight norm went non-finite before the loss did: the optimizer update wrote NaN into "
        "the weights (optimizer eps, LR), not log(0)"
    ),
    NAN_BEFORE_LOGITS: (
        "the first non-finite layer comes before the logits: not log(0) in the loss; that layer's "
        "weights or input"
    ),
    LR_TOO_HIGH: (
        "the loss turned up while warmup was still raising the LR: the peak LR is too high"
    ),
    "weight-norm": (
        "a weight norm changed more than {weight_norm_ratio:g}x: weight decay too low or too high"
    ),
    "grad-norm-rising": (
        "the grad norm's mean over a quarter of the window rises: the landscape is getting "
        "harder (data, init drift, LR too high)"
    ),
    "log-of-zero": (
        "fp32 NaN: almost always log(0) in the loss (a probability driven to exactly 0) or 0/0 in "
        "the reduction"
    ),
    "activation-overflow": "fp16: an activation exceeded {fp16_max:g}",
}


def fill(text: str, thresholds: Thresholds) -> str:
    """A text with its `{field}` placeholders filled from these thresholds (and the format
    limits)."""
    values = {f.name: getattr(thresholds, f.name) for f in fields(thresholds)}
    return text.format_map(FORMAT_LIMITS | values)


def questions(thresholds: Thresholds) -> dict[str, str]:
    """Question id -> its text, with the thresholds in force."""
    return {q: fill(text, thresholds) for q, text in _QUESTIONS.items()}


def verdicts(thresholds: Thresholds) -> dict[str, tuple[str | None, str, str]]:
    """Verdict code -> (section, severity name, what it means), with the thresholds in force."""
    return {
        code: (section, severity, fill(text, thresholds))
        for code, (section, severity, text) in _VERDICTS.items()
    }


def cause_texts(thresholds: Thresholds) -> dict[str, str]:
    """Cause code -> what it means, with the thresholds in force."""
    return {cause: fill(text, thresholds) for cause, text in _CAUSE_TEXT.items()}


# What each answer of a question leads to (`stab explain Q2.3`): the next question, or what to do.
_QUESTION_NEXT: dict[str, str] = {
    "R": (
        "yes: the verdict is rank-outlier; check that rank's host and data shard (`stab ranks` "
        "gives the detail). No: the mean speaks for every rank."
    ),
    "Q1.1": (
        "yes: the verdict is nan, and Q1.2 and Q1.3 read where it came from. No: go on to the "
        "spike questions."
    ),
    "Q1.2": (
        "fp32: look for log(0) in the loss or 0/0 in its reduction; fp16: an activation passed "
        "{fp16_max:g}, see the loss-scale questions; bf16: look for a value that grows without "
        "bound; unknown: pass --dtype."
    ),
    "Q1.3": "fix that layer first: look at its weights and at its input at that step.",
    "Q1.4": (
        "use log_softmax, not log(softmax); clip gradients by value (+-{remedy_clip_value:g}) "
        "as well as by norm; for an fp16 overflow, dynamic loss scaling or bf16. If all of them "
        "are in and the NaN persists, the bug is structural."
    ),
    "Q2.1": "yes: Q2.2 asks whether it recovered. No: no spike to act on.",
    "Q2.2": (
        "yes: find its cause (Q2.3) before it recurs. No: the optimizer state is suspect; "
        "reload the last checkpoint before the spike (Q2.4)."
    ),
    "Q2.3": (
        "a grad-norm jump: inspect that batch for rare tokens, stratify batches, clip the grad "
        "norm; an LR jump: fix the schedule; a repeated batch: fix the data loader; a resume "
        "just before: restore the optimizer, scheduler and data state with the weights."
    ),
    "Q2.4": (
        "fix the cause as for Q2.3, then reload the last checkpoint before the spike and "
        "restart; with no cause seen, also clip the grad norm at {remedy_clip_norm:g} and stratify "
        "batches."
    ),
    "Q3.1": "yes: Q3.2 reads what the loss scaler did about it. No: nothing to do here.",
    "Q3.2": (
        "halving and recovering: the scaler is working, nothing to do; constant: turn on dynamic "
        "loss scaling; collapsed below {min_loss_scale:g}: find the op that overflows, halve the "
        "LR or move to bf16."
    ),
    "Q3.3": (
        "first non-finite in the gradients with the loss finite: an fp16 overflow (see Q3.2); "
        "first in the loss: a NaN of the loss itself (see Q1.2). Re-running the step in fp32 "
        "tells them apart."
    ),
    "Q3.4": (
        "turn on dynamic loss scaling if the scale never moves; halve the LR if the scale keeps "
        "collapsing; or move fp16 -> bf16."
    ),
    "Q4.1": "yes: Q4.2-Q4.4 look for its cause. No: no divergence to act on.",
    "Q4.2": (
        "yes: fix the LR schedule (or lower the peak LR when the loss turned up during warmup), "
        "then resume from the checkpoint before the rise."
    ),
    "Q4.3": (
        "yes: change the weight decay by 2x (raise it if the norm grew, lower it if it "
        "collapsed), then resume from the checkpoint before the rise."
    ),
    "Q4.4": (
        "yes: halve the LR and check the data stream. No to Q4.2-Q4.4: a plateau; check the "
        "eval loss and stop if it has stopped improving too."
    ),
}

# Every finding code a rule emits, in plain words: (what it means, what to do).
_FINDING_TEXT: dict[str, tuple[str, str]] = {
    "rank-outlier": (
        "one data-parallel rank's loss sits {rank_z:g} robust sigmas or more from the other "
        "ranks' median for {rank_persist_steps} logged steps or more",
        "check that rank's host (ECC and Xid errors, throttling, NCCL warnings) and its data "
        "shard; exclude the node and resume from before its onset",
    ),
    "rank-nonfinite": (
        "one rank reports NaN or Inf while the others are finite",
        "look at that rank's host and data shard first: the non-finite values begin there",
    ),
    "rank-silent": (
        "a rank stopped logging before the others",
        "look at that rank's own log for a crash, a hang or a killed process",
    ),
    "straggler": (
        "a rank's throughput lags the others' (below {straggler_ratio:g}x their median)",
        "check that host for throttling, a slow disk or network link, or a noisy neighbour",
    ),
    "throughput-drop": (
        "tokens per second fell by {throughput_drop_frac:.0%} or more and stayed down",
        "look for what changed at that step: a host, the data pipeline, checkpointing, or "
        "contention on the machine",
    ),
    "restart": (
        "the step went backwards: the run was resumed from a checkpoint here",
        "nothing, unless a spike follows it (then see optimizer-reset); the replayed steps are "
        "compared with the abandoned ones",
    ),
    "restart-replay": (
        "after a resume, the replayed steps compared with the abandoned trajectory: within "
        "{noise_band_sigmas:g}x the noise band, or not",
        "a replay that departs means the resume lost state: save and restore the optimizer "
        "moments, LR scheduler and data cursor with the weights",
    ),
    "nan": (
        "the loss (or a series that shows it, like the grad norm) went NaN or Inf",
        "see the verdict nan: what to do depends on the dtype and on where the NaN began",
    ),
    "spike": (
        "a loss spike: the loss rose above the trailing {spike_window_steps}-step mean + "
        "{spike_sigma:g} sigma and met the materiality bar",
        "if it came back within {recovery_window_steps} steps, fix its cause; if not, also "
        "reload the last checkpoint before it (see spike-recoverable and spike-persistent)",
    ),
    "recurring-spikes": (
        "several one-point spikes of one character with no evident cause, reported as one",
        "log the batch id and per-layer grad norms so that the batches behind them can be found",
    ),
    "blip": (
        "one isolated, moderate point above the spike bar with no cause: noise, not a spike",
        "nothing; it is listed so that nothing is hidden",
    ),
    "loss-jump": (
        "in a log too short for the spike window, the loss jumped {short_log_loss_jump_ratio:g}x "
        "or more between two points",
        "log more steps so that the spike rule can judge it; meanwhile look at that step's batch",
    ),
    "grad-norm-jump": (
        "in a log too short for the spike window, the grad norm jumped "
        "{short_log_grad_norm_jump_ratio:g}x or more between two points",
        "log more steps so that the spike rule can judge it",
    ),
    "lr-jump": (
        "the learning rate changed abruptly between two logged points",
        "check that the schedule meant it: a resume that lost the scheduler state, or a "
        "warmup restarted, jumps the LR",
    ),
    "grad-norm-spike": (
        "the pre-clip grad norm went {grad_norm_outlier_ratio:g}x or more above its trailing "
        "median, with or without a loss spike",
        "inspect that step's batch for rare or long-tail tokens; clipping absorbs one, a series "
        "of them needs stratified batching",
    ),
    "duplicate-batch": (
        "a batch id repeated one seen within the {duplicate_batch_window_steps} steps before",
        "fix the data loader: the sampler's seed and its position after a resume",
    ),
    "fp16-overflow": (
        "fp16 overflows that the log does not show a loss scaler absorbing",
        "enable dynamic loss scaling (or log the loss scale), find the op that overflows, or "
        "move to bf16",
    ),
    "loss-scale-halving": (
        "the fp16 loss scaler halved its scale after overflows and training went on: the "
        "scaler doing its job",
        "nothing, as long as the scale stays at or above {min_loss_scale:g}",
    ),
    "loss-scale-static": (
        "overflows happened while the loss scale stayed constant: dynamic loss scaling is off",
        "turn on dynamic loss scaling, or move to bf16",
    ),
    "loss-scale-collapsed": (
        "the fp16 loss scale fell below {min_loss_scale:g}: overflow on nearly every step",
        "find the op that overflows, halve the learning rate, or move to bf16; resume from "
        "before the overflows began",
    ),
    "lr-increasing": (
        "the learning rate rises after warmup",
        "fix the schedule: a cosine written as an inverse cosine, or a warmup that never ends",
    ),
    "weight-norm-change": (
        "a parameter group's weight norm changed more than {weight_norm_ratio:g}x within "
        "{divergence_window_steps} steps",
        "change the weight decay by 2x: raise it if the norm grew, lower it if it collapsed",
    ),
    "divergence": (
        "the loss rose over a {divergence_window_steps}-step window and never came back to the "
        "level where the rise began",
        "see the verdict divergence: fix its cause and resume from the checkpoint before the rise",
    ),
    "plateau": (
        "the loss drifted up by less than {divergence_min_rise_frac:.0%} with no cause in the "
        "LR, the weight norm or the grad norm",
        "check the eval loss: if it has stopped improving too, stop training or decay the LR",
    ),
    "loss-rise": (
        "the loss rose over a window, then the run undid the rise: not a divergence",
        "nothing; it is listed so that nothing is hidden",
    ),
    "grad-norm-rising": (
        "the grad norm's moving average is rising: the loss landscape is getting harder",
        "halve the learning rate if the loss rises with it; check the data stream",
    ),
}


def question_next(thresholds: Thresholds) -> dict[str, str]:
    """Question id -> what its answers lead to, with the thresholds in force."""
    return {q: fill(text, thresholds) for q, text in _QUESTION_NEXT.items()}


def finding_texts(thresholds: Thresholds) -> dict[str, tuple[str, str]]:
    """Finding code -> (what it means, what to do), with the thresholds in force."""
    return {
        code: (fill(meaning, thresholds), fill(todo, thresholds))
        for code, (meaning, todo) in _FINDING_TEXT.items()
    }


# the texts with the default thresholds (`stab explain`)
QUESTIONS: dict[str, str] = questions(Thresholds())
VERDICTS: dict[str, tuple[str | None, str, str]] = verdicts(Thresholds())
CAUSE_TEXT: dict[str, str] = cause_texts(Thresholds())
