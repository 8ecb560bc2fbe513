"""The kind of rule `restart` (resumes from a checkpoint)."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import LABEL, STEP

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
    evidence={
        "at_row": LABEL,
        "resumed_from_step": STEP,
        "last_step_before": STEP,
        "rank": LABEL,
    },
)
