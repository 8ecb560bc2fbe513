"""The kind of rule `restart-replay` (the steps a resume ran twice)."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import BOUND, COUNT, DURATION, LABEL, STEP, STEPS, Spec, over, two

RESTART_REPLAY = FindingKind(
    code="restart-replay",
    rule="restart-replay",
    section="0",
    severity=Severity.INFO,  # WARNING when the replay departs from the first run
    meaning="after a resume, the replayed steps compared with the abandoned trajectory: within "
    "{noise_band_sigmas:g}x the noise band, or not",
    todo="a replay that departs means the resume lost state: save and restore the optimizer "
    "moments, LR scheduler and data cursor with the weights",
    why="a resume that restores every piece of state replays the same losses; a departure "
    "means some state was lost, and every later resume will lose it too",
    evidence={
        "restart": LABEL,
        "resumed_from_step": STEP,
        "last_step_before": STEP,
        "points": COUNT,
        "points_outside": COUNT,
        "nonfinite_mismatches": COUNT,
        "max_deviation": Spec("difference", step="max_deviation_at"),
        "max_abs_deviation": Spec("difference", step="max_deviation_at"),
        "mean_abs_deviation": over("mean_difference", "resumed_from_step", "last_step_before"),
        "max_deviation_at": STEP,
        "first_outside": STEP,
        "diverged_at": STEP,
        "within_from": STEP,
        "steps_to_return": DURATION,
        "noise_sigma": over("sigma", *two("noise_steps")),
        "noise_steps": STEPS,
        "tolerance": BOUND,
    },
)
