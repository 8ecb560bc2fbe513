"""Rendering many runs at once (`stab analyze a b c`, `--recursive`).

Each run's own rendering (a CI fragment) was made in its worker by the
single-run renderers; this module only puts them together with a summary.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from stabilitycli.core.settings import sentence
from stabilitycli.pipeline.batch import RunResult, summary_rows
from stabilitycli.report import escape
from stabilitycli.report import github as gh

_VERDICT_STYLE = {"error": "bold red", "warning": "yellow", "info": "green"}


def jsonl(results: list[RunResult]) -> str:
    """JSON Lines: one stab.analysis/1 document per run, or a stab.error/1 record."""
    lines = [json.dumps(r.doc if r.ok else r.failure_record(), allow_nan=False) for r in results]
    return "\n".join(lines) + ("\n" if lines else "")


def github(results: list[RunResult]) -> str:
    out = []
    for r in results:
        out.append(
            r.fragment.rstrip("\n")
            if r.ok and r.fragment
            else gh.annotation("error", r.path, "stab: unreadable run", r.error or "")
        )
    return "\n".join(out) + "\n"


def concise(results: list[RunResult]) -> str:
    """Each run's finding lines (its fragment), an unreadable run as one `path: ERROR` line."""
    out = []
    for r in results:
        if r.ok and r.fragment:
            out.append(r.fragment.rstrip("\n"))
        elif not r.ok:
            reason = escape.plain(" ".join((r.error or "").split()))
            out.append(f"{escape.plain_path(r.path)}: ERROR unreadable run: {reason}")
    return "\n".join(o for o in out if o) + "\n"


def junit(results: list[RunResult]) -> str:

    from stabilitycli.report import junit as ju

    suites = [
        ET.fromstring(r.fragment) if r.ok and r.fragment else ju.error_suite(r.path, r.error or "")
        for r in results
    ]
    return ju.wrap(suites)


def markdown(results: list[RunResult]) -> str:
    rows = summary_rows(results)
    lines = [
        f"## stab: {len(results)} runs",
        "",
        "| run | verdict | cause | first bad step | rows |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {escape.markdown_cell(row['run'])} | `{row['verdict']}` | {row['cause'] or ''} | "
            f"{'' if row['first_bad_step'] is None else row['first_bad_step']} | "
            f"{'' if row['rows'] is None else row['rows']} |"
        )
    lines.append("")
    for r in results:
        if r.ok and r.fragment:
            lines += [r.fragment.rstrip("\n"), ""]
        elif not r.ok:
            lines += [
                f"### ⛔ unreadable — {escape.markdown(r.path)}",
                "",
                escape.markdown(r.error or ""),
                "",
            ]
    return escape.markdown_document("\n".join(lines).rstrip() + "\n")


def terminal_table(results: list[RunResult]):
    """A rich Table: run, verdict, cause, first bad step, rows (unreadable runs marked as such);
    on a console too narrow for its columns, one bullet per run instead.

    Run names and paths go in as `Text` (never parsed as rich markup), controls shown."""
    from rich.console import Group
    from rich.text import Text

    from stabilitycli.report.layout import Fitted, Natural, Widest, bullets

    rows = summary_rows(results)
    # the run name matters most: it keeps 20 columns, folded if longer; the probe, with
    # every name cut to 20, measures how narrow the table can be with that fold
    title = _title(results)
    table, probe = _table(title, rows), _table(title, rows, cut=True)
    # thresholds not at their defaults (the same for every run unless config files differ)
    said = dict.fromkeys(
        s for r in results if r.ok and r.doc and (s := sentence(r.doc.get("settings")))
    )
    caption = Text("\n".join(escape.terminal(s) for s in said), style="bold yellow")
    if said:
        table.caption = probe.caption = caption

    def stacked(width_cells: int | None) -> Group:
        # a path is one word: too long for the bullet, it keeps its end (stderr has it whole)
        room = None if width_cells is None else width_cells - 4
        items = [_run_words(row, room) for row in rows]
        return Group(bullets(f"{title}:", items, ""), *([caption] if said else []))

    return escape.CommandGuard(Widest(Natural(table), Fitted(stacked), probe))


_RUN_CELLS = 20


def _table(title: str, rows: list[dict], cut: bool = False):
    """run, verdict, cause, first bad step, rows; `cut`: each run name cut to its 20 cells."""
    from rich.table import Table
    from rich.text import Text

    def name(text: str) -> Text:
        return Text(escape.terminal(text)[:_RUN_CELLS] if cut else escape.terminal(text))

    table = Table(title=title)
    table.add_column("run", overflow="fold", min_width=_RUN_CELLS)
    # a verdict or a cause is one word: never cut (a narrower console gets the bullets)
    table.add_column("verdict", no_wrap=True)
    table.add_column("cause", no_wrap=True)
    table.add_column("first bad step", justify="right", min_width=7)
    table.add_column("rows", justify="right", min_width=7)
    for row in rows:
        if row["error"]:
            # the reason goes to stderr, one line per run: it would not fit a cell
            table.add_row(name(row["path"]), Text("unreadable", style="bold magenta"), "", "", "")
            continue
        table.add_row(
            name(row["run"]),
            Text(str(row["verdict"]), style=_row_style(row)),
            Text(row["cause"] or ""),
            "" if row["first_bad_step"] is None else str(row["first_bad_step"]),
            "" if row["rows"] is None else f"{row['rows']:,}",
        )
    return table


def _title(results: list[RunResult]) -> str:
    return f"stab: {len(results)} runs"


def _row_style(row: dict) -> str:
    if row["verdict"] in ("healthy", "insufficient-data"):
        return "green"
    return _VERDICT_STYLE.get(row["severity"], "")


def _run_words(row: dict, room: int | None) -> str:
    """One run of the summary as a sentence: `name: verdict (cause), first bad step S, N rows`."""
    from stabilitycli.report.layout import elide_path

    if row["error"]:
        path = escape.terminal(row["path"])
        return f"{path if room is None else elide_path(path, room)}: unreadable"
    words = f"{escape.terminal(row['run'])}: {row['verdict']}"
    if row["cause"]:
        words += f" ({row['cause']})"
    if row["first_bad_step"] is not None:
        words += f", first bad step {row['first_bad_step']}"
    if row["rows"] is not None:
        words += f", {row['rows']:,} rows"
    return words


def render_fragment(analysis, fmt: str, fail_on: str) -> str:
    """One run's CI fragment; batch workers call it through `fragment_renderer`."""
    if fmt == "github":
        return gh.render(analysis)
    if fmt == "markdown":
        from stabilitycli.report import markdown

        return markdown.render(analysis, heading_level=3)
    if fmt == "concise":
        from stabilitycli.report import concise

        return concise.render(analysis, quiet=True)
    if fmt == "junit":
        from stabilitycli.core.model import Severity
        from stabilitycli.report import junit as ju

        return ET.tostring(ju.testsuite(analysis, Severity.parse(fail_on)), encoding="unicode")
    raise ValueError(f"no CI fragment for format {fmt!r}")


def fragment_renderer(fmt: str, fail_on: str):
    """A picklable `render(analysis) -> str` for `BatchSettings.render_fragment`."""
    import functools

    return functools.partial(render_fragment, fmt=fmt, fail_on=fail_on)
