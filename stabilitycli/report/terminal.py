"""The rich terminal rendering of an `Analysis`: headline, path, remedy, findings."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from stabilitycli.core.model import Analysis, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.report.escape import CommandGuard, terminal
from stabilitycli.report.layout import Boxed, Fitted, bullets, elide_path, merge_buckets
from stabilitycli.report.sparkline import sparkline

if TYPE_CHECKING:
    from rich.panel import Panel

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
        inferred = ", inferred" if v.cause_inferred else ""
        headline.append(f"  [cause: {v.cause}{inferred}]", style="cyan")
    # the metrics read get their own line under the panel when the coverage is shown
    mapped_below = verbosity != "quiet" and analysis.coverage is not None
    source = _source_line(analysis, with_metrics=not mapped_below)
    parts.append(_header(headline, src.run, terminal(src.path), terminal(source)))
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
        parts.append(bullets("Remedy:", (terminal(r) for r in v.remediation), "green"))
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
        parts.append(bullets("Notes:", (terminal(n) for n in notes), "dim", mark="-"))
    return Group(*parts)


def _coverage_line(analysis: Analysis) -> Table:
    """What the verdict rests on: the checks that answered, and those that could not; each
    list wraps under itself, right of its label."""
    assert analysis.coverage is not None
    cov = analysis.coverage
    mapping = ", ".join(f"{k}←{v!r}" for k, v in analysis.source.metrics.items())
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("metrics:", Text(terminal(mapping) or "none"))
    schedule = (analysis.extras.get("lr_schedule") or {}).get("summary")
    if schedule:
        grid.add_row("lr schedule:", Text(terminal(schedule)))
    grid.add_row("checked:", Text(", ".join(cov.checked) or "nothing", style="green"))
    if cov.not_checked:
        reasons = "; ".join(f"{s.code} ({s.reason})" for s in cov.not_checked)
        grid.add_row("not checked:", Text(terminal(reasons), style="yellow"))
    if cov.series:
        grid.add_row("series read:", Text(terminal(cov.series_line())))
    return grid


def _header(headline: Text, run: str | None, path: str, source: str) -> Boxed:
    """The verdict in a panel titled with the run, over the path and what was read; in a
    pipe the same lines without the panel, the path whole.

    The path and the source line sit inside the panel, not on its border, where rich
    cuts them mid-word: the source line wraps at spaces, and a path too long for the
    panel keeps its end (the full path is in the JSON)."""

    def make(width_cells: int | None) -> Panel:
        # on a terminal only (a pipe or a file gets `plain`): a piped run does not import it
        from rich.panel import Panel

        inner = None if width_cells is None else width_cells - 4  # borders and padding
        name = terminal(run) if run else ""
        # the title is padded by a space each side inside the top border; a run name too
        # long for it is a line of its own in the panel, where it wraps at spaces
        room = None if inner is None else inner - 2 - cell_len("stab · ")
        titled = bool(name) and (room is None or cell_len(name) <= room)
        title = Text(f"stab · {name}" if titled else "stab")
        named = [Text(f"run: {name}")] if name and not titled else []
        where = path if inner is None else elide_path(path, inner)
        body = Group(headline, Text(""), *named, Text(where), Text(source, style="dim"))
        return Panel(body, title=title)

    named = [Text(f"run: {terminal(run)}")] if run else []
    plain = Group(headline, *named, Text(path), Text(source, style="dim"), Text(""))
    return Boxed(Fitted(make), plain)


def _source_line(analysis: Analysis, with_metrics: bool) -> str:
    s = analysis.source
    metrics = ", ".join(
        f"{k}←{v}" for k, v in s.metrics.items() if k in ("loss", "grad_norm", "lr", "loss_scale")
    )
    metrics = f"; {metrics}" if with_metrics and metrics else ""
    ranks = f", {s.ranks} ranks" if s.ranks else ""
    set_aside = f", {s.rows_rewritten} rewritten by a resume" if s.rows_rewritten else ""
    return (
        f"{s.format}: {s.rows_read} rows read, {s.rows_used} used, {s.rows_rejected} rejected"
        f"{set_aside}; "
        f"{s.steps_text()}{ranks}; dtype {s.dtype or 'unknown'}{metrics}"
    )


def _loss_line(analysis: Analysis) -> Fitted:
    """The loss sparkline, with a ▲ under each bucket where a spike began; on a narrow
    console neighbouring buckets merge (by their maximum, so a spike still shows)."""
    label = "loss "
    markers = analysis.extras.get("spike_markers") or []
    steps = analysis.extras.get("preview_steps") or []

    def make(width_cells: int | None) -> Text:
        room = len(analysis.loss_preview) if width_cells is None else width_cells - len(label)
        values, firsts = merge_buckets(analysis.loss_preview, max(1, room))
        line = sparkline(values)
        text = Text(label)
        text.append(line, style="cyan")
        if not (markers and steps):
            return text
        aligned = len(steps) == len(analysis.loss_preview)
        bucket_steps = [steps[i] for i in firsts] if aligned else []
        under = [" "] * len(line)
        for step in markers:  # a loop over the spikes, not the rows
            bucket = max(0, bisect.bisect_right(bucket_steps, step) - 1)
            under[min(bucket, len(under) - 1)] = "▲"
        said = f" spike(s) at step {', '.join(map(str, markers[:5]))}"
        fits = width_cells is None or len(label) + len(line) + len(said) <= width_cells
        text.append("\n" + " " * len(label) + "".join(under), style="bold red")
        text.append(said if fits else "\n" + " " * len(label) + said.lstrip(), style="bold red")
        return text

    return Fitted(make)


def render(analysis: Analysis, console: Console) -> None:
    console.print(build(analysis))
