"""The kinds of rule `spike` (§2): spikes, their recurring and small relatives, and the jumps
of a log too short for the spike window."""

from __future__ import annotations

from collections.abc import Mapping

from stabilitycli.detect.kinds.data import DUPLICATE_BATCH
from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import (
    BOUND,
    COUNT,
    DURATION,
    FRACTION,
    LABEL,
    RATIO,
    STEP,
    STEPS,
    EachItem,
    Schema,
    Spec,
    over,
)

RULE = "spike"

# what each cause of a spike states, by its `cause` value
_CAUSES: Mapping[str, Schema] = {
    "optimizer-reset": {"restart_step": STEP, "steps_after_restart": DURATION},
    DUPLICATE_BATCH.code: {"batch_id": LABEL, "repeat_of_step": STEP},
    "lr-discontinuity": {
        "lr_step": STEP,
        "lr": Spec("point", "lr", step="lr_step"),
        "lr_before": Spec("previous_point", "lr", step="lr_step"),
        "relative_jump": Spec("relative_change", "lr"),
        "lead_steps": DURATION,
    },
    "long-tail-token": {
        "grad_norm_step": STEP,
        "grad_norm": Spec("point", "grad_norm", step="grad_norm_step"),
        "grad_norm_baseline": Spec("trailing_mean", "grad_norm", step="grad_norm_step"),
        "ratio": Spec("ratio", "grad_norm"),
        "lead_steps": DURATION,
        "bar": Spec("bound", "grad_norm"),  # the grad-norm ratio this spike needed
    },
}

_JUMP: Schema = {
    "from_step": STEP,
    "to_step": STEP,
    "before": Spec("point", step="from_step"),
    "after": Spec("point", step="to_step"),
    "ratio": RATIO,
}

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
    evidence={
        "onset_step": STEP,
        "end_step": STEP,
        "peak_step": STEP,
        "baseline_first_step": STEP,
        "baseline_last_step": STEP,
        "recovery_step": STEP,
        "points": COUNT,
        "mu": over("mean", "baseline_first_step", "baseline_last_step"),
        "sigma": over("sigma", "baseline_first_step", "baseline_last_step"),
        "threshold": BOUND,
        "recovery_level": BOUND,
        "peak": Spec("peak", step="peak_step"),
        "z": over("z", "baseline_first_step", "baseline_last_step", step="peak_step"),
        "recovery_steps": DURATION,
        "recovery_horizon_steps": DURATION,
        "spike_type": LABEL,
        # the first loss logged recovery_window_steps or more after the peak
        "after_window_loss": Spec("point", step="after_window_step"),
        "after_window_step": STEP,
        "causes": EachItem("cause", _CAUSES),
    },
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
    evidence={
        "count": COUNT,
        "steps": STEPS,
        "ratio_min": RATIO,  # peak over the trailing mean, the smallest of the group
        "ratio_max": RATIO,
        "z_min": Spec("z"),
        "z_max": Spec("z"),
        "recovered_share": FRACTION,
        "longest_recovery_steps": DURATION,
    },
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
    evidence={"count": COUNT, "steps": STEPS, "largest_z": Spec("z")},
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
    evidence=_JUMP,
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
    evidence=_JUMP,
)
