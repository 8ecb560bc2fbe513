"""The declared schema of evidence numbers: per finding code, per evidence key, its kind.

`stabilitycli.quantities` walks a finding's evidence by this schema (the kinds
and what they mean are listed there, in `KINDS`). A key missing here is a
number without a meaning: `tests/test_quantities.py` fails on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

FINDING_METRIC = "@metric"  # the finding's own `metric`


@dataclass(frozen=True)
class Spec:
    """What the number under one evidence key is.

    Step references: an evidence key ("peak_step"; inside a list of dicts, the item's own
    key first, then the top level), an element of a list ("noise_steps[0]"), the element at
    the same index as this one ("halving_steps[]", with `each`), or the finding's own step
    ("@step", "@end_step").
    """

    kind: str
    metric: str | None = FINDING_METRIC
    step: str | None = None
    first_step: str | None = None
    last_step: str | None = None
    metric_key: str | None = None  # an evidence key that names the series instead
    own_rank: bool = False  # the finding's rank's own series, not the all-rank mean
    each: bool = False  # a list whose elements are each a quantity


@dataclass(frozen=True)
class By:
    """The spec chosen by the value of another evidence key (a missing key reads None)."""

    key: str
    specs: Mapping[Any, Spec]


@dataclass(frozen=True)
class EachItem:
    """A list of dicts, each described by the schema its `key` value picks."""

    key: str
    schemas: Mapping[str, Schema]


Schema = Mapping[str, Union[Spec, By, EachItem, "Schema"]]

STEP = Spec("step", None)
STEPS = Spec("steps", None)
COUNT = Spec("count", None)
DURATION = Spec("duration_steps", None)
LABEL = Spec("label", None)
BOUND = Spec("bound")
RATIO = Spec("ratio")
FRACTION = Spec("fraction", None)


def _over(kind: str, first: str, last: str, **extra: Any) -> Spec:
    return Spec(kind, first_step=first, last_step=last, **extra)


def _two(key: str) -> tuple[str, str]:
    return f"{key}[0]", f"{key}[1]"


_SPIKE_CAUSES: Mapping[str, Schema] = {
    "optimizer-reset": {"restart_step": STEP, "steps_after_restart": DURATION},
    "duplicate-batch": {"batch_id": LABEL, "repeat_of_step": STEP},
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

_GRAD_NORM_RISING: Schema = {
    "grad_norm_start": _over("mean", *_two("grad_norm_start_steps"), metric="grad_norm"),
    "grad_norm_end": _over("mean", *_two("grad_norm_end_steps"), metric="grad_norm"),
    "grad_norm_start_steps": STEPS,
    "grad_norm_end_steps": STEPS,
}

_DIVERGENCE_CAUSES: Mapping[str, Schema] = {
    "lr-increasing": {
        "lr_start": Spec("point", "lr", step="lr_start_step"),
        "lr_end": Spec("point", "lr", step="lr_end_step"),
        "lr_start_step": STEP,
        "lr_end_step": STEP,
    },
    "weight-norm": {
        "min": _over("min", *_two("steps"), step="min_step", metric=None, metric_key="series"),
        "max": _over("max", *_two("steps"), step="max_step", metric=None, metric_key="series"),
        "min_step": STEP,
        "max_step": STEP,
        "steps": STEPS,
    },
    "grad-norm-rising": _GRAD_NORM_RISING,
}

_TREND: Schema = {
    "start_step": STEP,
    "end_step": STEP,
    "window_start_step": STEP,
    "z": _over("trend_z", "window_start_step", "end_step"),
    # the median of the one fine bin the rise begins in; its last step is in the evidence
    # only when the rise is measured from it (rise_from_steps)
    "trough": By(
        "rise_from_stat",
        {
            "median": _over("median", *_two("rise_from_steps")),
            "mean-of-medians": Spec("median", first_step="start_step"),
        },
    ),
    "start_level": _over("mean_of_medians", *_two("start_level_steps")),
    "end_level": _over("mean_of_medians", *_two("end_level_steps")),
    "final_level": _over("mean_of_medians", *_two("final_level_steps")),
    "rise_from_level": By(
        "rise_from_stat",
        {
            "median": _over("median", *_two("rise_from_steps")),
            "mean-of-medians": _over("mean_of_medians", *_two("rise_from_steps")),
        },
    ),
    "rise_to_level": _over("mean_of_medians", *_two("rise_to_steps")),
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
    "causes": EachItem("cause", _DIVERGENCE_CAUSES),
}

_RANK_COMMON: Schema = {"ranks_reporting": COUNT, "recovered_step": STEP, "pair": LABEL}

_LOSS_SCALE_HISTORY: Schema = {
    "overflow_steps": STEPS,
    "halving_steps": STEPS,
    # the scale right after each halving, at the halving's step
    "halving_scales": Spec("point", step="halving_steps[]", each=True),
}

# every code: keys a later stage may add to any finding
COMMON: Schema = {"explained_by_ranks": LABEL}

_JUMP: Schema = {
    "from_step": STEP,
    "to_step": STEP,
    "before": Spec("point", step="from_step"),
    "after": Spec("point", step="to_step"),
    "ratio": RATIO,
}

_BY_CODE: Mapping[str, Schema] = {
    "spike": {
        "onset_step": STEP,
        "end_step": STEP,
        "peak_step": STEP,
        "baseline_first_step": STEP,
        "baseline_last_step": STEP,
        "recovery_step": STEP,
        "points": COUNT,
        "mu": _over("mean", "baseline_first_step", "baseline_last_step"),
        "sigma": _over("sigma", "baseline_first_step", "baseline_last_step"),
        "threshold": BOUND,
        "recovery_level": BOUND,
        "peak": Spec("peak", step="peak_step"),
        "z": _over("z", "baseline_first_step", "baseline_last_step", step="peak_step"),
        "recovery_steps": DURATION,
        "recovery_horizon_steps": DURATION,
        "spike_type": LABEL,
        # the first loss logged recovery_window_steps or more after the peak
        "after_window_loss": Spec("point", step="after_window_step"),
        "after_window_step": STEP,
        "causes": EachItem("cause", _SPIKE_CAUSES),
    },
    "recurring-spikes": {
        "count": COUNT,
        "steps": STEPS,
        "ratio_min": RATIO,  # peak over the trailing mean, the smallest of the group
        "ratio_max": RATIO,
        "z_min": Spec("z"),
        "z_max": Spec("z"),
        "recovered_share": FRACTION,
        "longest_recovery_steps": DURATION,
    },
    "blip": {"count": COUNT, "steps": STEPS, "largest_z": Spec("z")},
    "loss-jump": _JUMP,
    "grad-norm-jump": _JUMP,
    "divergence": _TREND,
    "plateau": _TREND,
    "loss-rise": {
        "windows": COUNT,
        "z": _over("trend_z", "@step", "@end_step"),
        "rise": _over("difference", "@step", "@end_step"),
    },
    "grad-norm-rising": _GRAD_NORM_RISING,
    "grad-norm-spike": {
        "count": COUNT,
        "steps": STEPS,
        "largest_step": STEP,
        "largest": Spec("peak", step="largest_step"),
        "baseline_median": Spec("trailing_median", step="largest_step"),
        "ratio": RATIO,
    },
    "lr-jump": {
        "lr_before": Spec("point", step="step_before"),
        "lr_after": Spec("point", step="@end_step"),
        "relative_jump": Spec("relative_change"),
        "step_before": STEP,
        "rises": COUNT,
    },
    "lr-increasing": {
        "lr_before": Spec("point", step="lr_before_step"),
        "lr_before_step": STEP,
        "lr_after": Spec("point", step="@end_step"),
        "warmup_end_step": STEP,
    },
    # `before` is the norm last logged at or before step - divergence_window_steps
    "weight-norm-change": {
        "before": Spec("point", step="before_step"),
        "before_step": STEP,
        "after": Spec("point", step="@step"),
        "ratio": RATIO,
    },
    "nan": {
        "first_step": STEP,
        "count": COUNT,
        "following": COUNT,
        "points": COUNT,
        "nan": COUNT,
        "pos_inf": COUNT,
        "neg_inf": COUNT,
        "last_finite_loss": Spec("point", "loss", step="last_finite_step"),
        "last_finite_step": STEP,
        "earliest_nonfinite": {"step": STEP},
        "origin_evidence": {"step": STEP},
    },
    "fp16-overflow": {
        "overflows": COUNT,
        "rate": FRACTION,
        "first_step": STEP,
        "spike_step": STEP,
    },
    "loss-scale-collapsed": {
        "scale_min": Spec("min"),  # over the whole log
        "scale_max": Spec("max"),
        "first_step_below": STEP,
        "first_overflow_step": STEP,
        "first_halving_step": STEP,
        "overflows": COUNT,
        **_LOSS_SCALE_HISTORY,
    },
    "loss-scale-static": {
        # constant over the log, so also its value at the first overflow
        "scale": Spec("point", step="@step"),
        "overflows": COUNT,
        **_LOSS_SCALE_HISTORY,
    },
    "loss-scale-halving": {
        "drops": COUNT,
        "rises": COUNT,
        "first_drop_step": STEP,
        "scale_min": Spec("min"),
        "scale_final": Spec("point"),  # the last one logged: that step is not in the evidence
        "drop_steps": STEPS,
        **_LOSS_SCALE_HISTORY,
    },
    "duplicate-batch": {
        "repeats": COUNT,
        "first_step": STEP,
        "batch_id": LABEL,
        "previous_step": STEP,
        "longest_run": COUNT,
        "steps": STEPS,
    },
    "throughput-drop": {
        "baseline": By(
            "short_log",
            {
                None: Spec("trailing_median", step="@step"),
                True: Spec("median"),  # of the log's first two points
            },
        ),
        "level": By(
            "short_log",
            {None: _over("median", "@step", "@end_step"), True: Spec("point", step="@end_step")},
        ),
        "drop_frac": Spec("relative_change"),
        "points": COUNT,
    },
    "restart": {
        "at_row": LABEL,
        "resumed_from_step": STEP,
        "last_step_before": STEP,
        "rank": LABEL,
    },
    "restart-replay": {
        "restart": LABEL,
        "resumed_from_step": STEP,
        "last_step_before": STEP,
        "points": COUNT,
        "points_outside": COUNT,
        "nonfinite_mismatches": COUNT,
        "max_deviation": Spec("difference", step="max_deviation_at"),
        "max_abs_deviation": Spec("difference", step="max_deviation_at"),
        "mean_abs_deviation": _over("mean_difference", "resumed_from_step", "last_step_before"),
        "max_deviation_at": STEP,
        "first_outside": STEP,
        "diverged_at": STEP,
        "within_from": STEP,
        "steps_to_return": DURATION,
        "noise_sigma": _over("sigma", *_two("noise_steps")),
        "noise_steps": STEPS,
        "tolerance": BOUND,
    },
    "rank-outlier": {
        "value": _over("median", *_two("effect_steps"), own_rank=True),
        "cohort_median": _over("cohort_median", *_two("effect_steps")),
        "robust_z": _over("robust_z", *_two("effect_steps"), own_rank=True),
        "mean_shift": _over("mean_difference", *_two("effect_steps")),
        "mean_with": _over("mean", *_two("effect_steps")),
        "mean_without": _over("mean_others", *_two("effect_steps")),
        "effect_steps": STEPS,
        **_RANK_COMMON,
    },
    "rank-nonfinite": {
        "value": Spec("point", step="@step", own_rank=True),
        "cohort_median": _over("cohort_median", "@step", "@step"),
        "robust_z": Spec("robust_z", own_rank=True),
        "mean_shift": Spec("difference", step="@step"),  # what the rank alone adds to the mean
        "cohort_nonfinite_step": STEP,
        **_RANK_COMMON,
    },
    "rank-silent": {
        "value": Spec("point", step="@end_step", own_rank=True),
        "cohort_median": _over("cohort_median", "@end_step", "@end_step"),
        "robust_z": _over("robust_z", "@end_step", "@end_step", own_rank=True),
        "mean_shift": Spec("difference"),
        **_RANK_COMMON,
    },
    # medians over the rank's slow steps, which the evidence does not list
    "straggler": {
        "value": Spec("median", own_rank=True),
        "cohort_median": Spec("cohort_median"),
        "robust_z": Spec("robust_z", own_rank=True),
        "mean_shift": Spec("difference"),
        **_RANK_COMMON,
    },
}
# per finding code, per evidence key: what the number is
SCHEMA: Mapping[str, Schema] = {code: {**COMMON, **schema} for code, schema in _BY_CODE.items()}
