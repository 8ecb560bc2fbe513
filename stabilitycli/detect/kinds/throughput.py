"""The kind of rule `throughput-drop` (§5)."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import ABSENT, COUNT, By, Evidence, Spec, measure, over
from stabilitycli.core.records import dataclass


@dataclass(frozen=True, eq=False, repr=False)
class ThroughputDropEvidence(Evidence):
    """A lasting fall; in a log too short for a trailing baseline (`short_log`), its first
    two points against its last one."""

    baseline: float = field(
        metadata=measure(
            By(
                "short_log",
                {
                    None: Spec("trailing_median", step="@step"),
                    True: Spec("median"),  # of the log's first two points
                },
            )
        )
    )
    level: float = field(
        metadata=measure(
            By(
                "short_log",
                {
                    None: over("median", "@step", "@end_step"),
                    True: Spec("point", step="@end_step"),
                },
            )
        )
    )
    drop_frac: float = field(metadata=measure(Spec("relative_change")))
    points: int = field(default=ABSENT, metadata=measure(COUNT))  # the points it stayed down
    short_log: bool = field(default=ABSENT, metadata=measure(None))


THROUGHPUT_DROP = FindingKind(
    code="throughput-drop",
    rule="throughput-drop",
    section="5",
    severity=Severity.WARNING,
    meaning="tokens per second fell by {throughput_drop_frac:.0%} or more and stayed down",
    todo="look for what changed at that step: a host, the data pipeline, checkpointing, or "
    "contention on the machine",
    why="a lasting fall in throughput costs compute on every later step and often marks a "
    "failing host or a stalled data pipeline",
    evidence_type=ThroughputDropEvidence,
)
