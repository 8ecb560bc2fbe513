"""The kinds of rule `loss-scale` (§3): what the fp16 loss scaler did about overflows."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import COUNT, FRACTION, STEP, STEPS, Schema, Spec

RULE = "loss-scale"

_HISTORY: Schema = {
    "overflow_steps": STEPS,
    "halving_steps": STEPS,
    # the scale right after each halving, at the halving's step
    "halving_scales": Spec("point", step="halving_steps[]", each=True),
}

FP16_OVERFLOW = FindingKind(
    code="fp16-overflow",
    rule=RULE,
    section="3",
    severity=Severity.ERROR,
    meaning="fp16 overflows that the log does not show a loss scaler absorbing",
    todo="enable dynamic loss scaling (or log the loss scale), find the op that overflows, or "
    "move to bf16",
    why="an overflow no scaler absorbs writes Inf into the update: the step is lost at best, "
    "the weights at worst",
    question="Q3.1",
    incident="fp16 overflow",
    evidence={
        "overflows": COUNT,
        "rate": FRACTION,
        "first_step": STEP,
        "spike_step": STEP,
    },
)
LOSS_SCALE_HALVING = FindingKind(
    code="loss-scale-halving",
    rule=RULE,
    section="3",
    severity=Severity.INFO,
    meaning="the fp16 loss scaler halved its scale after overflows and training went on: the "
    "scaler doing its job",
    todo="nothing, as long as the scale stays at or above {min_loss_scale:g}",
    why="healthy back-off is normal in fp16; it is listed so that a later collapse can be "
    "told from it",
    question="Q3.2",
    evidence={
        "drops": COUNT,
        "rises": COUNT,
        "first_drop_step": STEP,
        "scale_min": Spec("min"),
        "scale_final": Spec("point"),  # the last one logged: that step is not in the evidence
        "drop_steps": STEPS,
        **_HISTORY,
    },
)
LOSS_SCALE_STATIC = FindingKind(
    code="loss-scale-static",
    rule=RULE,
    section="3",
    severity=Severity.ERROR,
    meaning="overflows happened while the loss scale stayed constant: dynamic loss scaling is off",
    todo="turn on dynamic loss scaling, or move to bf16",
    why="with a fixed scale every overflow is skipped or written into the weights, and nothing "
    "lowers the scale to stop the next one",
    question="Q3.2",
    incident="Static loss scale",
    evidence={
        # constant over the log, so also its value at the first overflow
        "scale": Spec("point", step="@step"),
        "overflows": COUNT,
        **_HISTORY,
    },
)
LOSS_SCALE_COLLAPSED = FindingKind(
    code="loss-scale-collapsed",
    rule=RULE,
    section="3",
    severity=Severity.ERROR,
    meaning="the fp16 loss scale fell below {min_loss_scale:g}: overflow on nearly every step",
    todo="find the op that overflows, halve the learning rate, or move to bf16; resume from "
    "before the overflows began",
    why="below that scale small gradients underflow to zero, so the updates since the collapse "
    "have lost their signal",
    question="Q3.2",
    incident="Loss-scale collapse",
    evidence={
        "scale_min": Spec("min"),  # over the whole log
        "scale_max": Spec("max"),
        "first_step_below": STEP,
        "first_overflow_step": STEP,
        "first_halving_step": STEP,
        "overflows": COUNT,
        **_HISTORY,
    },
)
