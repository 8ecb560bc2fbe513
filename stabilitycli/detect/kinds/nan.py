"""The kind of rule `nan` (§1)."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import COUNT, STEP, Spec

# the evidence key that counts the NaN points (beside `pos_inf` and `neg_inf`)
NAN_COUNT = "nan"

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
    evidence={
        "first_step": STEP,
        "count": COUNT,
        "following": COUNT,
        "points": COUNT,
        NAN_COUNT: COUNT,
        "pos_inf": COUNT,
        "neg_inf": COUNT,
        "last_finite_loss": Spec("point", "loss", step="last_finite_step"),
        "last_finite_step": STEP,
        "earliest_nonfinite": {"step": STEP},
        "origin_evidence": {"step": STEP},
    },
)
