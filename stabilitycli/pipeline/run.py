"""The library entry points: read -> (ranks) -> rules -> classifier -> Analysis."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Analysis, Coverage, Finding, Skip, SourceInfo
from stabilitycli.frame import RunData, from_wide
from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions


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
    derived: dict[str, Any] | None = None,
) -> Analysis:
    """Run every selected rule (per-rank check first) and walk the §1-§4 tree over one run.

    `derived`: what the rules measure once on the view (`SeriesView.derived`), given in and
    handed back: an entry given is taken as measured (a watch's judgment of the run's last
    lines takes the noise memory measured on the whole run), and what the rules measured is
    put in."""
    from stabilitycli.classify.ranks import attribute_to_ranks
    from stabilitycli.classify.tree import walk
    from stabilitycli.detect.facts import Facts
    from stabilitycli.detect.log_words import read_log_words
    from stabilitycli.detect.lr_plan import recognise_plan
    from stabilitycli.detect.registry import load_rules, select_rules
    from stabilitycli.detect.series import build_view
    from stabilitycli.pipeline.basis import headline_basis, series_read
    from stabilitycli.pipeline.memory import release_freed
    from stabilitycli.pipeline.rules import run_rules, started_early

    thresholds = config or Thresholds()
    run = load_run(source, options)
    # the read's numpy temporaries (the screen, the sort by rank) go before the rules
    release_freed()
    if "loss" not in run.frame.columns and not _scaler_columns(run):
        run.require_loss()
    rules, dropped_codes = select_rules(select, ignore)
    ignored = frozenset(code.strip() for code in ignore or [])
    facts = Facts(ignored=ignored)
    # the rank check reads the run, not the view: it starts while the view is built
    with started_early(rules, run, thresholds, facts) as started:
        view = build_view(run)
        if derived:
            view.derived.update(derived)
        facts.lr_plan = recognise_plan(view, thresholds)
        findings, skipped = run_rules(rules, view, thresholds, facts, run.frame.height, started)

    facts.log_words = read_log_words(view)
    if derived is not None:
        derived.update(view.derived)
    ran = [rule.code for rule in rules]
    not_run = tuple(code for code in load_rules() if code not in ran)
    coverage = _coverage(ran, not_run, skipped)
    read = series_read(view, rules, coverage)
    coverage = replace(coverage, series=tuple(read))
    findings = attribute_to_ranks(findings, facts, thresholds)
    findings = [f for f in findings if f.code not in dropped_codes]
    _forget_dropped(facts, dropped_codes)
    # a fixed order that does not depend on the order the rules ran in
    findings.sort(
        key=lambda f: (-int(f.severity), f.step if f.step is not None else -1, f.code, f.rank or -1)
    )
    verdict = walk(
        run.source,
        findings,
        skipped,
        facts,
        thresholds,
        not_run=not_run,
        basis=headline_basis(read),
    )
    if "loss" not in run.frame.columns and verdict.section != "3":
        # only the loss scaler's own evidence decides a run whose loss was not read
        run.require_loss()
    preview, preview_steps = _preview(view)
    extras: dict[str, Any] = {
        "spike_markers": [s.onset_step for s in facts.spikes],
        "preview_steps": preview_steps,
    }
    if facts.overflow_ledger is not None:
        extras["overflow_ledger"] = facts.overflow_ledger.to_dict()
    if facts.lr_plan is not None and facts.lr_plan.describes_more_than_warmup():
        extras["lr_schedule"] = facts.lr_plan.to_dict()
    if ignored:
        extras["ignored"] = sorted(ignored)
    return Analysis(
        source=run.source,
        verdict=verdict,
        findings=findings,
        skipped=skipped,
        rank_report=facts.rank_report,
        loss_preview=preview,
        coverage=coverage,
        extras=extras,
        source_lines=_source_lines(run, findings),
    )


def _scaler_columns(run: RunData) -> bool:
    """The log holds a loss scaler's evidence, which can decide §3 without a loss."""
    from stabilitycli.detect.overflow_ledger import AT_MINIMUM, ATTEMPTED

    # every column the ledger reads: a log of `already at minimum` lines alone decides §3
    return any(c in run.frame.columns for c in ("loss_scale", "overflow", ATTEMPTED, AT_MINIMUM))


def _forget_dropped(facts: Any, dropped: set[str]) -> None:
    """What the tree reads of an ignored finding code goes with it: the verdict, its cause
    and its remedies rest on no code the user asked to ignore."""
    if "recurring-spikes" in dropped and facts.recurring_spikes:
        grouped = set(facts.recurring_spikes["steps"])
        facts.spikes = [s for s in facts.spikes if s.onset_step not in grouped]
        facts.recurring_spikes = None
    if "blip" in dropped:
        facts.blips = []


def _source_lines(run, findings: list[Finding]) -> dict[tuple[int, int | None], int]:
    """The file line of each finding's step (and rank), from the frame's `lines`."""
    import polars as pl

    steps = sorted({f.step for f in findings if f.step is not None})
    at = run.lines_at(steps) if steps else None
    if at is None:
        return {}
    first = at.group_by("step").agg(pl.col("source_line").min())
    out: dict[tuple[int, int | None], int] = {
        (int(step), None): int(line)
        for step, line in first.iter_rows()  # a row per step
    }
    if "rank" in at.columns:
        for step, rank, line in at.select("step", "rank", "source_line").iter_rows():
            out[(int(step), int(rank))] = int(line)
    return out


def _coverage(ran: list[str], not_run: tuple[str, ...], skipped: list[Skip]) -> Coverage:
    """Rules that answered, and rules that could not (their own reason) or were not selected."""
    reasons: dict[str, str] = {}
    for skip in skipped:
        reasons.setdefault(skip.code, skip.reason)
    not_checked = [Skip(code, reasons[code]) for code in ran if code in reasons]
    not_checked += [Skip(code, "not selected (--select/--ignore)") for code in not_run]
    return Coverage(tuple(c for c in ran if c not in reasons), tuple(not_checked))


def ranks(
    source: Any,
    config: Thresholds | None = None,
    *,
    metric: str = "loss",
    options: ReadOptions | None = None,
):
    """The per-rank outlier report (spec 5) for a run with ranks."""
    run = load_run(source, options)
    return rank_report(run, metric, config or Thresholds())


def rank_report(run: RunData, metric: str, thresholds: Thresholds):
    """`find_rank_outliers`, with the second core lent to it (its throughput cohort is
    judged beside the metric's) unless the process runs under a memory cap, where the two
    cohorts' temporaries at once would not fit."""
    import os

    from stabilitycli.core import threads
    from stabilitycli.core.memory_cap import memory_capped
    from stabilitycli.detect.ranks.check import find_rank_outliers

    spare = (os.cpu_count() or 1) > 1 and not memory_capped()
    with threads.lending(2 if spare else 1):
        return find_rank_outliers(run, metric, thresholds)


def _preview(view, points: int = 60) -> tuple[list[float], list[int]]:
    """A downsampled loss curve for sparklines (max per bucket, so spikes show), and each bucket's
    first step."""
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
        out.append(float(finite.max()) if finite.size == chunk.size else np.nan)
    return out, [int(s) for s in steps[edges[:-1]]]
