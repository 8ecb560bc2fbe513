"""What the per-rank check reports: each outlier rank, the mean's move, the heatmap data.

`RankReport.to_dict()` is the `stab.ranks/1` contract (docs/contract.md);
`RankOutlier.finding()` is how an outlier appears among `stab analyze`'s findings.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import numpy as np

from stabilitycli.core.model import Finding, FindingKind, Severity, jsonable
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.ranks import RANK_NONFINITE, RANK_OUTLIER, RANK_SILENT
from stabilitycli.detect.kinds.ranks import STRAGGLER as STRAGGLER_KIND

SCHEMA = "stab.ranks/1"
# a straggler is named in the `stab ranks` JSON as in the findings
LEVEL, NONFINITE, SILENT, STRAGGLER = "level", "nonfinite", "silent", STRAGGLER_KIND.code
KINDS = (NONFINITE, LEVEL, STRAGGLER, SILENT)  # also the order in which reports list them
# the finding kind each way of disagreeing is reported as
FINDING_KINDS: dict[str, FindingKind] = {
    LEVEL: RANK_OUTLIER,
    NONFINITE: RANK_NONFINITE,
    SILENT: RANK_SILENT,
    STRAGGLER: STRAGGLER_KIND,
}


@dataclass(frozen=True)
class RankOutlier:
    """One rank that disagrees with its cohort, and by how much."""

    rank: int | None  # None: two ranks disagree and neither can be blamed
    kind: str
    onset_step: int
    value: float | None  # its typical level after onset (the value for nonfinite/silent)
    cohort_median: float | None
    robust_z: float | None
    # level: the mean with this rank minus the mean without it, averaged over `effect_steps`;
    # nonfinite: what it alone makes of the mean (value / ranks); straggler: a median per step
    mean_shift: float | None
    metric: str
    ranks_reporting: int
    end_step: int | None = None  # last step it deviated (its last step when silent)
    recovered_step: int | None = None  # first step back in line after end_step
    pair: tuple[int, int] | None = None
    # nonfinite: the first step at which most of the cohort is non-finite too (it spread)
    cohort_nonfinite_step: int | None = None
    # level: the affected steps (onset to the last deviating step if it recovered, else to the
    # end) and the all-rank mean over them with this rank and without it
    effect_steps: tuple[int, int] | None = None
    mean_with: float | None = None
    mean_without: float | None = None
    # level: the test that decided it (`decision.PERSISTENCE` or `decision.CUSUM`), the step
    # where it met its bar, the statistic it reached there and that bar; how the onset was
    # placed (`decision.ONSET_*`)
    test: str | None = None
    test_step: int | None = None
    test_statistic: float | None = None
    test_bar: float | None = None
    onset_by: str | None = None
    message: str = ""
    test_words: str = ""  # the deciding test in a clause, as the message ends with it

    @property
    def severity(self) -> Severity:
        return FINDING_KINDS[self.kind].severity

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "kind": self.kind,
            "onset_step": self.onset_step,
            "value": _num(self.value),
            "cohort_median": _num(self.cohort_median),
            "robust_z": _num(self.robust_z),
            "mean_shift": _num(self.mean_shift),
            "metric": self.metric,
            "ranks_reporting": self.ranks_reporting,
            "end_step": self.end_step,
            "recovered_step": self.recovered_step,
            "severity": str(self.severity),
            "message": self.message,
        }
        if self.pair is not None:
            out["pair"] = list(self.pair)
        if self.kind == NONFINITE:
            out["cohort_nonfinite_step"] = self.cohort_nonfinite_step
        if self.effect_steps is not None:
            out["effect_steps"] = list(self.effect_steps)
            out["mean_with"] = _num(self.mean_with)
            out["mean_without"] = _num(self.mean_without)
        if self.test is not None:
            out["test"] = self.test
            out["test_step"] = self.test_step
            out["test_statistic"] = _num(self.test_statistic)
            out["test_bar"] = _num(self.test_bar)
            out["onset_by"] = self.onset_by
        return jsonable(out)

    @property
    def test_cell(self) -> str:
        """The deciding test, its statistic and bar in a table cell ("–" when none)."""
        from stabilitycli.detect.ranks.decision import short

        return short(self.to_dict())

    def finding(self) -> Finding:
        evidence = {
            k: v
            for k, v in self.to_dict().items()
            if k not in ("rank", "kind", "onset_step", "end_step", "metric", "message", "severity")
        }
        kind = FINDING_KINDS[self.kind]
        # every per-rank kind declares one (made from one template: typed by its fields)
        evidence_type: Any = kind.evidence_type
        return kind.finding(
            self.message,
            step=self.onset_step,
            end_step=self.end_step,
            rank=self.rank,
            metric=self.metric,
            evidence=evidence_type(**evidence, kind=self.kind),
        )


@dataclass(frozen=True)
class MeanShift:
    """How far the all-rank mean moved over a window, and how much of it the outliers explain."""

    start_step: int
    end_step: int
    baseline_steps: tuple[int, int] | None  # the logged steps the "before" level comes from
    ranks: tuple[int, ...]  # outlier ranks left out for the clean mean
    n_ranks: int
    mean_before: float | None
    mean_during: float | None
    clean_before: float | None
    clean_during: float | None

    @property
    def shift(self) -> float | None:
        return _diff(self.mean_during, self.mean_before)

    @property
    def clean_shift(self) -> float | None:
        return _diff(self.clean_during, self.clean_before)

    @property
    def explained(self) -> float | None:
        """The part of the mean's move that disappears when the outlier ranks are left out."""
        return _diff(self.shift, self.clean_shift)

    @property
    def fraction(self) -> float | None:
        shift, explained = self.shift, self.explained
        if shift is None or explained is None or not np.isfinite(shift) or abs(shift) < 1e-12:
            return None
        return explained / shift

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "start_step": self.start_step,
                "end_step": self.end_step,
                "baseline_steps": list(self.baseline_steps) if self.baseline_steps else None,
                "ranks_left_out": list(self.ranks),
                "ranks": self.n_ranks,
                "mean_before": _num(self.mean_before),
                "mean_during": _num(self.mean_during),
                "shift": _num(self.shift),
                "clean_before": _num(self.clean_before),
                "clean_during": _num(self.clean_during),
                "clean_shift": _num(self.clean_shift),
                "explained": _num(self.explained),
                "fraction": _num(self.fraction),
            }
        )


@dataclass(frozen=True)
class RankPicture:
    """Deviation of every rank over ~60 step buckets, for the terminal heatmap.

    `deviation[i, j]` is the mean robust z (each clipped to +-10) of rank `ranks[i]` in bucket j
    (steps `step_edges[j]` to `step_edges[j+1]`); +inf where the rank reported
    NaN/Inf there, NaN where it did not report at all.
    """

    ranks: np.ndarray
    step_edges: np.ndarray
    deviation: np.ndarray


@dataclass(frozen=True)
class RankReport:
    """Everything `stab ranks` says about one run and one metric."""

    metric: str
    ranks: int
    steps: tuple[int, int]
    outliers: tuple[RankOutlier, ...]
    throughput_metric: str | None = None
    notes: tuple[str, ...] = ()
    mean_effect: MeanShift | None = None
    picture: RankPicture | None = field(default=None, compare=False, repr=False)

    @property
    def worst_severity(self) -> Severity | None:
        return max((o.severity for o in self.outliers), default=None)

    def findings(self) -> list[Finding]:
        return [o.finding() for o in self.outliers]

    def to_dict(self) -> dict[str, Any]:
        """The `stab.ranks/1` contract (docs/contract.md), plus extra fields."""
        return {
            "schema": SCHEMA,
            "metric": self.metric,
            "ranks": self.ranks,
            "steps": [self.steps[0], self.steps[1]],
            "outliers": [o.to_dict() for o in self.outliers],
            "throughput_metric": self.throughput_metric,
            "mean_effect": self.mean_effect.to_dict() if self.mean_effect else None,
            "notes": list(self.notes),
        }


def _num(value: float | None) -> float | None:
    """Six significant digits: enough to read, stable to compare."""
    if value is None or not np.isfinite(value):
        return value
    return float(f"{value:.6g}")


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# --- the mean, and what the outliers do to it ---------------------------------------------
