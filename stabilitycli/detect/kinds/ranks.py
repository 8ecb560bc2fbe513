"""The kinds of rule `ranks` (§5): one rank against its cohort."""

from __future__ import annotations

import types
from dataclasses import field
from typing import Any

from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantity_schema import (
    ABSENT,
    COUNT,
    LABEL,
    STEP,
    STEPS,
    By,
    Evidence,
    Spec,
    measure,
    over,
    two,
)
from stabilitycli.core.records import dataclass

RULE = "ranks"


# persistence: logged steps at |robust z| >= rank_z in the run, against rank_persist_steps;
# cusum: the CUSUM of the rank's robust z at test_step, against rank_cusum_decide
_TEST_STATISTIC = By(
    "test",
    {"persistence": COUNT, "cusum": Spec("cusum", None, step="test_step", own_rank=True)},
)
_TEST_BAR = By("test", {"persistence": COUNT, "cusum": Spec("bound", None)})


def _rank_evidence(name: str, value: Spec, cohort: Spec, robust_z: Spec, shift: Spec) -> Any:
    """The evidence type of one per-rank kind: the same fields (as `stab ranks` reports an
    outlier), each kind saying over which steps its four numbers are taken. A number is None
    where it cannot be stated; the `stab ranks` JSON writes a non-finite one as a string."""

    def number(what: Spec | Any) -> Any:
        return field(metadata=measure(what))

    def sometimes(what: Spec | Any) -> Any:
        return field(default=ABSENT, metadata=measure(what))

    specs = [
        ("value", float | str | None, number(value)),  # the rank's own level
        ("cohort_median", float | str | None, number(cohort)),
        ("robust_z", float | str | None, number(robust_z)),
        ("mean_shift", float | str | None, number(shift)),
        ("ranks_reporting", int, number(COUNT)),
        ("recovered_step", int | None, number(STEP)),
        ("pair", list[int], sometimes(LABEL)),  # two ranks disagree; neither is blamed
        ("cohort_nonfinite_step", int | None, sometimes(STEP)),  # the NaN spread there
        # a level outlier: the steps it moved the mean over, the mean with it and without
        ("effect_steps", list[int], sometimes(STEPS)),
        ("mean_with", float | str | None, sometimes(over("mean", *two("effect_steps")))),
        (
            "mean_without",
            float | str | None,
            sometimes(over("mean_others", *two("effect_steps"))),
        ),
        # a level outlier: the test that decided (persistence or cusum), where it met its
        # bar, the statistic it reached and the bar; how the onset was placed
        ("test", str, field(default=ABSENT, metadata=measure(None))),
        ("test_step", int, sometimes(STEP)),
        ("test_statistic", float | str | None, sometimes(_TEST_STATISTIC)),
        ("test_bar", float | str | None, sometimes(_TEST_BAR)),
        ("onset_by", str, field(default=ABSENT, metadata=measure(None))),
        # how the rank disagrees (level, nonfinite...); last in the JSON, named by keyword
        ("kind", str, field(kw_only=True, metadata=measure(None))),
    ]

    def body(namespace: dict[str, Any]) -> None:
        namespace.update({key: spec for key, _, spec in specs})
        namespace["__annotations__"] = {key: kind for key, kind, _ in specs}
        namespace["__module__"] = __name__  # pickled by name, as a class written out here

    # what `make_dataclass` does, with the decorator every evidence type takes
    # (`core.records`, whose classes `make_dataclass`'s own may not inherit from)
    made = types.new_class(name, (Evidence,), {}, body)
    return dataclass(frozen=True, eq=False, repr=False)(made)  # repr: Evidence's own


RankOutlierEvidence = _rank_evidence(
    "RankOutlierEvidence",
    value=over("median", *two("effect_steps"), own_rank=True),
    cohort=over("cohort_median", *two("effect_steps")),
    robust_z=over("robust_z", *two("effect_steps"), own_rank=True),
    shift=over("mean_difference", *two("effect_steps")),
)
RankNonfiniteEvidence = _rank_evidence(
    "RankNonfiniteEvidence",
    value=Spec("point", step="@step", own_rank=True),
    cohort=over("cohort_median", "@step", "@step"),
    robust_z=Spec("robust_z", own_rank=True),
    # what the rank alone adds to the mean
    shift=Spec("difference", step="@step"),
)
RankSilentEvidence = _rank_evidence(
    "RankSilentEvidence",
    value=Spec("point", step="@end_step", own_rank=True),
    cohort=over("cohort_median", "@end_step", "@end_step"),
    robust_z=over("robust_z", "@end_step", "@end_step", own_rank=True),
    shift=Spec("difference"),
)
# medians over the rank's slow steps, which the evidence does not list
StragglerEvidence = _rank_evidence(
    "StragglerEvidence",
    value=Spec("median", own_rank=True),
    cohort=Spec("cohort_median"),
    robust_z=Spec("robust_z", own_rank=True),
    shift=Spec("difference"),
)

RANK_OUTLIER = FindingKind(
    code="rank-outlier",
    rule=RULE,
    section="5",
    severity=Severity.ERROR,
    meaning="one data-parallel rank's loss sits {rank_z:g} robust sigmas or more from the other "
    "ranks' median for {rank_persist_steps} logged steps or more",
    todo="check that rank's host (ECC and Xid errors, throttling, NCCL warnings) and its data "
    "shard; exclude the node and resume from before its onset",
    why="the all-rank mean dilutes one bad rank by the number of ranks, so the mean shows a "
    "small drift that looks like optimisation while the fault is one host or shard",
    question="R",
    evidence_type=RankOutlierEvidence,
)
RANK_NONFINITE = FindingKind(
    code="rank-nonfinite",
    rule=RULE,
    section="5",
    severity=Severity.ERROR,
    meaning="one rank reports NaN or Inf while the others are finite",
    todo="look at that rank's host and data shard first: the non-finite values begin there",
    why="a NaN that begins on one rank reaches every rank at the next all-reduce; where it "
    "began names the host or shard to look at",
    question="R",
    evidence_type=RankNonfiniteEvidence,
)
RANK_SILENT = FindingKind(
    code="rank-silent",
    rule=RULE,
    section="5",
    severity=Severity.WARNING,
    meaning="a rank stopped logging before the others",
    todo="look at that rank's own log for a crash, a hang or a killed process",
    why="a rank that stops logging is often a rank that crashed or hangs, and the mean of the "
    "others hides its absence",
    question="R",
    evidence_type=RankSilentEvidence,
)
STRAGGLER = FindingKind(
    code="straggler",
    rule=RULE,
    section="5",
    severity=Severity.WARNING,
    meaning="a rank's throughput lags the others' (below {straggler_ratio:g}x their median)",
    todo="check that host for throttling, a slow disk or network link, or a noisy neighbour",
    why="synchronous training runs at the pace of its slowest rank: one slow host costs the "
    "whole run its lost throughput",
    question="R",
    evidence_type=StragglerEvidence,
)

# the per-rank kinds, in the order the rule lists them; the one list of rank codes
RANK_KINDS: tuple[FindingKind, ...] = (RANK_OUTLIER, RANK_NONFINITE, RANK_SILENT, STRAGGLER)
