"""The kinds of rule `loss-scale` (§3): what the fp16 loss scaler did about overflows."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    ABSENT,
    COUNT,
    DURATION,
    FRACTION,
    STEP,
    STEPS,
    Evidence,
    Spec,
    measure,
)
from stabilitycli.core.records import dataclass

RULE = "loss-scale"


_STEPS = measure(STEPS)
# the scale right after each halving, at the halving's step
_AFTER_HALVING = measure(Spec("point", step="halving_steps[]", each=True))


# The scaler's history closes the evidence of every kind that reads the loss scale: every
# overflow onset and every halving, so the story of a collapse starts where it did.


@dataclass(frozen=True, eq=False, repr=False)
class LineOrderNumbers(Evidence):
    """The steps of a loss-scale finding that a reader numbered by the order of messages that
    print none (`SourceInfo.line_order_steps`), and how: numbers, not optimizer steps.
    Keyword-only, so that each kind's own fields keep their order; absent for a log whose
    messages all had a step."""

    step_numbering: str = field(default=ABSENT, kw_only=True, metadata=measure(None))
    line_order_steps: list[int] = field(default=ABSENT, kw_only=True, metadata=_STEPS)


@dataclass(frozen=True, eq=False, repr=False)
class Fp16OverflowEvidence(LineOrderNumbers):
    overflows: int = field(metadata=measure(COUNT))  # the ledger's total (a lower bound when
    overflows_exact: bool = field(metadata=measure(None))  # ... this is false)
    rate: float = field(metadata=measure(FRACTION))  # overflow steps per step of the log
    first_step: int = field(metadata=measure(STEP))
    spike_step: int | None = field(metadata=measure(STEP))  # the loss spike it came with
    # why the scaler is not absorbing them: unabsorbed | at-spike | failing | loss-jump
    reason: str = field(default="unabsorbed", metadata=measure(None))
    # a failing scaler: overflows on `window_overflows` of the `window_steps` steps from
    # `window_first_step` to the end of the log, the scale from `scale_from` to `scale_to`
    window_first_step: int | None = field(default=None, metadata=measure(STEP))
    window_steps: int | None = field(default=None, metadata=measure(DURATION))
    window_overflows: int | None = field(default=None, metadata=measure(COUNT))
    scale_from: float | None = field(default=None, metadata=measure(Spec("max")))
    scale_to: float | None = field(default=None, metadata=measure(Spec("point")))
    # an overflow at a loss jump: the loss logged before it and at it
    jump_step: int | None = field(default=None, metadata=measure(STEP))
    loss_before: float | None = field(default=None, metadata=measure(Spec("point")))
    loss_at: float | None = field(default=None, metadata=measure(Spec("point", step="jump_step")))


@dataclass(frozen=True, eq=False, repr=False)
class LossScaleHalvingEvidence(LineOrderNumbers):
    drops: int = field(metadata=measure(COUNT))
    rises: int = field(metadata=measure(COUNT))
    first_drop_step: int = field(metadata=measure(STEP))
    scale_min: float = field(metadata=measure(Spec("min")))
    scale_final: float = field(metadata=measure(Spec("point")))  # its step is not in the evidence
    drop_steps: list[int] = field(metadata=_STEPS)  # the first 20
    overflow_steps: list[int] = field(metadata=_STEPS)
    halving_steps: list[int] = field(metadata=_STEPS)
    halving_scales: list[float] = field(metadata=_AFTER_HALVING)
    # the halvings the drops took (a 16x drop between two logged points: at least 4)
    halvings: int = field(default=0, metadata=measure(COUNT))
    halvings_exact: bool = field(default=True, metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class LossScaleStaticEvidence(LineOrderNumbers):
    # constant over the log, so also its value at the first overflow
    scale: float = field(metadata=measure(Spec("point", step="@step")))
    overflows: int = field(metadata=measure(COUNT))
    overflow_steps: list[int] = field(metadata=_STEPS)
    halving_steps: list[int] = field(metadata=_STEPS)
    halving_scales: list[float] = field(metadata=_AFTER_HALVING)


@dataclass(frozen=True, eq=False, repr=False)
class LossScaleCollapsedEvidence(LineOrderNumbers):
    scale_min: float = field(metadata=measure(Spec("min")))  # over the whole log
    scale_max: float = field(metadata=measure(Spec("max")))
    first_step_below: int = field(metadata=measure(STEP))
    first_overflow_step: int | None = field(metadata=measure(STEP))
    first_halving_step: int | None = field(metadata=measure(STEP))
    overflows: int = field(metadata=measure(COUNT))
    overflow_steps: list[int] = field(metadata=_STEPS)
    halving_steps: list[int] = field(metadata=_STEPS)
    halving_scales: list[float] = field(metadata=_AFTER_HALVING)
    halvings: int = field(default=0, metadata=measure(COUNT))
    halvings_exact: bool = field(default=True, metadata=measure(None))


FP16_OVERFLOW = FindingKind(
    code="fp16-overflow",
    rule=RULE,
    section="3",
    severity=Severity.ERROR,
    meaning="fp16 overflows that no loss scaler absorbs: none is seen, or it is failing (overflow "
    "on most of the last steps with the scale falling and never regrowing), or an overflow came "
    "with a loss spike or jump",
    todo="enable dynamic loss scaling (or log the loss scale), find the op that overflows, or "
    "move to bf16",
    why="an overflow no scaler absorbs writes Inf into the update: the step is lost at best, "
    "the weights at worst",
    question="Q3.1",
    incident="fp16 overflow",
    evidence_type=Fp16OverflowEvidence,
)
LOSS_SCALE_HALVING = FindingKind(
    code="loss-scale-halving",
    rule=RULE,
    section="3",
    severity=Severity.INFO,
    meaning="the fp16 loss scaler halved its scale after overflows and the overflows stopped: the "
    "scaler doing its job",
    todo="nothing, as long as the scale stays at or above {min_loss_scale:g}",
    why="healthy back-off is normal in fp16; it is listed so that a later collapse can be "
    "told from it",
    question="Q3.2",
    evidence_type=LossScaleHalvingEvidence,
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
    evidence_type=LossScaleStaticEvidence,
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
    evidence_type=LossScaleCollapsedEvidence,
)
