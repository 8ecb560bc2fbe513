"""The tree's questions, verdicts, causes and remedies as data (spec §1-§5).

Renderers and `stab explain` read these; `tree.py` holds the branching code.

A number in a text that is a threshold is a `{field}` placeholder (with its
format: `{spike_sigma:g}`), never the default written out: `questions(t)`,
`verdicts(t)`, `remedies(t)` and `cause_texts(t)` fill them from the
`Thresholds` in force. `QUESTIONS`, `VERDICTS`, `REMEDIES` and `CAUSE_TEXT`
are the same texts filled with the defaults (`stab explain`).
"""

from __future__ import annotations

from dataclasses import fields

from stabilitycli.config import Thresholds

_QUESTIONS: dict[str, str] = {
    "R": "Does one rank sit away from the cohort (the mean hides it)?",
    "Q1.1": "Is any logged loss NaN or Inf (or a NaN the logger hid)?",
    "Q1.2": "What dtype regime was the run in, and what does that make of the NaN?",
    "Q1.3": "Which layer went non-finite first (forward order)?",
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

# Remedies that suit only some runs. A verdict's remedy list keeps one only when the run's
# evidence shows what REMEDY_NEEDS names (tree.py checks), so that no run is told to adopt
# what it may already have: bf16 for a run not known to be fp16, a dynamic scaler for one
# whose loss scale is seen moving. `stab explain` lists them all.
ENABLE_DYNAMIC_SCALING = "enable dynamic loss scaling (or check it is active)"
MOVE_TO_BF16 = "move fp16 -> bf16 (bf16 has the fp32 exponent range and needs no loss scaling)"
REMEDY_NEEDS: dict[str, str] = {
    ENABLE_DYNAMIC_SCALING: "no-moving-scale",
    MOVE_TO_BF16: "fp16",
}

_REMEDIES: dict[str, list[str]] = {
    "log-of-zero": [
        (
            "compute the loss with log_softmax (or cross_entropy on logits), never "
            "log(softmax(x)); or add an epsilon"
        ),
        (
            "clip gradients by value (+-100) in addition to clip-by-norm if an embedding gradient "
            "went infinite"
        ),
        (
            "reload the last checkpoint before the first NaN step and re-run one step with anomaly "
            "detection"
        ),
    ],
    "activation-overflow": [
        ENABLE_DYNAMIC_SCALING,
        MOVE_TO_BF16,
        "halve the learning rate if the loss scale keeps collapsing",
        "check init and residual-stream magnitude: activations above 65504 overflow fp16",
    ],
    "nan-unknown": [
        "reload the last checkpoint before the first NaN step",
        "re-run that step in fp32 with per-layer isnan checks to find the first non-finite op",
        (
            "if log_softmax, value clipping and loss scaling are already in and NaN persists, "
            "the bug is structural"
        ),
    ],
    "long-tail-token": [
        (
            "write the post-mortem (`stab postmortem`) and inspect the batch at the spike for "
            "rare/long-tail tokens"
        ),
        "enable stratified batching; lower the grad-clip threshold",
    ],
    "lr-discontinuity": [
        "fix the LR schedule (the LR jumped at the spike); check scheduler state on resume"
    ],
    "duplicate-batch": ["fix the data loader: a batch id repeated a recent one"],
    "optimizer-reset": [
        (
            "the spike follows a restart: make the checkpoint restore optimizer moments, scheduler "
            "and data cursor"
        ),
        (
            "resume again from the checkpoint with full state and confirm the trajectory matches "
            "(`stab compare`)"
        ),
    ],
    "spike-persistent": [
        "reload the last checkpoint before the spike (optimizer moments are now corrupt)",
        "lower the grad-clip threshold to 0.5 and enable stratified batching, then restart",
    ],
    "spike-recoverable": [
        "find the spike's cause (grad-norm panel, LR panel, batch composition) and fix it; re-run"
    ],
    "loss-scale-collapsed": [
        "activations are systematically too large: check init and residual-stream magnitude",
        "halve the learning rate",
        MOVE_TO_BF16,
    ],
    "loss-scale-static": [
        "enable a dynamic loss scaler (overflows happen under a constant scale)",
        MOVE_TO_BF16,
    ],
    "fp16-overflow": [
        ENABLE_DYNAMIC_SCALING,
        "halve the LR if the scale keeps collapsing",
        MOVE_TO_BF16,
    ],
    "lr-increasing": [
        "fix the schedule: the LR rises after warmup (inverse cosine, or warmup that never ends)"
    ],
    "lr-too-high": [
        "lower the peak LR below the LR at which the loss turned up, or lengthen the warmup",
        "add or lower gradient clipping; resume from a checkpoint before the turn",
    ],
    "weight-norm": [
        (
            "adjust weight decay 2x (norm grows: too low; collapses: too high) and re-run from the "
            "checkpoint"
        )
    ],
    "grad-norm-rising": [
        "halve the learning rate and resume from the checkpoint before the divergence",
        "check the data stream and init drift (the loss landscape is getting harder)",
    ],
    "divergence": ["resume from the checkpoint before the divergence began, with a lower LR"],
    "plateau": ["check the eval metrics: if they have plateaued too, stop training"],
    "rank-outlier": [
        (
            "inspect the named rank(s): its data shard, its GPU/node health, and its last "
            "checkpoint shard"
        ),
        "exclude or replace the node, then resume from the checkpoint before the onset step",
    ],
    "healthy": [],
    "insufficient-data": [
        (
            "log more steps (or the full log) so the {spike_window_steps}- and "
            "{divergence_window_steps}-step windows can be judged"
        )
    ],
}

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
    "weight-norm": (
        "a weight norm changed more than {weight_norm_ratio:g}x: weight decay too low or too high"
    ),
    "grad-norm-rising": (
        "the grad-norm moving average rises: the landscape is getting harder (data, init drift, "
        "LR too high)"
    ),
    "log-of-zero": (
        "fp32 NaN: almost always log(0) in the loss (a probability driven to exactly 0) or 0/0 in "
        "the reduction"
    ),
    "activation-overflow": "fp16: an activation exceeded 65504",
}


def fill(text: str, thresholds: Thresholds) -> str:
    """A text with its `{field}` placeholders filled from these thresholds."""
    return text.format_map({f.name: getattr(thresholds, f.name) for f in fields(thresholds)})


def questions(thresholds: Thresholds) -> dict[str, str]:
    """Question id -> its text, with the thresholds in force."""
    return {q: fill(text, thresholds) for q, text in _QUESTIONS.items()}


def verdicts(thresholds: Thresholds) -> dict[str, tuple[str | None, str, str]]:
    """Verdict code -> (section, severity name, what it means), with the thresholds in force."""
    return {
        code: (section, severity, fill(text, thresholds))
        for code, (section, severity, text) in _VERDICTS.items()
    }


def remedies(thresholds: Thresholds) -> dict[str, list[str]]:
    """Verdict or cause -> its remedies, with the thresholds in force."""
    return {key: [fill(r, thresholds) for r in items] for key, items in _REMEDIES.items()}


def cause_texts(thresholds: Thresholds) -> dict[str, str]:
    """Cause code -> what it means, with the thresholds in force."""
    return {cause: fill(text, thresholds) for cause, text in _CAUSE_TEXT.items()}


# the texts with the default thresholds (`stab explain`)
QUESTIONS: dict[str, str] = questions(Thresholds())
VERDICTS: dict[str, tuple[str | None, str, str]] = verdicts(Thresholds())
REMEDIES: dict[str, list[str]] = remedies(Thresholds())
CAUSE_TEXT: dict[str, str] = cause_texts(Thresholds())
