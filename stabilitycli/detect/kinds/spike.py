"""The kinds of rule `spike` (§2): spikes, their recurring and small relatives, and the jumps
of a log too short for the spike window."""

from __future__ import annotations

from dataclasses import field, fields

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    ABSENT,
    BOUND,
    COUNT,
    DURATION,
    FRACTION,
    LABEL,
    RATIO,
    STEP,
    STEPS,
    By,
    EachItem,
    Evidence,
    Spec,
    measure,
    over,
)
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.data import DUPLICATE_BATCH

RULE = "spike"


# each cause type's `cause` field is its name, written first in the JSON (keyword-only: it
# has the default every instance shares)
_NAME = measure(None)


# ---------------------------------------------------------------- the causes of a spike


@dataclass(frozen=True, eq=False, repr=False)
class OptimizerReset(Evidence):
    """The spike began right after a resume."""

    cause: str = field(default="optimizer-reset", kw_only=True, metadata=_NAME)
    restart_step: int = field(metadata=measure(STEP))
    steps_after_restart: int = field(metadata=measure(DURATION))


@dataclass(frozen=True, eq=False, repr=False)
class RepeatedBatch(Evidence):
    """The batch at the spike repeats a recent one."""

    cause: str = field(default=DUPLICATE_BATCH.code, kw_only=True, metadata=_NAME)
    batch_id: float = field(metadata=measure(LABEL))
    repeat_of_step: int = field(metadata=measure(STEP))


@dataclass(frozen=True, eq=False, repr=False)
class LrDiscontinuity(Evidence):
    """The LR jumped just before the spike."""

    cause: str = field(default="lr-discontinuity", kw_only=True, metadata=_NAME)
    lr_step: int = field(metadata=measure(STEP))
    lr: float = field(metadata=measure(Spec("point", "lr", step="lr_step")))
    lr_before: float = field(metadata=measure(Spec("previous_point", "lr", step="lr_step")))
    relative_jump: float = field(metadata=measure(Spec("relative_change", "lr")))
    lead_steps: int = field(metadata=measure(DURATION))


@dataclass(frozen=True, eq=False, repr=False)
class LongTailToken(Evidence):
    """The pre-clip grad norm jumped just before the spike."""

    cause: str = field(default="long-tail-token", kw_only=True, metadata=_NAME)
    grad_norm_step: int = field(metadata=measure(STEP))
    grad_norm: float = field(metadata=measure(Spec("point", "grad_norm", step="grad_norm_step")))
    grad_norm_baseline: float = field(
        metadata=measure(
            By(
                "grad_norm_baseline_basis",
                {
                    None: Spec("trailing_mean", "grad_norm", step="grad_norm_step"),
                    "mean": Spec("trailing_mean", "grad_norm", step="grad_norm_step"),
                    "local-level": Spec("local_level", "grad_norm", step="grad_norm_step"),
                },
            )
        )
    )
    ratio: float = field(metadata=measure(Spec("ratio", "grad_norm")))
    lead_steps: int = field(metadata=measure(DURATION))
    # the grad-norm ratio this spike needed (a large spike needs less)
    bar: float = field(metadata=measure(Spec("bound", "grad_norm")))
    # mean: the trailing mean; local-level: where that mean lagged a falling grad norm
    grad_norm_baseline_basis: str = field(default="mean", kw_only=True, metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class LrRestart(Evidence):
    """The spike began after a planned LR restart (recognised or declared) and did not decay
    as a restart's bump does."""

    cause: str = field(default="lr-restart", kw_only=True, metadata=_NAME)
    restart_step: int = field(metadata=measure(STEP))
    lr_before: float = field(metadata=measure(Spec("previous_point", "lr", step="restart_step")))
    lr: float = field(metadata=measure(Spec("point", "lr", step="restart_step")))
    lead_steps: int = field(metadata=measure(DURATION))
    declared: bool = field(metadata=measure(None))


SpikeCause = OptimizerReset | RepeatedBatch | LrDiscontinuity | LrRestart | LongTailToken
_CAUSE_TYPES: tuple[type[Evidence], ...] = (
    OptimizerReset,
    RepeatedBatch,
    LrDiscontinuity,
    LrRestart,
    LongTailToken,
)
# the finding code a cause rests on: `--ignore CODE` drops the cause with the code
CAUSE_CODES: dict[str, str] = {
    "optimizer-reset": "restart",
    DUPLICATE_BATCH.code: DUPLICATE_BATCH.code,
    "lr-discontinuity": "lr-jump",
    "long-tail-token": "grad-norm-spike",
}


def _cause_name(cause_type: type[Evidence]) -> str:
    return next(f.default for f in fields(cause_type) if f.name == "cause")  # type: ignore[return-value]


# ---------------------------------------------------------------- one spike, as measured


@dataclass
class SpikeEvent:
    onset_step: int
    end_step: int
    peak_step: int
    points: int
    mu: float
    sigma: float
    threshold: float
    peak: float
    z: float
    recovered: bool
    recovery_step: int | None
    recovery_steps: int | None
    spike_type: int
    material: bool
    causes: list[SpikeCause] = field(default_factory=list)
    window: str = ""
    # the first loss logged recovery_window_steps or more after the peak, and its step
    after_window_loss: float | None = None
    after_window_step: int | None = None
    # the logged steps the frozen baseline (mu, sigma) was taken over
    baseline_first_step: int | None = None
    baseline_last_step: int | None = None
    recovery_level: float | None = None  # mu + recovery_sigma * sigma
    # steps after the onset the loss had to be back within (recovery_window_steps, or the
    # gap to the next logged point when that is longer)
    recovery_horizon_steps: int | None = None
    # what mu is: the window's mean, the curve's local level where the mean lagged a fall,
    # or, at a point with a grad-norm surge, the median of the points either side ("around")
    baseline_basis: str = "mean"
    # the level change (epoch boundary, LR step) the baseline window restarted at
    window_restart_step: int | None = None
    # on a rising stretch, the recovery level rises with the trend by this much a step
    recovery_slope_per_step: float | None = None
    # where sigma came from when not from the baseline steps (the first points after a level
    # change): the noise of the stretch before the change, read from the differences between
    # points allowing for a lag-1 autocorrelation (before-change-differences) or as the spread
    # around a line (before-change-line), scaled to the level since the change; or the floor.
    # At a point judged against the curve around it: from the differences between the points
    # before it (differences), or the floor where they measured less (differences-floor)
    sigma_basis: str = ABSENT
    sigma_first_step: int = ABSENT
    sigma_last_step: int = ABSENT
    sigma_noise_before: float = ABSENT  # that noise as measured, before it was scaled
    sigma_noise_lag1: float = ABSENT  # the lag-1 autocorrelation the differences allowed for
    # on a fast fall: recovery_level is the level at the onset, carried along the curve fitted
    # through the points either side of it (its shift taken out) over these steps
    recovery_curve_first_step: int = ABSENT
    recovery_curve_last_step: int = ABSENT

    @property
    def cause(self) -> str | None:
        return self.causes[0]["cause"] if self.causes else None


# ---------------------------------------------------------------- the findings' evidence


# the noise measured on the stretch before a level change
_SIGMA_BEFORE = over("sigma", "sigma_first_step", "sigma_last_step")


@dataclass(frozen=True, eq=False, repr=False)
class SpikeEvidence(Evidence):
    """A spike as the rule measured it: its frozen baseline, its peak, its recovery."""

    onset_step: int = field(metadata=measure(STEP))
    end_step: int = field(metadata=measure(STEP))
    peak_step: int = field(metadata=measure(STEP))
    points: int = field(metadata=measure(COUNT))
    mu: float = field(
        metadata=measure(
            By(
                "baseline_basis",
                {
                    # evidence written before the key existed: the mean
                    None: over("mean", "baseline_first_step", "baseline_last_step"),
                    "mean": over("mean", "baseline_first_step", "baseline_last_step"),
                    "local-level": over(
                        "local_level",
                        "baseline_first_step",
                        "baseline_last_step",
                        step="onset_step",
                    ),
                    "around": over(
                        "median_around",
                        "baseline_first_step",
                        "baseline_last_step",
                        step="onset_step",
                    ),
                },
            )
        )
    )
    sigma: float = field(
        metadata=measure(
            By(
                "sigma_basis",
                {
                    None: over("sigma", "baseline_first_step", "baseline_last_step"),
                    "floor": over("sigma", "baseline_first_step", "baseline_last_step"),
                    "before-change-differences": _SIGMA_BEFORE,
                    "before-change-line": _SIGMA_BEFORE,
                    "differences": _SIGMA_BEFORE,
                    "differences-floor": over("sigma", "baseline_first_step", "baseline_last_step"),
                },
            )
        )
    )
    baseline_basis: str = field(metadata=measure(None))  # mean | local-level | around
    threshold: float = field(metadata=measure(BOUND))
    peak: float = field(metadata=measure(Spec("peak", step="peak_step")))
    z: float = field(
        metadata=measure(over("z", "baseline_first_step", "baseline_last_step", step="peak_step"))
    )
    recovered: bool = field(metadata=measure(None))
    recovery_step: int | None = field(metadata=measure(STEP))
    recovery_steps: int | None = field(metadata=measure(DURATION))
    spike_type: int = field(metadata=measure(LABEL))  # 1 recoverable, 2 persistent, 3 divergent
    causes: list[SpikeCause] = field(
        metadata=measure(EachItem("cause", {_cause_name(t): t.schema() for t in _CAUSE_TYPES}))
    )
    window: str = field(metadata=measure(None))  # how the baseline window was formed
    # the first loss logged recovery_window_steps or more after the peak
    after_window_loss: float | None = field(
        metadata=measure(Spec("point", step="after_window_step"))
    )
    after_window_step: int | None = field(metadata=measure(STEP))
    baseline_first_step: int | None = field(metadata=measure(STEP))
    baseline_last_step: int | None = field(metadata=measure(STEP))
    recovery_level: float | None = field(metadata=measure(BOUND))
    recovery_horizon_steps: int | None = field(metadata=measure(DURATION))
    window_restart_step: int | None = field(metadata=measure(STEP))
    recovery_slope_per_step: float | None = field(
        metadata=measure(over("slope", "baseline_first_step", "baseline_last_step"))
    )
    # after a level change (SpikeEvent says what each is); absent elsewhere
    sigma_basis: str = field(default=ABSENT, metadata=measure(None))
    sigma_first_step: int = field(default=ABSENT, metadata=measure(STEP))
    sigma_last_step: int = field(default=ABSENT, metadata=measure(STEP))
    sigma_noise_before: float = field(default=ABSENT, metadata=measure(_SIGMA_BEFORE))
    sigma_noise_lag1: float = field(default=ABSENT, metadata=measure(Spec("autocorrelation")))
    recovery_curve_first_step: int = field(default=ABSENT, metadata=measure(STEP))
    recovery_curve_last_step: int = field(default=ABSENT, metadata=measure(STEP))

    @classmethod
    def of(cls, event: SpikeEvent) -> SpikeEvidence:
        return cls(**{f.name: getattr(event, f.name) for f in fields(cls)})


@dataclass(frozen=True, eq=False, repr=False)
class RecurringSpikesEvidence(Evidence):
    count: int = field(metadata=measure(COUNT))
    steps: list[int] = field(metadata=measure(STEPS))
    # peak over the trailing mean, the smallest and the largest of the group
    ratio_min: float | None = field(metadata=measure(RATIO))
    ratio_max: float | None = field(metadata=measure(RATIO))
    z_min: float = field(metadata=measure(Spec("z")))
    z_max: float = field(metadata=measure(Spec("z")))
    recovered_share: float = field(metadata=measure(FRACTION))
    longest_recovery_steps: int = field(metadata=measure(DURATION))


@dataclass(frozen=True, eq=False, repr=False)
class BlipEvidence(Evidence):
    count: int = field(metadata=measure(COUNT))
    steps: list[int] = field(metadata=measure(STEPS))  # the first 20
    largest_z: float = field(metadata=measure(Spec("z")))


@dataclass(frozen=True, eq=False, repr=False)
class ScheduleRestartEvidence(Evidence):
    """A loss bump after a planned LR restart that decayed."""

    restart_step: int = field(metadata=measure(STEP))
    step_before: int = field(metadata=measure(STEP))
    lr_before: float = field(metadata=measure(Spec("point", "lr", step="step_before")))
    lr_after: float = field(metadata=measure(Spec("point", "lr", step="restart_step")))
    baseline_mean: float = field(
        metadata=measure(over("mean", "baseline_first_step", "baseline_last_step"))
    )
    baseline_first_step: int | None = field(metadata=measure(STEP))
    baseline_last_step: int | None = field(metadata=measure(STEP))
    peak: float = field(metadata=measure(Spec("peak", step="peak_step")))
    peak_step: int = field(metadata=measure(STEP))
    bump: float = field(metadata=measure(Spec("difference")))  # peak - baseline mean
    recovery_step: int = field(metadata=measure(STEP))
    decay_steps: int = field(metadata=measure(DURATION))  # restart step -> back to baseline
    decay_limit_steps: int = field(metadata=measure(DURATION))
    declared: bool = field(metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class JumpEvidence(Evidence):
    """One jump between two logged points of a log too short for the spike window."""

    from_step: int = field(metadata=measure(STEP))
    to_step: int = field(metadata=measure(STEP))
    before: float = field(metadata=measure(Spec("point", step="from_step")))
    after: float = field(metadata=measure(Spec("point", step="to_step")))
    ratio: float = field(metadata=measure(RATIO))
    # the grad norm jumped at the same step: one event, told once (with the loss's jump)
    grad_norm_ratio: float = field(
        default=ABSENT, metadata=measure(Spec("ratio", metric="grad_norm"))
    )


SPIKE = FindingKind(
    code="spike",
    rule=RULE,
    section="2",
    severity=Severity.ERROR,  # WARNING when it recovered
    meaning="a loss spike: the loss rose above the trailing {spike_window_steps}-step mean + "
    "{spike_sigma:g} sigma and met the materiality bar",
    todo="if it came back within {recovery_window_steps} steps, fix its cause; if not, also "
    "reload the last checkpoint before it (see spike-recoverable and spike-persistent)",
    why="a spike that does not come back leaves the optimizer moments poisoned; one that does "
    "still has a cause that will strike again",
    question="Q2.1",
    incident="Loss spike",
    marker="spike",
    evidence_type=SpikeEvidence,
)
RECURRING_SPIKES = FindingKind(
    code="recurring-spikes",
    rule=RULE,
    section="2",
    severity=Severity.WARNING,
    meaning="several one-point spikes of one character with no evident cause, reported as one",
    todo="log the batch id and per-layer grad norms so that the batches behind them can be found",
    why="told one by one they would bury the rest of the report; together they say the data "
    "holds batches the model keeps stumbling on",
    question="Q2.1",
    incident="Loss spike",
    evidence_type=RecurringSpikesEvidence,
)
BLIP = FindingKind(
    code="blip",
    rule=RULE,
    section="2",
    severity=Severity.INFO,
    meaning="one isolated, moderate point above the spike bar with no cause: noise, not a spike",
    todo="nothing; it is listed so that nothing is hidden",
    why="it costs nothing, but a reader who sees the bump on a plot can tell the rule saw it "
    "and judged it noise",
    question="Q2.1",
    marker="blip",
    evidence_type=BlipEvidence,
)
LOSS_JUMP = FindingKind(
    code="loss-jump",
    rule=RULE,
    section="2",
    severity=Severity.WARNING,
    meaning="in a log too short for the spike window, the loss jumped "
    "{short_log_loss_jump_ratio:g}x or more between two points",
    todo="log more steps so that the spike rule can judge it; meanwhile look at that step's batch",
    why="a short log cannot be judged against a noise band, but a jump that large is worth a "
    "look before the run goes on",
    question="Q2.1",
    evidence_type=JumpEvidence,
)
GRAD_NORM_JUMP = FindingKind(
    code="grad-norm-jump",
    rule=RULE,
    section="2",
    severity=Severity.WARNING,
    meaning="in a log too short for the spike window, the grad norm jumped "
    "{short_log_grad_norm_jump_ratio:g}x or more between two points",
    todo="log more steps so that the spike rule can judge it",
    why="in a short log a grad-norm jump is the only early sign of a spike the spike rule "
    "cannot yet judge",
    question="Q2.3",
    evidence_type=JumpEvidence,
)
SCHEDULE_RESTART = FindingKind(
    code="schedule-restart",
    rule=RULE,
    section="2",
    severity=Severity.INFO,
    meaning="the loss bumped after a planned LR restart (warm restarts recognised from the LR, "
    "or declared in planned_lr_restart_steps) and decayed back to its baseline",
    todo="nothing: a warm restart raises the loss for a while by design; it is listed so that "
    "the bump on a plot is accounted for",
    why="a restart's bump that decays is the schedule working; one that does not decay is "
    "reported as a spike caused by the restart",
    question="Q2.1",
    marker="restart",
    evidence_type=ScheduleRestartEvidence,
)
