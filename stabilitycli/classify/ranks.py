"""Spec 5 before §1-§4: what the mean shows after a rank went bad is that rank's doing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding, Severity
from stabilitycli.core.quantity_schema import Evidence
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.divergence import DIVERGENCE, PLATEAU
from stabilitycli.detect.kinds.spike import SPIKE

if TYPE_CHECKING:
    # a log of one series never loads the per-rank report's module (start-up time)
    from stabilitycli.detect.ranks.report import RankOutlier, RankReport

# findings about the mean that a bad rank can produce on its own
_MEAN_KINDS = (SPIKE, DIVERGENCE, PLATEAU)


def attribute_to_ranks(
    findings: list[Finding], facts: Facts, thresholds: Thresholds
) -> list[Finding]:
    """Demote a spike or drift of the mean that starts with a rank outlier to info, naming the rank.

    The spike events the tree reads lose those spikes too, so a verdict is
    not `spike-*` for what one rank did.
    """
    report = facts.rank_report
    if report is None:
        return findings
    blamed = _named_outliers(report)
    if not blamed:
        return findings
    facts.spikes = [s for s in facts.spikes if not _after_onset(s.onset_step, blamed, thresholds)]
    ranks = sorted({o.rank for o in blamed if o.rank is not None})
    out = []
    for f in findings:
        if f.kind in _MEAN_KINDS and _after_onset(f.step, blamed, thresholds):
            out.append(
                Finding(
                    f.kind,
                    Severity.INFO,
                    f"{f.message} - explained by rank outlier(s) {', '.join(map(str, ranks))}, "
                    "not an optimisation problem",
                    step=f.step,
                    end_step=f.end_step,
                    metric=f.metric,
                    evidence=_adding(f.evidence, explained_by_ranks=ranks),
                )
            )
        else:
            out.append(f)
    return out


def _named_outliers(report: RankReport) -> list[RankOutlier]:
    """Outliers that move the mean: a level shift or a non-finite rank, with a named rank."""
    return [o for o in report.outliers if o.kind in ("level", "nonfinite") and o.rank is not None]


def _after_onset(step: int | None, blamed: list[RankOutlier], thresholds: Thresholds) -> bool:
    # the rank's onset is a CUSUM change point, which can land a step or two after the
    # first step the mean reacts to, so the window opens a little early
    first_onset = min(o.onset_step for o in blamed)
    return step is not None and step >= first_onset - thresholds.rank_onset_lead_steps


def _adding(evidence: Mapping[str, Any], **keys: Any) -> Mapping[str, Any]:
    """The evidence with keys added last, typed evidence kept typed."""
    if isinstance(evidence, Evidence):
        return evidence.adding(**keys)
    return {**evidence, **keys}
