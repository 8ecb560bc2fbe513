"""The kind of rule `duplicate-batch` (§2: a cause of spikes)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import COUNT, LABEL, STEP, STEPS, Evidence, measure
from stabilitycli.core.records import dataclass


@dataclass(frozen=True, eq=False, repr=False)
class DuplicateBatchEvidence(Evidence):
    repeats: int = field(metadata=measure(COUNT))  # steps whose batch id was seen recently
    first_step: int = field(metadata=measure(STEP))
    batch_id: float = field(metadata=measure(LABEL))  # the first repeated id
    previous_step: int = field(metadata=measure(STEP))  # where that id was used before
    longest_run: int = field(metadata=measure(COUNT))  # consecutive repeating steps
    steps: list[int] = field(metadata=measure(STEPS))  # the first 20 repeating steps


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
    evidence_type=DuplicateBatchEvidence,
)
