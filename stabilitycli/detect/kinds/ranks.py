"""The kinds of rule `ranks` (§5): one rank against its cohort."""

from __future__ import annotations

from stabilitycli.model import FindingKind, Severity
from stabilitycli.quantity_schema import COUNT, LABEL, STEP, STEPS, Schema, Spec, over, two

RULE = "ranks"

_COMMON: Schema = {"ranks_reporting": COUNT, "recovered_step": STEP, "pair": LABEL}

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
    evidence={
        "value": over("median", *two("effect_steps"), own_rank=True),
        "cohort_median": over("cohort_median", *two("effect_steps")),
        "robust_z": over("robust_z", *two("effect_steps"), own_rank=True),
        "mean_shift": over("mean_difference", *two("effect_steps")),
        "mean_with": over("mean", *two("effect_steps")),
        "mean_without": over("mean_others", *two("effect_steps")),
        "effect_steps": STEPS,
        **_COMMON,
    },
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
    evidence={
        "value": Spec("point", step="@step", own_rank=True),
        "cohort_median": over("cohort_median", "@step", "@step"),
        "robust_z": Spec("robust_z", own_rank=True),
        # what the rank alone adds to the mean
        "mean_shift": Spec("difference", step="@step"),
        "cohort_nonfinite_step": STEP,
        **_COMMON,
    },
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
    evidence={
        "value": Spec("point", step="@end_step", own_rank=True),
        "cohort_median": over("cohort_median", "@end_step", "@end_step"),
        "robust_z": over("robust_z", "@end_step", "@end_step", own_rank=True),
        "mean_shift": Spec("difference"),
        **_COMMON,
    },
)
# medians over the rank's slow steps, which the evidence does not list
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
    evidence={
        "value": Spec("median", own_rank=True),
        "cohort_median": Spec("cohort_median"),
        "robust_z": Spec("robust_z", own_rank=True),
        "mean_shift": Spec("difference"),
        **_COMMON,
    },
)

# the per-rank kinds, in the order the rule lists them; the one list of rank codes
RANK_KINDS: tuple[FindingKind, ...] = (RANK_OUTLIER, RANK_NONFINITE, RANK_SILENT, STRAGGLER)
