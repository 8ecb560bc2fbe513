"""The kind of rule `restart` (resumes from a checkpoint)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import ABSENT, LABEL, STEP, Evidence, measure
from stabilitycli.core.records import dataclass


@dataclass(frozen=True, eq=False, repr=False)
class RestartEvidence(Evidence):
    at_row: int = field(metadata=measure(LABEL))  # the log row where the step went backwards
    resumed_from_step: int = field(metadata=measure(STEP))
    last_step_before: int = field(metadata=measure(STEP))
    rank: int = field(default=ABSENT, metadata=measure(LABEL))  # a per-rank log's rank

    @classmethod
    def of(cls, at_row: int, resumed_from_step: int, last_step_before: int, rank: int | None):
        return cls(at_row, resumed_from_step, last_step_before, ABSENT if rank is None else rank)


RESTART = FindingKind(
    code="restart",
    rule="restart",
    section="0",
    severity=Severity.INFO,
    meaning="the step went backwards: the run was resumed from a checkpoint here",
    todo="nothing, unless a spike follows it (then see optimizer-reset); the replayed steps are "
    "compared with the abandoned ones",
    why="a resume that does not restore the whole training state shows up as a spike or a "
    "shifted loss right after it; knowing where resumes happened explains those",
    evidence_type=RestartEvidence,
)
