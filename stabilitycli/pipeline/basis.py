"""What a verdict rests on: every series the checks read, how much of it, and which checks
judged it (`coverage.series`, `verdict.basis`, and the words of a healthy headline)."""

from __future__ import annotations

from collections.abc import Iterable

from stabilitycli.core.model import Coverage, SeriesRead
from stabilitycli.detect.eval import EVAL_LOSS, eval_series
from stabilitycli.detect.registry import Rule
from stabilitycli.detect.series import SeriesView

RANKS = "ranks"
# the series a healthy headline names (the rest are in the coverage line)
_HEADLINE_SERIES = ("loss", "loss_scale")


def series_read(view: SeriesView, rules: Iterable[Rule], coverage: Coverage) -> list[SeriesRead]:
    """Every series a check that answered read, the loss first, then the eval series."""
    answered = [r for r in rules if r.code in coverage.checked]
    evals = dict(eval_series(view))
    checks: dict[str, list[str]] = {}
    for rule in answered:
        for name in rule.series:
            # a rule that declares the eval loss judges every eval series the view holds
            for column in evals if name == EVAL_LOSS else (name,):
                if view.has(column):
                    checks.setdefault(column, []).append(rule.code)
    order = ["loss", *evals, *(c for c in checks if c != "loss" and c not in evals)]
    out = []
    for column in order:
        if column not in checks:
            continue
        steps, _ = view.points(column)
        role = "eval" if column in evals else "train" if column == "loss" else "other"
        out.append(
            SeriesRead(
                column,
                evals.get(column) or view.source.metrics.get(column, column),
                role,
                int(steps.size),
                int(steps[0]),
                int(steps[-1]),
                tuple(checks[column]),
            )
        )
    if RANKS in coverage.checked and view.source.ranks:
        out.append(SeriesRead(RANKS, RANKS, RANKS, view.source.ranks, None, None, (RANKS,)))
    return out


def headline_basis(read: list[SeriesRead]) -> tuple[SeriesRead, ...]:
    """The main series a verdict rests on: the loss, the eval series, the ranks, the loss
    scale."""
    return tuple(s for s in read if s.role in ("eval", RANKS) or s.series in _HEADLINE_SERIES)
