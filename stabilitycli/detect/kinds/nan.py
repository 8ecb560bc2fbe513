"""The kind of rule `nan` (§1)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import ABSENT, COUNT, STEP, Evidence, Spec, measure
from stabilitycli.core.records import dataclass

# the evidence key that counts the NaN points (beside `pos_inf` and `neg_inf`)
NAN_COUNT = "nan"


@dataclass(frozen=True, eq=False, repr=False)
class NanEvidence(Evidence):
    """Where the run went non-finite, in which series, and what it was just before."""

    first_step: int = field(metadata=measure(STEP))
    count: int = field(metadata=measure(COUNT))  # non-finite points
    following: int = field(metadata=measure(COUNT))  # of them, after the first
    points: int = field(metadata=measure(COUNT))  # points of the series
    series: str = field(metadata=measure(None))  # the loss, or the series that shows a hidden NaN
    # the breakdown of the series' values (a counter of NaN steps has none)
    nan: int = field(default=ABSENT, metadata=measure(COUNT))
    pos_inf: int = field(default=ABSENT, metadata=measure(COUNT))
    neg_inf: int = field(default=ABSENT, metadata=measure(COUNT))
    last_finite_loss: float | None = field(
        default=ABSENT, metadata=measure(Spec("point", "loss", step="last_finite_step"))
    )
    last_finite_step: int | None = field(default=ABSENT, metadata=measure(STEP))
    dtype: str | None = field(default=ABSENT, metadata=measure(None))
    # the first non-finite value of any series, and the first non-finite layer
    earliest_nonfinite: dict[str, Any] = field(default=ABSENT, metadata=measure({"step": STEP}))
    origin: str = field(default=ABSENT, metadata=measure(None))
    origin_evidence: dict[str, Any] = field(default=ABSENT, metadata=measure({"step": STEP}))
    # a NaN the loss does not show: how many of the series' points from the first on are
    # non-finite (all: the run broke; some: skipped steps or a reporting bug), and what the
    # finite loss did meanwhile
    points_from_first: int = field(default=ABSENT, metadata=measure(COUNT))
    loss_at_first: float = field(
        default=ABSENT, metadata=measure(Spec("point", "loss", step="first_step"))
    )
    loss_last: float = field(
        default=ABSENT, metadata=measure(Spec("point", "loss", step="loss_last_step"))
    )
    loss_last_step: int = field(default=ABSENT, metadata=measure(STEP))
    loss_falls: bool = field(default=ABSENT, metadata=measure(None))


@dataclass(frozen=True, eq=False, repr=False)
class FiniteLoss(Evidence):
    """What §1 tells the tree of a log whose loss stayed finite (no finding)."""

    count: int = field(metadata=measure(COUNT))  # 0
    points: int = field(metadata=measure(COUNT))


NAN = FindingKind(
    code="nan",
    rule="nan",
    section="1",
    severity=Severity.ERROR,
    meaning="the loss (or a series that shows it, like the grad norm) went NaN or Inf",
    todo="see the verdict nan: what to do depends on the dtype and on where the NaN began",
    why="every update after the first non-finite loss is wasted compute: the weights stop "
    "meaning anything, and the last good checkpoint is where to resume",
    question="Q1.1",
    incident="NaN loss",
    evidence_type=NanEvidence,
)
