"""The kinds of the learning rules (spec §8): a run that never learned, and a loss that
collapsed to zero."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    ABSENT,
    BOUND,
    COUNT,
    FRACTION,
    LABEL,
    RATIO,
    STEP,
    STEPS,
    Evidence,
    Spec,
    measure,
    over,
    two,
)
from stabilitycli.core.records import dataclass


@dataclass(frozen=True, eq=False, repr=False)
class NoLearningEvidence(Evidence):
    """What held of the three tests (no decrease, chance level, vanished grad norm), each
    level named by the steps it is a median over."""

    first_level: float = field(metadata=measure(over("median", *two("first_steps"))))
    last_level: float = field(metadata=measure(over("median", *two("last_steps"))))
    first_steps: list[int] = field(metadata=measure(STEPS))
    last_steps: list[int] = field(metadata=measure(STEPS))
    # the robust sigma of the loss's first differences over the judged points, / sqrt(2)
    sigma: float = field(metadata=measure(over("sigma", "first_steps[0]", "last_steps[1]")))
    decrease_sigmas: float | None = field(metadata=measure(RATIO))
    no_decrease: bool = field(metadata=measure(None))
    # why the decrease was not judged (a late start): said, never a finding of its own
    start_not_judged: str = field(default=ABSENT, metadata=measure(None))
    warmup_end_step: int = field(default=ABSENT, metadata=measure(STEP))
    vocab_size: int = field(default=ABSENT, metadata=measure(LABEL))
    chance_level: float = field(default=ABSENT, metadata=measure(BOUND))
    at_chance: bool = field(default=ABSENT, metadata=measure(None))
    grad_norm_vanished_frac: float = field(default=ABSENT, metadata=measure(FRACTION))
    grad_norm_median: float = field(
        default=ABSENT,
        metadata=measure(over("median", *two("grad_norm_steps"), metric="grad_norm")),
    )
    grad_norm_steps: list[int] = field(default=ABSENT, metadata=measure(STEPS))
    grad_norm_vanished: bool = field(default=ABSENT, metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class CollapseEvidence(Evidence):
    """The fall: the level before it, the last point still near it, the first point down."""

    level_before: float = field(metadata=measure(over("median", *two("level_steps"))))
    level_steps: list[int] = field(metadata=measure(STEPS))
    value_before: float = field(metadata=measure(Spec("point", step="step_before")))
    step_before: int = field(metadata=measure(STEP))
    value: float = field(metadata=measure(Spec("point", step="@step")))
    fall_ratio: float = field(metadata=measure(RATIO))  # level_before / value (inf at 0.0)
    points_taken: int = field(metadata=measure(COUNT))  # logged points from step_before
    points_after: int = field(metadata=measure(COUNT))  # logged points after the collapse
    points_after_near_zero: int = field(metadata=measure(COUNT))
    exact_zeros: int = field(metadata=measure(COUNT))


NO_LEARNING = FindingKind(
    code="no-learning",
    rule="no-learning",
    section="4",
    severity=Severity.WARNING,
    meaning="the loss never materially fell below its first window (in units of its own noise), "
    "sits at the chance level ln V, or the grad norm vanished while the loss stayed flat",
    todo="check that the optimizer steps at all (LR not zero, parameters not frozen, "
    "gradients reaching the weights), the labels and the loss mask",
    why="a run that is not learning spends all of its compute for nothing, and no NaN, spike "
    "or rise warns of it",
    question="Q4.4",
    incident="Never learned",
    evidence_type=NoLearningEvidence,
)

LOSS_COLLAPSE = FindingKind(
    code="loss-collapse",
    rule="loss-collapse",
    section="1",
    severity=Severity.ERROR,
    meaning="the loss fell {collapse_min_ratio:g}x or more within {collapse_max_points} logged "
    "points to near zero (or exactly 0.0)",
    todo="check for label leakage (the target visible in the input), a loss mask that drops "
    "every token, and a NaN logged as 0",
    why="no model learns a real task that fast: a loss at zero usually means the loss no longer "
    "measures the task, and every step after it trains on nothing",
    question="Q1.1",
    incident="Loss collapse",
    evidence_type=CollapseEvidence,
)
