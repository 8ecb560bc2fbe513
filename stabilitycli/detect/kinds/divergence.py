"""The kinds of rule `divergence` (§4): a lasting rise, a drift, a rise undone, and the grad
norm's rising trend."""

from __future__ import annotations

from collections.abc import Mapping

from stabilitycli.detect.kinds.schedule import LR_INCREASING
from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import (
    COUNT,
    STEP,
    STEPS,
    By,
    EachItem,
    Schema,
    Spec,
    over,
    two,
)

RULE = "divergence"

_GRAD_NORM_RISING: Schema = {
    "grad_norm_start": over("mean", *two("grad_norm_start_steps"), metric="grad_norm"),
    "grad_norm_end": over("mean", *two("grad_norm_end_steps"), metric="grad_norm"),
    "grad_norm_start_steps": STEPS,
    "grad_norm_end_steps": STEPS,
}

GRAD_NORM_RISING = FindingKind(
    code="grad-norm-rising",
    rule=RULE,
    section="4",
    severity=Severity.WARNING,
    meaning="the grad norm's moving average is rising: the loss landscape is getting harder",
    todo="halve the learning rate if the loss rises with it; check the data stream",
    why="a grad norm that trends up is the last cause the divergence question looks for "
    "before it calls a rise causeless",
    question="Q4.4",
    evidence=_GRAD_NORM_RISING,
)

# what each cause of a rise states, by its `cause` value
_CAUSES: Mapping[str, Schema] = {
    LR_INCREASING.code: {
        "lr_start": Spec("point", "lr", step="lr_start_step"),
        "lr_end": Spec("point", "lr", step="lr_end_step"),
        "lr_start_step": STEP,
        "lr_end_step": STEP,
    },
    "weight-norm": {
        "min": over("min", *two("steps"), step="min_step", metric=None, metric_key="series"),
        "max": over("max", *two("steps"), step="max_step", metric=None, metric_key="series"),
        "min_step": STEP,
        "max_step": STEP,
        "steps": STEPS,
    },
    GRAD_NORM_RISING.code: _GRAD_NORM_RISING,
}

_TREND: Schema = {
    "start_step": STEP,
    "end_step": STEP,
    "window_start_step": STEP,
    "z": over("trend_z", "window_start_step", "end_step"),
    # the median of the one fine bin the rise begins in; its last step is in the evidence
    # only when the rise is measured from it (rise_from_steps)
    "trough": By(
        "rise_from_stat",
        {
            "median": over("median", *two("rise_from_steps")),
            "mean-of-medians": Spec("median", first_step="start_step"),
        },
    ),
    "start_level": over("mean_of_medians", *two("start_level_steps")),
    "end_level": over("mean_of_medians", *two("end_level_steps")),
    "final_level": over("mean_of_medians", *two("final_level_steps")),
    "rise_from_level": By(
        "rise_from_stat",
        {
            "median": over("median", *two("rise_from_steps")),
            "mean-of-medians": over("mean_of_medians", *two("rise_from_steps")),
        },
    ),
    "rise_to_level": over("mean_of_medians", *two("rise_to_steps")),
    "rise_from_steps": STEPS,
    "rise_to_steps": STEPS,
    "start_level_steps": STEPS,
    "end_level_steps": STEPS,
    "final_level_steps": STEPS,
    "relative_rise": Spec("relative_change"),
    # rising windows inside the divergence that fell back (folded into it, not loss-rise)
    "loss_rise_windows_inside": COUNT,
    "after_min": Spec("min_of_medians", last_step="final_level_steps[1]"),
    # the binned series ends on the last finite loss, where final_level_steps ends
    "final_loss": Spec("point", step="final_level_steps[1]"),
    "bin_points": COUNT,
    "causes": EachItem("cause", _CAUSES),
}

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
    evidence=_TREND,
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
    evidence=_TREND,
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
    evidence={
        "windows": COUNT,
        "z": over("trend_z", "@step", "@end_step"),
        "rise": over("difference", "@step", "@end_step"),
    },
)
