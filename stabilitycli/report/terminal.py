"""The rich terminal rendering of an `Analysis`: headline, path, remedy, findings."""

from __future__ import annotations

import bisect

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stabilitycli.model import Analysis, Severity
from stabilitycli.report.escape import CommandGuard, terminal
from stabilitycli.report.sparkline import sparkline
from stabilitycli.settings import sentence

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
_VERDICT_STYLE = {"healthy": "bold green", "insufficient-data": "bold yellow"}


def build(analysis: Analysis, verbosity: str = "normal") -> CommandGuard:
    """`verbosity`: "quiet" (the verdict and the settings line), "normal", or "verbose"
    (every finding, not the first 40).

    Every string that may quote the input goes in as a `Text` (never parsed as rich
    markup) with its control characters shown."""
    return CommandGuard(_build(analysis, verbosity))


def _build(analysis: Analysis, verbosity: str) -> Group:
    v = analysis.verdict
    src = analysis.source
    parts: list[RenderableType] = []
    style = _VERDICT_STYLE.get(v.code, _STYLE.get(v.severity, "bold"))
    headline = Text.assemble((f"{v.code}", style), (f"  {terminal(v.summary)}", ""))
    if v.cause and v.cause not in v.summary:
        headline.append(f"  [cause: {v.cause}]", style="cyan")
    parts.append(
        Panel(
            headline,
            title=Text(f"stab · {terminal(src.run or src.path)}"),
            subtitle=Text(terminal(_source_line(analysis))),
        )
    )
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        parts.append(Text(terminal(settings), style="bold yellow"))
    if verbosity == "quiet":
        return Group(*parts)
    if analysis.coverage is not None:
        parts.append(_coverage_line(analysis))
    if analysis.loss_preview:
        parts.append(_loss_line(analysis))
    path = Table(title="Questions asked", show_lines=False, expand=False)
    path.add_column("Q", style="bold")
    path.add_column("answer")
    path.add_column("evidence", overflow="fold")
    for step in v.path:
        path.add_row(*(Text(terminal(t)) for t in (step.question, step.answer, step.evidence)))
    parts.append(path)
    if v.remediation:
        parts.append(
            Text(
                "Remedy:\n" + "\n".join(f"  • {terminal(r)}" for r in v.remediation),
                style="green",
            )
        )
    if analysis.findings:
        more = len(analysis.findings) - 40 if verbosity != "verbose" else 0
        table = Table(
            title=f"Findings ({len(analysis.findings)}"
            + (f"; the first 40, --verbose shows all {len(analysis.findings)}" if more > 0 else "")
            + ")"
        )
        table.add_column("severity")
        table.add_column("code")
        table.add_column("step", justify="right")
        table.add_column("message", overflow="fold")
        shown = analysis.findings if verbosity == "verbose" else analysis.findings[:40]
        for f in shown:
            at = "" if f.step is None else str(f.step)
            table.add_row(
                Text(str(f.severity), style=_STYLE[f.severity]),
                Text(terminal(f.code)),
                at,
                Text(terminal(f.message)),
            )
        parts.append(table)
    # skipped checks are in the coverage line; without it (a hand-built Analysis) they go here
    skips = [] if analysis.coverage else [f"{s.code}: {s.reason}" for s in analysis.skipped]
    notes = [*src.warnings, *src.notes, *skips]
    if notes:
        parts.append(Text("Notes:\n" + "\n".join(f"  - {terminal(n)}" for n in notes), style="dim"))
    return Group(*parts)


def _coverage_line(analysis: Analysis) -> Text:
    """What the verdict rests on: the checks that answered, and those that could not."""
    assert analysis.coverage is not None
    cov = analysis.coverage
    mapping = ", ".join(f"{k}←{v!r}" for k, v in analysis.source.metrics.items())
    text = Text("metrics: ", style="bold")
    text.append(terminal(mapping) or "none")
    text.append("\nchecked: ", style="bold")
    text.append(", ".join(cov.checked) or "nothing", style="green")
    if cov.not_checked:
        text.append("\nnot checked: ", style="bold")
        text.append(
            terminal("; ".join(f"{s.code} ({s.reason})" for s in cov.not_checked)), style="yellow"
        )
    return text


def _source_line(analysis: Analysis) -> str:
    s = analysis.source
    metrics = ", ".join(
        f"{k}←{v}" for k, v in s.metrics.items() if k in ("loss", "grad_norm", "lr", "loss_scale")
    )
    ranks = f", {s.ranks} ranks" if s.ranks else ""
    set_aside = f", {s.rows_rewritten} rewritten by a resume" if s.rows_rewritten else ""
    return (
        f"{s.format}: {s.rows_read} rows read, {s.rows_used} used, {s.rows_rejected} rejected"
        f"{set_aside}; "
        f"steps {s.first_step}–{s.last_step}{ranks}; dtype {s.dtype or 'unknown'}; {metrics}"
    )


def _loss_line(analysis: Analysis) -> Text:
    """The loss sparkline, with a ▲ under each bucket where a spike began."""
    line = sparkline(analysis.loss_preview)
    text = Text("loss ")
    text.append(line, style="cyan")
    markers = analysis.extras.get("spike_markers") or []
    bucket_steps = analysis.extras.get("preview_steps") or []
    if markers and bucket_steps:
        under = [" "] * len(line)
        for step in markers:
            bucket = max(0, bisect.bisect_right(bucket_steps, step) - 1)
            under[min(bucket, len(under) - 1)] = "▲"
        text.append("\n     " + "".join(under), style="bold red")
        text.append(f" spike(s) at step {', '.join(map(str, markers[:5]))}", style="bold red")
    return text


def render(analysis: Analysis, console: Console) -> None:
    console.print(build(analysis))
