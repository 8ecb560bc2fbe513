"""The kinds of rule `divergence` (§4): a lasting rise, a drift, a rise undone, and the grad
norm's rising trend."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    ABSENT,
    COUNT,
    LABEL,
    STEP,
    STEPS,
    By,
    EachItem,
    Evidence,
    Spec,
    measure,
    over,
    two,
)
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.schedule import LR_INCREASING

RULE = "divergence"
# the kind, and the cause of a rise it stands for
_GRAD_NORM_RISING = "grad-norm-rising"
# each cause type's `cause` field is its name, written first in the JSON (keyword-only: it
# has the default every instance shares)
_NAME = measure(None)


# ---------------------------------------------------------------- the causes of a rise


@dataclass(frozen=True, eq=False, repr=False)
class RisingLr(Evidence):
    """Q4.2: the LR rose over the window (within warmup: the peak LR is too high)."""

    cause: str = field(default=LR_INCREASING.code, kw_only=True, metadata=_NAME)
    lr_start: float = field(metadata=measure(Spec("point", "lr", step="lr_start_step")))
    lr_end: float = field(metadata=measure(Spec("point", "lr", step="lr_end_step")))
    within_warmup: bool = field(metadata=measure(None))
    lr_start_step: int = field(metadata=measure(STEP))
    lr_end_step: int = field(metadata=measure(STEP))


@dataclass(frozen=True, eq=False, repr=False)
class WeightNormMove(Evidence):
    """Q4.3: a parameter group's norm moved more than the ratio over the window."""

    cause: str = field(default="weight-norm", kw_only=True, metadata=_NAME)
    series: str = field(metadata=measure(None))  # the parameter-norm series
    min: float = field(
        metadata=measure(
            over("min", *two("steps"), step="min_step", metric=None, metric_key="series")
        )
    )
    max: float = field(
        metadata=measure(
            over("max", *two("steps"), step="max_step", metric=None, metric_key="series")
        )
    )
    direction: str = field(metadata=measure(None))  # grows | collapses
    min_step: int = field(metadata=measure(STEP))
    max_step: int = field(metadata=measure(STEP))
    steps: list[int] = field(metadata=measure(STEPS))


@dataclass(frozen=True, eq=False, repr=False)
class RisingGradNorm(Evidence):
    """Q4.4: the grad norm's mean over the last quarter of the points is above the first's.
    Also the evidence of the grad-norm-rising finding."""

    cause: str = field(default=_GRAD_NORM_RISING, kw_only=True, metadata=_NAME)
    grad_norm_start: float = field(
        metadata=measure(over("mean", *two("grad_norm_start_steps"), metric="grad_norm"))
    )
    grad_norm_end: float = field(
        metadata=measure(over("mean", *two("grad_norm_end_steps"), metric="grad_norm"))
    )
    grad_norm_start_steps: list[int] = field(metadata=measure(STEPS))
    grad_norm_end_steps: list[int] = field(metadata=measure(STEPS))


RiseCause = RisingLr | WeightNormMove | RisingGradNorm
_CAUSE_TYPES: tuple[type[Evidence], ...] = (RisingLr, WeightNormMove, RisingGradNorm)


def _cause_name(cause_type: type[Evidence]) -> str:
    return str(cause_type.__dataclass_fields__["cause"].default)


# ---------------------------------------------------------------- the findings' evidence


@dataclass(frozen=True, eq=False, repr=False)
class TrendEvidence(Evidence):
    """A lasting rise (divergence or plateau): each level named by the steps it is a
    statistic of (the trend bins' medians, `bin_points` points each)."""

    start_step: int = field(metadata=measure(STEP))
    end_step: int = field(metadata=measure(STEP))
    z: float = field(metadata=measure(over("trend_z", "window_start_step", "end_step")))
    window_start_step: int = field(metadata=measure(STEP))
    # the median of the one fine bin the rise begins in; its last step is in the evidence
    # only when the rise is measured from it (rise_from_steps)
    trough: float | None = field(
        metadata=measure(
            By(
                "rise_from_stat",
                {
                    "median": over("median", *two("rise_from_steps")),
                    "mean-of-medians": Spec("median", first_step="start_step"),
                },
            )
        )
    )
    start_level: float = field(metadata=measure(over("mean_of_medians", *two("start_level_steps"))))
    end_level: float = field(metadata=measure(over("mean_of_medians", *two("end_level_steps"))))
    rise_from_level: float = field(
        metadata=measure(
            By(
                "rise_from_stat",
                {
                    "median": over("median", *two("rise_from_steps")),
                    "mean-of-medians": over("mean_of_medians", *two("rise_from_steps")),
                },
            )
        )
    )
    rise_from_steps: list[int] | None = field(metadata=measure(STEPS))
    rise_from_stat: str = field(metadata=measure(None))  # median | mean-of-medians
    rise_to_level: float = field(metadata=measure(over("mean_of_medians", *two("rise_to_steps"))))
    rise_to_steps: list[int] | None = field(metadata=measure(STEPS))
    start_level_steps: list[int] | None = field(metadata=measure(STEPS))
    end_level_steps: list[int] | None = field(metadata=measure(STEPS))
    final_level_steps: list[int] = field(metadata=measure(STEPS))
    relative_rise: float | None = field(metadata=measure(Spec("relative_change")))
    after_min: float | None = field(
        metadata=measure(Spec("min_of_medians", last_step="final_level_steps[1]"))
    )
    # the binned series ends on the last finite loss, where final_level_steps ends
    final_loss: float = field(metadata=measure(Spec("point", step="final_level_steps[1]")))
    final_level: float = field(metadata=measure(over("mean_of_medians", *two("final_level_steps"))))
    strictly_monotone: bool = field(metadata=measure(None))
    window: str = field(metadata=measure(None))  # how the trend window was formed
    bin_points: int = field(metadata=measure(COUNT))
    causes: list[RiseCause] = field(
        metadata=measure(EachItem("cause", {_cause_name(t): t.schema() for t in _CAUSE_TYPES}))
    )
    window_shortened: bool = field(metadata=measure(None))
    # rising windows inside the divergence that fell back (folded into it, not loss-rise)
    loss_rise_windows_inside: int = field(default=ABSENT, metadata=measure(COUNT))
    folded: str = field(default=ABSENT, metadata=measure(None))
    # the noise of the bin medians was autocorrelated: z above is corrected for it (divided
    # by sqrt F(m)); the test's own z and the lag-1 autocorrelation it was corrected for
    z_uncorrected: float = field(
        default=ABSENT, metadata=measure(over("trend_z", "window_start_step", "end_step"))
    )
    noise_lag1: float = field(default=ABSENT, metadata=measure(Spec("autocorrelation", None)))
    # the onset dated by a fit of the rise's whole shape (#36): how, in words, the stretch of
    # logged steps it was fitted over, and the power p of (t - t0)^p that names the shape
    onset_fit: str = field(default=ABSENT, metadata=measure(None))
    onset_fit_steps: list[int] = field(default=ABSENT, metadata=measure(STEPS))
    onset_power: int = field(default=ABSENT, metadata=measure(LABEL))
    # ...and the first and last start from which a rise (any power) fits the log as well
    onset_range_steps: list[int] = field(default=ABSENT, metadata=measure(STEPS))


@dataclass(frozen=True, eq=False, repr=False)
class LossRiseEvidence(Evidence):
    windows: int = field(metadata=measure(COUNT))
    z: float = field(metadata=measure(over("trend_z", "@step", "@end_step")))
    rise: float = field(metadata=measure(over("difference", "@step", "@end_step")))


GRAD_NORM_RISING = FindingKind(
    code=_GRAD_NORM_RISING,
    rule=RULE,
    section="4",
    severity=Severity.WARNING,
    meaning="the grad norm's moving average is rising: the loss landscape is getting harder",
    todo="halve the learning rate if the loss rises with it; check the data stream",
    why="a grad norm that trends up is the last cause the divergence question looks for "
    "before it calls a rise causeless",
    question="Q4.4",
    evidence_type=RisingGradNorm,
)

DIVERGENCE = FindingKind(
    code="divergence",
    rule=RULE,
    section="4",
    severity=Severity.ERROR,
    meaning="the loss rose over a {divergence_window_steps}-step window and never came back to the "
    "level where the rise began",
    todo="see the verdict divergence: fix its cause and resume from the checkpoint before the rise",
    why="no NaN and no overflow warns of it: the run keeps spending compute while the loss "
    "only gets worse",
    question="Q4.1",
    incident="Divergence",
    evidence_type=TrendEvidence,
)
PLATEAU = FindingKind(
    code="plateau",
    rule=RULE,
    section="4",
    severity=Severity.WARNING,
    meaning="the loss drifted up by less than {divergence_min_rise_frac:.0%} with no cause in the "
    "LR, the weight norm or the grad norm",
    todo="check the eval loss: if it has stopped improving too, stop training or decay the LR",
    why="a run that has stopped improving spends compute for nothing; the eval loss says "
    "whether to stop",
    question="Q4.1",
    incident="Plateau",
    evidence_type=TrendEvidence,
)
LOSS_RISE = FindingKind(
    code="loss-rise",
    rule=RULE,
    section="4",
    severity=Severity.INFO,
    meaning="the loss rose over a window, then the run undid the rise: not a divergence",
    todo="nothing; it is listed so that nothing is hidden",
    why="a rise the run undid is no divergence, but a reader who sees it on a plot can tell "
    "the rule weighed it",
    question="Q4.1",
    evidence_type=LossRiseEvidence,
)
