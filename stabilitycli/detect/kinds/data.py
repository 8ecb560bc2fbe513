"""The kind of rule `duplicate-batch` (§2: a cause of spikes)."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import COUNT, LABEL, STEP, STEPS

DUPLICATE_BATCH = FindingKind(
    code="duplicate-batch",
    rule="duplicate-batch",
    section="2",
    severity=Severity.WARNING,
    meaning="a batch id repeated one seen within the {duplicate_batch_window_steps} steps before",
    todo="fix the data loader: the sampler's seed and its position after a resume",
    why="a repeated batch over-weights its samples and is a classic cause of a spike right "
    "after a resume",
    question="Q2.3",
    evidence={
        "repeats": COUNT,
        "first_step": STEP,
        "batch_id": LABEL,
        "previous_step": STEP,
        "longest_run": COUNT,
        "steps": STEPS,
    },
)
