"""The library entry points: read -> (ranks) -> rules -> classifier -> Analysis."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from stabilitycli.config import Thresholds
from stabilitycli.frame import RunData, from_wide
from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import Analysis, Finding, Severity, SourceInfo

_RANK_KINDS = ("rank-outlier", "rank-nonfinite", "rank-silent", "straggler")


def load_run(source: Any, options: ReadOptions | None = None) -> RunData:
    """A path/URI, a `RunData`, or a polars/pandas frame with a step column."""
    if isinstance(source, RunData):
        return source
    if isinstance(source, (str, Path)):
        return read(source, options or ReadOptions())
    import polars as pl

    if not isinstance(source, pl.DataFrame):
        source = pl.DataFrame(source)
    overrides = (options or ReadOptions()).metric_overrides
    return from_wide(source, SourceInfo(path="<frame>", format="frame"), overrides=overrides)


def analyze(
    source: Any,
    config: Thresholds | None = None,
    *,
    options: ReadOptions | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
) -> Analysis:
    """Walk the whole §1-§4 tree (plus per-rank checks) over one run."""
    from stabilitycli.classify.tree import walk
    from stabilitycli.detect.registry import select_rules
    from stabilitycli.detect.series import build_view

    thresholds = config or Thresholds()
    run = load_run(source, options)
    rules, dropped_codes = select_rules(select, ignore)
    findings: list[Finding] = []
    skipped = []
    facts: dict[str, Any] = {}

    rank_report = None
    if run.has_ranks:
        rank_report, rank_findings = _rank_check(run, thresholds)
        findings.extend(rank_findings)

    view = build_view(run)
    for rule in rules:
        outcome = rule.run(view, thresholds, facts)
        findings.extend(outcome.findings)
        skipped.extend(outcome.skipped)
        facts.update(outcome.facts)

    if rank_report is not None:
        findings = _explain_by_ranks(findings, rank_report)
        facts["spikes"] = [
            s for s in facts.get("spikes", []) if not _after_rank_onset(s.onset_step, rank_report)
        ]
    findings = [f for f in findings if f.code not in dropped_codes]
    findings.sort(key=lambda f: (-int(f.severity), f.step if f.step is not None else -1))
    verdict = walk(run.source, findings, skipped, facts)
    preview, preview_steps = _preview(view)
    return Analysis(
        source=run.source,
        verdict=verdict,
        findings=findings,
        skipped=skipped,
        rank_report=rank_report,
        loss_preview=preview,
        extras={
            "spike_markers": [s.onset_step for s in facts.get("spikes", [])],
            "preview_steps": preview_steps,
        },
    )


def ranks(
    source: Any,
    config: Thresholds | None = None,
    *,
    metric: str = "loss",
    options: ReadOptions | None = None,
):
    """The per-rank outlier report (spec 5) for a run with ranks."""
    from stabilitycli.detect.ranks.check import find_rank_outliers

    run = load_run(source, options)
    return find_rank_outliers(run, metric, config or Thresholds())


def _rank_check(run: RunData, thresholds: Thresholds):
    try:
        from stabilitycli.detect.ranks.check import find_rank_outliers
    except ImportError:  # the per-rank detector is optional until it lands
        return None, []
    metric = "loss" if "loss" in run.frame.columns else run.metric_columns[0]
    report = find_rank_outliers(run, metric, thresholds)
    # the loss report already carries throughput stragglers when tokens/s is logged
    return report, list(report.findings())


def _named_outliers(report) -> list:
    """Outliers that move the mean: a level shift or a non-finite rank, with a named rank."""
    return [o for o in report.outliers if o.kind in ("level", "nonfinite") and o.rank is not None]


def _after_rank_onset(step: int | None, report) -> bool:
    onsets = [o.onset_step for o in _named_outliers(report)]
    return step is not None and bool(onsets) and step >= min(onsets) - 3


def _explain_by_ranks(findings: list[Finding], report) -> list[Finding]:
    """A spike or drift of the mean that starts with a rank outlier is that outlier's doing."""
    out = []
    for f in findings:
        if f.code in ("spike", "divergence", "plateau") and _after_rank_onset(f.step, report):
            ranks = sorted({o.rank for o in _named_outliers(report)})
            out.append(
                Finding(
                    f.code,
                    Severity.INFO,
                    f"{f.message} - explained by rank outlier(s) {', '.join(map(str, ranks))}, not an optimisation problem",
                    step=f.step,
                    end_step=f.end_step,
                    metric=f.metric,
                    evidence={**f.evidence, "explained_by_ranks": ranks},
                )
            )
        else:
            out.append(f)
    return out


def _preview(view, points: int = 60) -> tuple[list[float], list[int]]:
    """A downsampled loss curve for sparklines (max per bucket, so spikes show), and each bucket's first step."""
    if not view.has("loss"):
        return [], []
    steps, loss = view.points("loss")
    if loss.size <= points:
        return [float(v) for v in loss], [int(s) for s in steps]
    edges = np.linspace(0, loss.size, points + 1).astype(int)
    out = []
    for a, b in itertools.pairwise(edges):  # loop over 60 buckets, not rows
        chunk = loss[a:b]
        finite = chunk[np.isfinite(chunk)]
        out.append(float(finite.max()) if finite.size == chunk.size else float("nan"))
    return out, [int(s) for s in steps[edges[:-1]]]
