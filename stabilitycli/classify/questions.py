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
from typing import Any

from stabilitycli.classify.remedies import (
    FORMAT_LIMITS,
    GRAD_NAN_LOSS_FINITE,
    LR_TOO_HIGH,
    NAN_BEFORE_LOGITS,
    NAN_IN_WEIGHTS,
)
from stabilitycli.core.config import Thresholds, default_thresholds
from stabilitycli.detect.kinds import all_kinds
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
from stabilitycli.detect.kinds.schedule import (
    LR_INCREASING,
)

# a run that never learned: its own verdict, not Q4.4's plateau (a drift up after learning)
NOT_LEARNING = "not-learning"

_QUESTIONS: dict[str, str] = {
    "R": "Does one rank sit away from the cohort (the mean hides it)?",
    "Q1.1": "Is any logged loss NaN or Inf (or a NaN the logger hid)?",
    "Q1.2": "What dtype regime was the run in, and what does that make of the NaN?",
    "Q1.3": "Which layer went non-finite first (forward order)?",
    "Q1.4": "What fixes the NaN?",
    "Q1.5": "Is any logged eval/validation loss NaN or Inf?",
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
    "Q4.5": (
        "Has the eval loss risen over its last {overfit_rising_evals} evaluations while the "
        "training loss fell (over-fitting)?"
    ),
    "Q8.1": "Did the loss collapse by orders of magnitude within a few logged points to zero?",
    "Q8.2": "Did the run learn at all (a material fall, off the chance level, a live grad norm)?",
}

# verdict code -> (section, severity name, what it means)
_VERDICTS: dict[str, tuple[str | None, str, str]] = {
    NAN.code: (
        "1",
        "error",
        "The loss went NaN or Inf: training stopped being useful at the first such step.",
    ),
    EVAL_NONFINITE.code: (
        "1",
        "error",
        "An eval/validation loss went NaN or Inf while the training loss stayed finite.",
    ),
    RANK_OUTLIER.code: (
        "5",
        "error",
        "One or more data-parallel ranks disagree with the cohort; the mean hides them.",
    ),
    RANK_SILENT.code: (
        "5",
        "warning",
        "A rank stopped logging while the others went on: its log ends, the run did not.",
    ),
    "spike-persistent": (
        "2",
        "error",
        (
            "A loss spike that did not come back within {recovery_window_steps} steps: "
            "optimizer state is suspect."
        ),
    ),
    LOSS_SCALE_COLLAPSED.code: (
        "3",
        "error",
        "The fp16 loss scale fell below {min_loss_scale:g}: overflow on nearly every step.",
    ),
    LOSS_SCALE_STATIC.code: (
        "3",
        "error",
        "Overflows under a constant loss scale: dynamic loss scaling is off.",
    ),
    FP16_OVERFLOW.code: ("3", "error", "fp16 overflows the scaler does not absorb."),
    DIVERGENCE.code: (
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
    PLATEAU.code: (
        "4",
        "warning",
        (
            "The loss drifted up slightly with no cause: a plateau; check eval metrics and "
            "consider stopping."
        ),
    ),
    OVERFITTING.code: (
        "4",
        "warning",
        "The eval loss turned up at its minimum and kept rising while the training loss fell.",
    ),
    LOSS_COLLAPSE.code: (
        "1",
        "error",
        "The loss fell by orders of magnitude within a few logged points to near zero: the "
        "loss no longer measures the task (label leakage, an all-dropping mask, a NaN logged "
        "as 0).",
    ),
    NOT_LEARNING: (
        "4",
        "warning",
        "The run is not learning: no material fall of the loss in units of its own noise (a "
        "warning), or a loss at the chance level ln V or a vanished grad norm (an error).",
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
    NAN.code,
    LOSS_COLLAPSE.code,
    EVAL_NONFINITE.code,
    RANK_OUTLIER.code,
    "spike-persistent",
    LOSS_SCALE_COLLAPSED.code,
    LOSS_SCALE_STATIC.code,
    FP16_OVERFLOW.code,
    DIVERGENCE.code,
    # an error when the loss sits at ln V or the grad norm vanished: before a silent rank
    NOT_LEARNING,
    RANK_SILENT.code,
    "spike-recoverable",
    PLATEAU.code,
    OVERFITTING.code,
)

_CAUSE_TEXT: dict[str, str] = {
    "long-tail-token": (
        "the grad norm far above its trailing mean just before the spike: one batch's gradient "
        "dominated the update (a long-tail batch)"
    ),
    "lr-discontinuity": "the learning rate jumped just before the spike: a schedule bug",
    "lr-restart": (
        "the loss rose after a planned LR restart and did not decay as a restart's bump does: "
        "the restarted LR is too high for this stage of training"
    ),
    DUPLICATE_BATCH.code: "the batch at the spike repeats a recent batch id: a data-loader bug",
    "optimizer-reset": (
        "the spike began right after a restart: optimizer/scheduler/data state was not restored"
    ),
    LR_INCREASING.code: "the learning rate rises after warmup: schedule misconfigured",
    NAN_IN_WEIGHTS: (
        "a weight norm went non-finite before the loss did: the optimizer update wrote NaN into "
        "the weights (optimizer eps, LR), not log(0)"
    ),
    NAN_BEFORE_LOGITS: (
        "the first non-finite layer comes before the logits: not log(0) in the loss; that layer's "
        "weights or input"
    ),
    GRAD_NAN_LOSS_FINITE: (
        "the grad norm is non-finite on some steps while the loss stays finite: inferred, not "
        "seen in the log, usually steps a loss scaler skipped or a grad-norm reporting bug"
    ),
    LR_TOO_HIGH: (
        "the loss turned up while warmup was still raising the LR: the peak LR is too high"
    ),
    "weight-norm": (
        "a weight norm changed more than {weight_norm_ratio:g}x: weight decay too low or too high"
    ),
    GRAD_NORM_RISING.code: (
        "the grad norm's mean over a quarter of the window rises: the landscape is getting "
        "harder (data, init drift, LR too high)"
    ),
    "log-of-zero": (
        "fp32 NaN: the usual cause is log(0) in the loss (a probability driven to exactly 0) or "
        "0/0 in the reduction; inferred from the dtype, not seen in the log"
    ),
    "activation-overflow": (
        "fp16: the usual cause is an activation past {fp16_max:g}; inferred from the dtype, not "
        "seen in the log"
    ),
}

# causes named from what usually produces what the log shows, not from a series that shows them
INFERRED_CAUSES = frozenset({"log-of-zero", "activation-overflow", GRAD_NAN_LOSS_FINITE})


def fill(text: str, thresholds: Thresholds) -> str:
    """A text with its `{field}` placeholders filled from these thresholds (and the format
    limits)."""
    return text.format_map(_Placeholders(thresholds))


# the names `fill` reads from the thresholds
_THRESHOLD_NAMES = frozenset(f.name for f in fields(Thresholds))


class _Placeholders:
    """A threshold's value by its name, else a format limit's: what `FORMAT_LIMITS | {every
    field: its value}` holds, read only for the names a text asks (a small analysis fills
    some fifty texts, and each dict of all 115 fields took 1% of its time, #40)."""

    def __init__(self, thresholds: Thresholds) -> None:
        self._thresholds = thresholds

    def __getitem__(self, name: str) -> Any:
        if name in _THRESHOLD_NAMES:
            return getattr(self._thresholds, name)
        return FORMAT_LIMITS[name]


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
    "Q1.5": (
        "yes: the verdict is eval-nonfinite unless the training loss went non-finite too; "
        "re-run that evaluation alone. No: the eval series are finite."
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
        "restart; with no cause seen, also clip the grad norm near the "
        "{remedy_clip_percentile:g}th percentile of its values before the spike, and stratify "
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
    "Q4.5": (
        "yes: the verdict is overfitting; keep the checkpoint at the eval minimum. No: the eval "
        "loss still follows the training loss."
    ),
    "Q8.1": (
        "yes: the verdict is loss-collapse; check for label leakage, a loss mask that drops "
        "every token, and a NaN logged as 0. No: nothing to do here."
    ),
    "Q8.2": (
        "no: the verdict is not-learning; check that the optimizer steps (LR, frozen "
        "parameters, gradients reaching the weights), the labels and the loss mask. Yes, or not "
        "judged (an excerpt from late in a run): nothing to do here."
    ),
}


def question_next(thresholds: Thresholds) -> dict[str, str]:
    """Question id -> what its answers lead to, with the thresholds in force."""
    return {q: fill(text, thresholds) for q, text in _QUESTION_NEXT.items()}


def finding_texts(thresholds: Thresholds) -> dict[str, tuple[str, str]]:
    """Finding code -> (what it means, what to do), with the thresholds in force (each kind
    says both)."""
    return {
        code: (fill(kind.meaning, thresholds), fill(kind.todo, thresholds))
        for code, kind in all_kinds().items()
    }


# the texts with the default thresholds (`stab explain`)
QUESTIONS: dict[str, str] = questions(default_thresholds())
VERDICTS: dict[str, tuple[str | None, str, str]] = verdicts(default_thresholds())
CAUSE_TEXT: dict[str, str] = cause_texts(default_thresholds())
