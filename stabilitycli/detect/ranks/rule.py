"""The per-rank check as a rule of `stab analyze` (spec 5): it runs before §1."""

from __future__ import annotations

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.ranks import RANK_KINDS, RULE
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView


@rule(
    RULE,
    "5",
    "one data-parallel rank sits away from its cohort, goes non-finite, falls silent or lags",
    emits=RANK_KINDS,
    series=("loss",),
    reads=(
        "rank_z",
        "rank_persist_steps",
        "rank_nonfinite_steps",
        "rank_rel_floor",
        "rank_min_cohort",
        "rank_max_gap_points",
        "rank_spread_pool_points",
        "rank_history_points",
        "rank_pair_culprit_ratio",
        "rank_cusum_k",
        "rank_cusum_h",
        "rank_cusum_decide",
        "rank_recovery_steps",
        "straggler_ratio",
    ),
    provides=("rank_report",),
    before_view=True,  # it reads the run's every rank, not the view's mean over them
)
def detect_rank_outliers(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Each rank against the median and MAD of its cohort, step by step.

    What it detects: a rank whose loss sits `rank_z` robust sigmas from the
    cohort median for `rank_persist_steps` logged steps (`rank-outlier`); a
    rank that reports NaN/Inf while the others are finite (`rank-nonfinite`);
    a rank that stopped logging before the others (`rank-silent`); a rank
    whose throughput lags the cohort's (`straggler`). Logs without a rank
    column are not checked.

    Why it matters: the all-reduced mean is a low-pass filter over exactly
    this signal. One failed rank among 64 moves the mean by 1/64 of its
    error, so the mean shows a small bump or drift that the §2 and §4 rules
    would blame on optimisation, while the fix is a host, a GPU or a data
    shard.
    """
    from stabilitycli.core.model import Skip

    result = RuleResult()
    run = view.run
    if run is None or not run.has_ranks:
        result.skipped.append(Skip(RULE, "one series, no per-rank values in the log"))
        return result
    # only here: a log of one series never loads the check's modules (start-up time)
    from stabilitycli.detect.ranks.check import find_rank_outliers

    metric = "loss" if "loss" in run.frame.columns else run.metric_columns[0]
    report = find_rank_outliers(run, metric, thresholds)
    # the loss report already carries throughput stragglers when tokens/s is logged
    result.findings.extend(report.findings())
    result.facts["rank_report"] = report
    return result
