"""Result types shared by ingesters, detectors, the classifier and renderers.

Everything here is plain data: no I/O, no polars. `to_dict()` methods produce
exactly the shapes of `docs/contract.md`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, field
from enum import IntEnum
from typing import Any

from stabilitycli.core.quantity_schema import COMMON, Evidence, Schema
from stabilitycli.core.records import dataclass


class Severity(IntEnum):
    """Ordered so that `max()` over findings gives the worst one."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    @classmethod
    def parse(cls, name: str) -> Severity:
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {name!r} (use info, warning or error)") from None

    def __str__(self) -> str:
        return self.name.lower()


# every kind declared so far, by code: a kind registers itself when it is made
_KINDS: dict[str, FindingKind] = {}
# how a kind is found by its code in another process (a pickled finding crossing a pool):
# the package that declares the kinds sets it when imported, so this basement module
# never names the layer above it
_LOOKUP: list[Callable[[str], FindingKind]] = []


@dataclass(frozen=True, eq=False)
class FindingKind:
    """Everything one finding code means, declared once, beside the rule that emits it.

    Readers ask the kind (`finding.kind.meaning`, `finding.kind is SPIKE`) instead of
    keeping tables keyed by the code. Texts are `str.format` templates over the
    `Thresholds` fields, filled with the thresholds in force where they are shown.
    """

    code: str
    rule: str  # the rule that emits it (`stab explain RULE`, `--select RULE`)
    section: str  # its section of the stability tree ("1"-"5")
    severity: Severity  # what `finding()` gives unless the rule says otherwise
    meaning: str  # what it means, in plain words (`stab explain CODE`)
    todo: str  # what to do about it
    why: str  # why it matters: what it costs the run when it is ignored
    # per evidence key, what the number is (`quantity_schema.Spec`); keys a later stage may add
    # to any finding (`COMMON`) are added here
    evidence: Schema = field(default_factory=dict)
    # its evidence as a typed dataclass; when given, `evidence` is read off its fields
    evidence_type: type[Evidence] | None = None
    question: str | None = None  # the tree question it answers ("Q2.1"), if any
    # the post-mortem incident it opens, as the document's headline names it ("": none)
    incident: str = ""
    marker: str = ""  # the plot marker it is drawn with ("": not drawn on its own)

    def __post_init__(self) -> None:
        if self.code in _KINDS:
            raise ValueError(f"finding kind {self.code!r} declared twice")
        declared = self.evidence_type.schema() if self.evidence_type else self.evidence
        object.__setattr__(self, "evidence", {**COMMON, **declared})
        _KINDS[self.code] = self

    def finding(self, message: str, *, severity: Severity | None = None, **where: Any) -> Finding:
        """A finding of this kind at its default severity unless the rule chooses one."""
        return Finding(self, self.severity if severity is None else severity, message, **where)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # one object per code in every process: a kind crossing a process pool is looked up
        # there by the declaring package's own function, which the unpickler imports
        return _LOOKUP[0], (self.code,)

    def __repr__(self) -> str:
        return f"FindingKind({self.code!r})"


def declared_kinds() -> Mapping[str, FindingKind]:
    """The kinds declared so far, by code, in declaration order.

    `stabilitycli.detect.kinds.all_kinds()` declares them all first; ask that one.
    """
    return _KINDS


def set_kind_lookup(lookup: Callable[[str], FindingKind]) -> None:
    """Called once by the package that declares the kinds (see `_LOOKUP`)."""
    _LOOKUP[:] = [lookup]


def _kind_for(code: str) -> FindingKind:
    if _LOOKUP:
        return _LOOKUP[0](code)
    return _KINDS[code]


@dataclass(frozen=True)
class Finding:
    """One thing a rule saw in the run, with the numbers behind it."""

    kind: FindingKind
    severity: Severity
    message: str
    step: int | None = None
    end_step: int | None = None
    rank: int | None = None
    metric: str | None = None
    # typed (`quantity_schema.Evidence`, declared beside the kind); a dict is accepted too
    # (a finding written out by hand, or one a later stage re-labels), read the same way
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.kind, str):  # a finding written out by hand (tests, notebooks)
            object.__setattr__(self, "kind", _kind_for(self.kind))

    @property
    def code(self) -> str:
        return self.kind.code

    def to_dict(self) -> dict[str, Any]:
        # walked only where a finding is written out: a run without findings never loads the
        # walk and its Protocol classes (start-up, #40)
        from stabilitycli.core.quantities import quantities

        return {
            "code": self.code,
            "severity": str(self.severity),
            "step": self.step,
            "end_step": self.end_step,
            "rank": self.rank,
            "metric": self.metric,
            "message": self.message,
            "evidence": jsonable(self.evidence),
            # what each evidence number is (a point at step S, a mean over steps A-B...)
            "quantities": [q.to_dict() for q in quantities(self)],
        }


@dataclass(frozen=True)
class Skip:
    """A rule that could not answer: said out loud, never a silent pass."""

    code: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class Restart:
    """The step went backwards: the run was resumed from a checkpoint."""

    at_row: int
    resumed_from_step: int
    last_step_before: int
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "at_row": self.at_row,
            "resumed_from_step": self.resumed_from_step,
            "last_step_before": self.last_step_before,
        }
        if self.rank is not None:
            out["rank"] = self.rank
        return out


@dataclass(frozen=True)
class Rejection:
    """A row that was read but not used, and why (line/record number 1-based)."""

    line: int | None
    reason: str


@dataclass
class SourceInfo:
    """What was read, how, and how every row was accounted for."""

    path: str
    format: str
    run: str | None = None
    dtype: str | None = None
    dtype_origin: str = "unknown"
    metrics: dict[str, str] = field(default_factory=dict)
    # how each mapped metric was found: "alias" (the table), "name" (its words),
    # "--metric" (the user), "validation" (a validation loss standing in for the loss)
    metric_origin: dict[str, str] = field(default_factory=dict)
    rows_read: int = 0
    rows_used: int = 0
    rows_rejected: int = 0
    # rows a resume rewrote: good rows of the abandoned trajectory, kept aside to compare,
    # neither used nor rejected (rows_read = rows_used + rows_rejected + rows_rewritten)
    rows_rewritten: int = 0
    # text logs only: lines that are not records (banners, tables, progress bars, blank
    # lines), counted apart from the rows; a rejected record is a row, not skipped text
    lines_skipped: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    rejection_counts: dict[str, int] = field(default_factory=dict)
    restarts: list[Restart] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_step: int | None = None
    last_step: int | None = None
    ranks: int | None = None
    vocab_size: int | None = None
    # the program that wrote the log when the format alone does not say (the trainer whose
    # stdout `kvlog` recognised: "nanoGPT", "torchtitan"...); `detect.log_words` reads it
    writer: str | None = None
    # text logs: the other text formats tried when the one that claimed the log found no
    # loss, each with what it found (`ingest.fallback`); the no-loss error names them
    tried: list[str] = field(default_factory=list)
    # steps a text reader gave to loss-scale messages that print none, by their order among
    # the log's lines (DeepSpeed overflow messages before the first step line), with how they
    # were numbered: numbers, not optimizer steps (the loss-scale findings say so)
    line_order_steps: dict[int, str] = field(default_factory=dict)

    def steps_text(self) -> str:
        """'steps A–B', and which of its ends number loss-scale messages by their order among
        the log's lines (`line_order_steps`): such an end is no optimizer step."""
        span = f"steps {self.first_step}–{self.last_step}"
        steps = (self.first_step, self.last_step)
        ends = sorted({s for s in steps if s is not None and s in self.line_order_steps})
        if not ends:
            return span
        from stabilitycli.core.numfmt import step_runs

        return (
            f"{span} (step(s) {step_runs(ends)} number loss-scale messages by their order "
            "among the log's lines, not optimizer steps)"
        )

    def reject(self, line: int | None, reason: str, keep_first: int = 5) -> None:
        self.rows_rejected += 1
        self.rejection_counts[reason] = self.rejection_counts.get(reason, 0) + 1
        if len(self.rejections) < keep_first:
            self.rejections.append(Rejection(line, reason))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "run": self.run,
            "rows": self.rows_read,
            "rows_used": self.rows_used,
            "rows_rejected": self.rows_rejected,
            "rows_rewritten": self.rows_rewritten,
            "lines_skipped": self.lines_skipped,
            "rejected": [asdict(r) for r in self.rejections],
            "rejection_counts": dict(self.rejection_counts),
            "first_step": self.first_step,
            "last_step": self.last_step,
            "ranks": self.ranks,
            "dtype": self.dtype,
            "dtype_origin": self.dtype_origin,
            "metrics": dict(self.metrics),
            "metric_origin": dict(self.metric_origin),
            "restarts": [r.to_dict() for r in self.restarts],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class PathStep:
    """One question of the tree, its answer and the numbers it rests on."""

    question: str
    answer: str
    evidence: str

    def to_dict(self) -> dict[str, str]:
        return {"question": self.question, "answer": self.answer, "evidence": self.evidence}


@dataclass(frozen=True)
class SeriesRead:
    """One series the checks read: how much of it there is, and which checks judged it."""

    series: str  # the column: a canonical name (loss, eval_loss), or the key it was logged under
    key: str  # the key the log wrote it under ("ranks": the per-rank loss)
    role: str  # train | eval | ranks | other
    points: int  # logged points (evaluations for an eval series; ranks for "ranks")
    first_step: int | None
    last_step: int | None
    checks: tuple[str, ...]  # rule codes that answered on it

    def words(self) -> str:
        """'loss 2,000 points (steps 0-1999)', 'eval_loss 20 evaluations (steps 100-2000)',
        '8 ranks'."""
        if self.role == "ranks":
            return f"{self.points:,} ranks"
        unit = "evaluation" if self.role == "eval" else "point"
        unit += "" if self.points == 1 else "s"
        steps = (
            f" (steps {self.first_step}-{self.last_step})" if self.first_step is not None else ""
        )
        return f"{self.series} {self.points:,} {unit}{steps}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "key": self.key,
            "role": self.role,
            "points": self.points,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "checks": list(self.checks),
        }


@dataclass(frozen=True)
class Verdict:
    code: str
    cause: str | None
    section: str | None
    summary: str
    path: list[PathStep]
    remediation: list[str]
    severity: Severity
    # what a verdict rests on: the main series and the checks that judged them
    basis: tuple[SeriesRead, ...] = ()
    # the cause is the usual one for what the log shows (from the dtype), not seen in it
    cause_inferred: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "cause": self.cause,
            "cause_inferred": self.cause_inferred,
            "section": self.section,
            "severity": str(self.severity),
            "summary": self.summary,
            "path": [p.to_dict() for p in self.path],
            "remediation": list(self.remediation),
            "basis": [b.to_dict() for b in self.basis],
        }


@dataclass(frozen=True)
class Coverage:
    """Which checks ran to an answer on this run, and which could not and why.

    A verdict is only as good as what was checked: every output says this in
    one line, so "healthy" never hides a check that could not run.
    """

    checked: tuple[str, ...]
    not_checked: tuple[Skip, ...]
    series: tuple[SeriesRead, ...] = ()  # every series read, with the checks that judged it

    def line(self) -> str:
        text = "checked: " + (", ".join(self.checked) or "nothing")
        if self.not_checked:
            text += "; not checked: " + "; ".join(
                f"{s.code} ({s.reason})" for s in self.not_checked
            )
        if self.series:
            text += "; series read: " + self.series_line()
        return text

    def series_line(self) -> str:
        """'loss (2,000 points, steps 0-1999): nan, spike; eval_loss 'eval/loss' (...): ...'."""
        return "; ".join(
            f"{s.words()}{'' if s.key in (s.series, 'ranks') else f' ({s.key!r})'}: "
            + ", ".join(s.checks)
            for s in self.series
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": list(self.checked),
            "not_checked": [{"check": s.code, "reason": s.reason} for s in self.not_checked],
            "summary": self.line(),
            "series": [s.to_dict() for s in self.series],
        }


@dataclass
class Analysis:
    """The whole answer for one run: what `stabilitycli.analyze` returns."""

    source: SourceInfo
    verdict: Verdict
    findings: list[Finding]
    skipped: list[Skip]
    rank_report: Any = None
    loss_preview: list[float] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    coverage: Coverage | None = None
    # the file line of each finding's step ((step, rank) -> line; rank None: the step's first
    # line over ranks), for a line-based log only: what annotations point at. Not in the JSON
    source_lines: dict[tuple[int, int | None], int] = field(default_factory=dict)

    def line_of(self, finding: Finding) -> int | None:
        """The file line of `finding`'s onset, when the log has lines."""
        if finding.step is None:
            return None
        return self.source_lines.get((finding.step, finding.rank)) or self.source_lines.get(
            (finding.step, None)
        )

    @property
    def worst_severity(self) -> Severity | None:
        levels = [f.severity for f in self.findings]
        return max(levels) if levels else None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema": "stab.analysis/1",
            "source": self.source.to_dict(),
            "verdict": self.verdict.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "skipped": [s.to_dict() for s in self.skipped],
        }
        if self.coverage is not None:
            out["coverage"] = self.coverage.to_dict()
        if self.rank_report is not None:
            out["ranks"] = self.rank_report.to_dict()
        for key, value in self.extras.items():
            out[key] = jsonable(value)
        return out


def jsonable(value: Any) -> Any:
    """Numbers that JSON cannot hold (NaN, Inf) become the strings 'NaN'/'Infinity'."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Mapping):  # a dict, or typed evidence read as one
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return jsonable(value.item())
    return value
