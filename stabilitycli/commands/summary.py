"""`stab summary`: what the latest sweep in a results store found, worst first.

Registered by `cli.py` like the other commands. sqlite3 and the queries
(`stabilitycli.results.summary`) are imported inside the function, so `stab --help`
stays instant. The store is opened read-only.

Exit status by the runs of the sweep, as `stab analyze` of the sweep gave it: 1 when a
run's worst finding is at or above `--fail-on`, 2 when a run could not be read, else 0;
2 as well when the file is not a results store (missing, not SQLite, another program's
database, a newer schema: one line on stderr).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from stabilitycli.commands._common import FailOn, FailOnOpt, boundary, print_rendered
from stabilitycli.core.errors import StabInputError

EPILOG = "Worst first: unreadable, error, warning, insufficient-data, then healthy (--all)."


class SummaryFormat(StrEnum):
    terminal = "terminal"
    json = "json"


def command(
    store: Annotated[
        str, typer.Argument(help="Results store written by `stab analyze --results PATH`.")
    ],
    output: Annotated[
        SummaryFormat, typer.Option("--format", "-f", help="Output format.")
    ] = SummaryFormat.terminal,
    changed: Annotated[
        bool,
        typer.Option(
            "--changed",
            help="Also what changed since the sweep before: new runs, runs gone, verdicts "
            "that changed.",
        ),
    ] = False,
    every_run: Annotated[
        bool, typer.Option("--all", help="List every run, the healthy ones too.")
    ] = False,
    fail_on: FailOnOpt = FailOn.error,
) -> None:
    """Which runs of the latest sweep are not healthy, worst first (and with --changed,
    what changed since the sweep before), from a results store."""
    from stabilitycli.results.store import open_store
    from stabilitycli.results.summary import summarise

    try:
        conn = open_store(store, create=False)
        try:
            doc = summarise(conn, every_run=every_run, changed=changed)
        finally:
            conn.close()
    except StabInputError as err:
        raise boundary(err, store) from None
    if output is SummaryFormat.json:
        typer.echo(json.dumps(doc, allow_nan=False))
    else:
        print_rendered(_terminal(doc, every_run))
    raise typer.Exit(_exit_status(doc["runs"], fail_on))


def _exit_status(runs: list[dict[str, Any]], fail_on: FailOn) -> int:
    """The sweep's exit: 2 if a run was unreadable, 1 if a run's worst finding is at or above
    `fail_on`, else 0 (the runs listed hold every run that is not healthy)."""
    from stabilitycli.core.exit_codes import ExitCode, exit_code_for
    from stabilitycli.core.model import Severity

    if any(run["error"] for run in runs):
        return int(ExitCode.BAD_INPUT)
    levels = [Severity.parse(run["severity"]) for run in runs if run["severity"]]
    return int(exit_code_for(max(levels, default=None), Severity.parse(fail_on.value)))


def _terminal(doc: dict[str, Any], every_run: bool):
    from rich.console import Group
    from rich.text import Text

    from stabilitycli.report import escape

    sweep = doc["sweep"]
    if sweep is None:
        return "stab summary: no sweep in this store yet\n"
    head = (
        f"stab summary: sweep {sweep['id']} ({sweep['finished_at']}): "
        f"{doc['not_healthy']:,} of {sweep['runs']:,} runs not healthy; "
        f"{sweep['analysed']:,} analysed, {sweep['reused']:,} reused"
    )
    parts: list[Any] = [Text(head)]
    if doc["runs"]:
        parts.append(_table("every run" if every_run else "not healthy", doc["runs"]))
    changes = doc.get("changed")
    if changes is not None:
        parts.append(_changes(changes, escape))
    return escape.CommandGuard(Group(*parts))


def _table(title: str, runs: list[dict[str, Any]], was: bool = False):
    from rich.table import Table
    from rich.text import Text

    from stabilitycli.pipeline.batch import relative_names
    from stabilitycli.report import escape
    from stabilitycli.report.layout import Natural

    names = relative_names([run["location"] for run in runs])
    table = Table(title=title, title_justify="left")
    if was:
        table.add_column("was", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("cause", no_wrap=True)
    table.add_column("first bad step", justify="right")
    table.add_column("run", overflow="fold")
    for run, name in zip(runs, names, strict=True):
        cells = [run["previous_verdict"]] if was else []
        step = run["first_bad_step"]
        table.add_row(
            *cells,
            Text(run["verdict"], style=_style(run)),
            Text(run["cause"] or ""),
            "" if step is None else str(step),
            Text(escape.terminal(name)),
        )
    return Natural(table)


def _changes(changes: dict[str, Any], escape):
    from rich.console import Group
    from rich.text import Text

    if changes["previous_sweep"] is None:
        return Text("changed: no earlier sweep to compare with")
    parts: list[Any] = [
        Text(
            f"changed since sweep {changes['previous_sweep']}: {len(changes['new'])} new, "
            f"{len(changes['gone'])} gone, {len(changes['verdict_changed'])} verdicts changed"
        )
    ]
    if changes["verdict_changed"]:
        parts.append(_table("verdict changed", changes["verdict_changed"], was=True))
    if changes["new"]:
        parts.append(_table("new", changes["new"]))
    for gone in changes["gone"]:
        parts.append(Text(f"gone: {escape.terminal(gone['location'])} (was {gone['verdict']})"))
    return Group(*parts)


def _style(run: dict[str, Any]) -> str:
    if run["error"]:
        return "bold magenta"
    return {"error": "bold red", "warning": "yellow"}.get(run["severity"] or "", "green")
