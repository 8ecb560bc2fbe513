"""The kinds of the eval rules: a validation loss that went non-finite (§1) and one that rose
while the training loss fell (§4)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import COUNT, STEP, STEPS, Evidence, Spec, measure, over, two
from stabilitycli.core.records import dataclass

EVAL_NONFINITE_RULE = "eval-nonfinite"
OVERFITTING_RULE = "overfitting"


@dataclass(frozen=True, eq=False, repr=False)
class EvalNonfiniteEvidence(Evidence):
    """Which eval series went non-finite, where first, and how many of its evaluations."""

    series: str = field(metadata=measure(None))  # the canonical name (eval_loss, or its own key)
    key: str = field(metadata=measure(None))  # the key the log wrote it under
    first_step: int = field(metadata=measure(STEP))
    count: int = field(metadata=measure(COUNT))  # non-finite evaluations
    points: int = field(metadata=measure(COUNT))  # evaluations logged
    last_finite: float | None = field(metadata=measure(Spec("point", step="last_finite_step")))
    last_finite_step: int | None = field(metadata=measure(STEP))
    train_loss_finite: bool = field(metadata=measure(None))  # the training loss stayed finite
    # the keys of other eval series that went non-finite too, comma-separated ("" for none)
    also: str = field(default="", metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class OverfittingEvidence(Evidence):
    """The eval minimum (the onset), the eval level at the end, the noise it is measured in,
    and what the training loss did over the same steps."""

    series: str = field(metadata=measure(None))
    key: str = field(metadata=measure(None))
    onset_step: int = field(metadata=measure(STEP))  # the step of the lowest eval loss
    eval_at_onset: float = field(metadata=measure(Spec("point", step="onset_step")))
    eval_end: float = field(metadata=measure(Spec("point", step="end_step")))
    end_step: int = field(metadata=measure(STEP))  # the last evaluation
    rising_evals: int = field(metadata=measure(COUNT))  # evals after the onset above the bar
    evals_after_onset: int = field(metadata=measure(COUNT))
    evals: int = field(metadata=measure(COUNT))  # finite evaluations in the log
    # the noise of the eval loss, from its successive differences over these evaluations
    eval_sigma: float = field(metadata=measure(over("sigma", *two("sigma_steps"))))
    sigma_steps: list[int] = field(metadata=measure(STEPS))
    bar: float = field(metadata=measure(Spec("bound")))  # the level every last eval is above
    train_start: float = field(
        metadata=measure(over("median", *two("train_start_steps"), metric="loss"))
    )
    train_end: float = field(
        metadata=measure(over("median", *two("train_end_steps"), metric="loss"))
    )
    train_start_steps: list[int] = field(metadata=measure(STEPS))
    train_end_steps: list[int] = field(metadata=measure(STEPS))
    train_drop: float = field(metadata=measure(Spec("relative_change", "loss")))


EVAL_NONFINITE = FindingKind(
    code="eval-nonfinite",
    rule=EVAL_NONFINITE_RULE,
    section="1",
    severity=Severity.ERROR,
    meaning="a logged eval/validation loss went NaN or Inf while it was being evaluated",
    todo="run the evaluation alone on the checkpoint of that step: an empty or fully masked eval "
    "batch (0/0), an fp16 eval overflow, or weights that are already broken",
    why="a non-finite eval loss means the model cannot be judged (or is already broken) from "
    "that step on, and checkpoint selection by eval loss silently picks the wrong one",
    question="Q1.1",
    evidence_type=EvalNonfiniteEvidence,
)
OVERFITTING = FindingKind(
    code="overfitting",
    rule=OVERFITTING_RULE,
    section="4",
    severity=Severity.WARNING,
    meaning="the eval loss rose over its last {overfit_rising_evals} evaluations or more, each "
    "above its minimum + {overfit_sigma:g} sigma of its own noise (and {overfit_rel_floor:.0%} "
    "of it), while the training loss fell over the same steps",
    todo="keep the checkpoint at the eval minimum; stop earlier, or add data, regularisation or "
    "a lower LR",
    why="past the eval minimum every step makes the model worse on held-out data while the "
    "training loss says it improves",
    question="Q4.1",
    evidence_type=OverfittingEvidence,
)
