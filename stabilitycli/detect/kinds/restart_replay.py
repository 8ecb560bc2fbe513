"""The kind of rule `restart-replay` (the steps a resume ran twice)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    BOUND,
    COUNT,
    DURATION,
    LABEL,
    STEP,
    STEPS,
    Evidence,
    Spec,
    measure,
    over,
    two,
)
from stabilitycli.core.records import dataclass

_AT_WORST = Spec("difference", step="max_deviation_at")


@dataclass(frozen=True, eq=False, repr=False)
class RestartReplayEvidence(Evidence):
    """One resume's replay against the trajectory it abandoned (loss deviations: resumed minus
    abandoned at the same step). A None deviation: no replayed step is finite on both sides."""

    restart: int = field(metadata=measure(LABEL))  # which restart of the log, 1-based
    resumed_from_step: int = field(metadata=measure(STEP))
    last_step_before: int = field(metadata=measure(STEP))
    points: int = field(metadata=measure(COUNT))
    max_abs_deviation: float | None = field(metadata=measure(_AT_WORST))
    max_deviation: float | None = field(metadata=measure(_AT_WORST))
    max_deviation_at: int | float | None = field(metadata=measure(STEP))
    mean_abs_deviation: float | None = field(
        metadata=measure(over("mean_difference", "resumed_from_step", "last_step_before"))
    )
    points_outside: int = field(metadata=measure(COUNT))
    nonfinite_mismatches: int = field(metadata=measure(COUNT))
    first_outside: int | float | None = field(metadata=measure(STEP))
    diverged_at: int | float | None = field(metadata=measure(STEP))
    within_from: int | float | None = field(metadata=measure(STEP))
    noise_sigma: float = field(metadata=measure(over("sigma", *two("noise_steps"))))
    noise_steps: list[int] = field(metadata=measure(STEPS))
    tolerance: float = field(metadata=measure(BOUND))
    departed: bool = field(metadata=measure(None))
    # 0: never left the band; None: left it and was still outside at the end of the replay
    steps_to_return: int | float | None = field(metadata=measure(DURATION))


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
    evidence_type=RestartReplayEvidence,
)
