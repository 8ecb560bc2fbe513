"""The kinds of the schedule rules: `lr-jump`, `grad-norm-spike` (§2), `lr-increasing` and
`weight-norm-change` (§4)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import COUNT, RATIO, STEP, STEPS, Evidence, Spec, measure
from stabilitycli.core.records import dataclass


@dataclass(frozen=True, eq=False, repr=False)
class LrJumpEvidence(Evidence):
    lr_before: float = field(metadata=measure(Spec("point", step="step_before")))
    lr_after: float = field(metadata=measure(Spec("point", step="@end_step")))
    relative_jump: float = field(metadata=measure(Spec("relative_change")))
    step_before: int = field(metadata=measure(STEP))
    rises: int = field(metadata=measure(COUNT))  # consecutive rising points in the jump


@dataclass(frozen=True, eq=False, repr=False)
class GradNormSpikeEvidence(Evidence):
    count: int = field(metadata=measure(COUNT))
    steps: list[int] = field(metadata=measure(STEPS))  # the first 20
    largest_step: int = field(metadata=measure(STEP))
    largest: float = field(metadata=measure(Spec("peak", step="largest_step")))
    baseline_median: float = field(metadata=measure(Spec("trailing_median", step="largest_step")))
    ratio: float = field(metadata=measure(RATIO))


@dataclass(frozen=True, eq=False, repr=False)
class LrIncreasingEvidence(Evidence):
    lr_before: float = field(metadata=measure(Spec("point", step="lr_before_step")))
    lr_before_step: int = field(metadata=measure(STEP))
    lr_after: float = field(metadata=measure(Spec("point", step="@end_step")))
    warmup_end_step: float = field(metadata=measure(STEP))  # estimated: may fall between steps


@dataclass(frozen=True, eq=False, repr=False)
class WeightNormChangeEvidence(Evidence):
    ratio: float = field(metadata=measure(RATIO))
    # the norm last logged at or before step - divergence_window_steps
    before: float = field(metadata=measure(Spec("point", step="before_step")))
    before_step: int = field(metadata=measure(STEP))
    after: float = field(metadata=measure(Spec("point", step="@step")))


LR_JUMP = FindingKind(
    code="lr-jump",
    rule="lr-jump",
    section="2",
    severity=Severity.WARNING,
    meaning="the learning rate changed abruptly between two logged points",
    todo="check that the schedule meant it: a resume that lost the scheduler state, or a "
    "warmup restarted, jumps the LR",
    why="an LR that jumps where the schedule says it should not is a schedule or resume bug, "
    "and a jump just before a spike is that spike's cause",
    question="Q2.3",
    evidence_type=LrJumpEvidence,
)
GRAD_NORM_SPIKE = FindingKind(
    code="grad-norm-spike",
    rule="grad-norm-spike",
    section="2",
    severity=Severity.INFO,
    meaning="the grad norm went {grad_norm_outlier_ratio:g}x or more above its trailing "
    "median, with or without a loss spike",
    todo="inspect that step's batch for unusual or long-tail samples (rare tokens, for a language "
    "model); clipping absorbs one, a series of them needs stratified batching",
    why="a grad-norm outlier is the first sign of a batch the model cannot digest, often a "
    "step before the loss shows it",
    question="Q2.3",
    evidence_type=GradNormSpikeEvidence,
)
LR_INCREASING = FindingKind(
    code="lr-increasing",
    rule="lr-increasing",
    section="4",
    severity=Severity.WARNING,
    meaning="the learning rate rises after warmup",
    todo="fix the schedule: a cosine written as an inverse cosine, or a warmup that never ends",
    why="an LR that keeps rising after warmup drives the loss up sooner or later: it is the "
    "first cause the divergence question looks for",
    question="Q4.2",
    evidence_type=LrIncreasingEvidence,
)
WEIGHT_NORM_CHANGE = FindingKind(
    code="weight-norm-change",
    rule="weight-norm-change",
    section="4",
    severity=Severity.WARNING,
    meaning="a parameter group's weight norm changed more than {weight_norm_ratio:g}x within "
    "{divergence_window_steps} steps",
    todo="change the weight decay by 2x: raise it if the norm grew, lower it if it collapsed",
    why="weights that grow or shrink that fast point at the weight decay, and a loss that "
    "rises with them will not come back by itself",
    question="Q4.3",
    evidence_type=WeightNormChangeEvidence,
)
