"""The `stab` command line: parse arguments, call the library, render, exit.

No thresholds and no detection logic here; polars is never imported at module
level so `stab --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from typing import Annotated

import typer

from stabilitycli.commands._common import fail, pairs
from stabilitycli.errors import StabInputError, StabUsageError
from stabilitycli.ingest import SUPPORTED

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="stab: read an ML training run's metric logs and say what went wrong.\n\n"
    "Exit status: 0 nothing at/above --fail-on, 1 instability found, 2 bad input or usage.",
)


class OutputFormat(StrEnum):
    terminal = "terminal"
    json = "json"
    github = "github"
    junit = "junit"
    markdown = "markdown"


class FailOn(StrEnum):
    info = "info"
    warning = "warning"
    error = "error"


def split_codes(values: list[str] | None) -> list[str]:
    return [c.strip() for v in values or [] for c in v.split(",") if c.strip()]


MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        "-m",
        help="Map a canonical metric to a log key, e.g. loss=train/my_loss (repeatable).",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a threshold, e.g. spike_sigma=4 (repeatable; "
        "see `stab explain thresholds`).",
    ),
]


@app.command(epilog=f"Inputs: {SUPPORTED}")
def analyze(
    path: Annotated[
        list[str],
        typer.Argument(
            help="Log file(s), directories or URIs (formats below); "
            "several runs are analysed in parallel."
        ),
    ],
    output: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="Output format.")
    ] = OutputFormat.terminal,
    fail_on: Annotated[
        FailOn, typer.Option(help="Lowest finding severity that exits 1.")
    ] = FailOn.error,
    metric: MetricOpt = None,
    step_key: Annotated[str | None, typer.Option(help="Log key holding the step.")] = None,
    rank_key: Annotated[str | None, typer.Option(help="Log key holding the rank.")] = None,
    format_in: Annotated[
        str | None, typer.Option(help="Input format, when detection guesses wrong.")
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="dtype regime: fp32, fp16 or bf16.")] = None,
    select: Annotated[
        list[str] | None, typer.Option(help="Only these rule/finding codes (comma list).")
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option(help="Skip these rule/finding codes (comma list).")
    ] = None,
    set_values: SetOpt = None,
    run: Annotated[
        str | None, typer.Option(help="Run id or name inside a store with several runs.")
    ] = None,
    experiment: Annotated[str | None, typer.Option(help="Experiment name or id (MLflow).")] = None,
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow tracking server URI.")] = None,
    rank_pattern: Annotated[
        str | None, typer.Option(help="Regex with one group: the rank in a file name.")
    ] = None,
    include_deleted: Annotated[
        bool, typer.Option(help="Also read MLflow runs marked deleted.")
    ] = False,
    recursive: Annotated[
        bool,
        typer.Option(
            "--recursive",
            "-r",
            help="Find every run inside the directories given (a run directory is one run).",
        ),
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", min=1, help="Worker processes for several runs (default: all cores)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Walk the §1-§4 stability tree over one run (or many) and print the verdict."""
    from stabilitycli.ingest.options import ReadOptions

    try:
        options = ReadOptions(
            format_in=format_in,
            metric_overrides=pairs(metric, "--metric"),
            step_key=step_key,
            rank_key=rank_key,
            dtype=dtype,
            run=run,
            experiment=experiment,
            tracking_uri=tracking_uri,
            rank_pattern=rank_pattern,
            include_deleted=include_deleted,
        )
    except StabUsageError as err:
        raise fail(str(err)) from None
    if len(path) > 1 or recursive:
        raise typer.Exit(
            _analyze_many(
                path, recursive, jobs, quiet, output, fail_on, options, select, ignore, set_values
            )
        )
    target = path[0]
    try:
        thresholds = _thresholds(target, set_values)
        from stabilitycli.pipeline import run as pipeline

        result = pipeline.analyze(
            target,
            thresholds,
            options=options,
            select=split_codes(select),
            ignore=split_codes(ignore),
        )
    except (StabInputError, StabUsageError) as err:
        raise fail(str(err)) from None
    except Exception as err:
        raise _internal(err, target) from None
    _render(result, output, fail_on)
    from stabilitycli.exit_codes import exit_code_for
    from stabilitycli.model import Severity

    raise typer.Exit(int(exit_code_for(result.worst_severity, Severity.parse(fail_on.value))))


def _thresholds(path: str, set_values: list[str] | None):
    from stabilitycli.config import load_config

    return load_config(path, pairs(set_values, "--set"))


def _render(result, output: OutputFormat, fail_on: FailOn = FailOn.error) -> None:
    if output is OutputFormat.json:
        from stabilitycli.report import json_report

        typer.echo(json_report.render(result))
        return
    if output in (OutputFormat.github, OutputFormat.markdown):
        from stabilitycli.report import github, markdown

        typer.echo((github if output is OutputFormat.github else markdown).render(result), nl=False)
        return
    if output is OutputFormat.junit:
        from stabilitycli.model import Severity
        from stabilitycli.report import junit

        typer.echo(junit.render(result, Severity.parse(fail_on.value)), nl=False)
        return
    from rich.console import Console

    from stabilitycli.report import terminal

    terminal.render(result, Console())


def _analyze_many(
    targets, recursive, jobs, quiet, output, fail_on, options, select, ignore, set_values
) -> int:
    """Several runs: the library finds and analyses them (stabilitycli.pipeline.batch); here only
    the output."""
    from stabilitycli.pipeline import batch
    from stabilitycli.report.batch_report import fragment_renderer

    try:
        settings = batch.BatchSettings(
            options=options,
            set_values=pairs(set_values, "--set"),
            select=tuple(split_codes(select)),
            ignore=tuple(split_codes(ignore)),
            fail_on=fail_on.value,
            render_fragment=fragment_renderer(output.value, fail_on.value)
            if output in (OutputFormat.github, OutputFormat.junit, OutputFormat.markdown)
            else None,
        )
        from stabilitycli.detect.registry import select_rules

        select_rules(
            list(settings.select), list(settings.ignore)
        )  # a bad code is a usage error, not N failures
    except StabUsageError as err:
        raise fail(str(err)) from None
    paths = batch.discover(targets, recursive)
    if not paths:
        raise fail(f"no runs found in {', '.join(targets)}")
    results = _with_progress(paths, settings, jobs, quiet)
    from stabilitycli.report import batch_report

    if output is OutputFormat.json:
        typer.echo(batch_report.jsonl(results), nl=False)
    elif output is OutputFormat.terminal:
        from rich.console import Console

        Console().print(batch_report.terminal_table(results))
    else:
        typer.echo(getattr(batch_report, output.value)(results), nl=False)
    for r in results:
        if not r.ok:
            typer.echo(f"stab: error: {r.error}", err=True)
    return batch.exit_status(results, fail_on.value)


def _with_progress(paths, settings, jobs, quiet):
    from stabilitycli.pipeline import batch

    if quiet or not sys.stderr.isatty():
        return batch.analyze_many(paths, settings, jobs)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("analysing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("runs", total=len(paths))
        return batch.analyze_many(paths, settings, jobs, on_done=lambda _r: progress.advance(task))


def _internal(err: Exception, path: str) -> typer.Exit:
    if os.environ.get("STAB_DEBUG"):
        raise err
    return fail(
        f"{path}: internal error {type(err).__name__}: {err} (set STAB_DEBUG=1 for a traceback)"
    )


@app.command()
def explain(
    code: Annotated[
        str | None,
        typer.Argument(
            help="A rule, finding or verdict code; 'thresholds'; or nothing for the list."
        ),
    ] = None,
) -> None:
    """Print the documentation of a rule, finding code or verdict."""
    from stabilitycli.commands.explain import explain_text

    try:
        typer.echo(explain_text(code))
    except StabUsageError as err:
        raise fail(str(err)) from None


def _register_commands() -> None:
    """Sub-commands that live in `stabilitycli/commands/` (each exposes `command`)."""
    import importlib

    for name in ("ranks", "compare", "postmortem", "report"):
        try:
            module = importlib.import_module(f"stabilitycli.commands.{name}")
        except ModuleNotFoundError as err:
            if err.name and err.name.endswith(f"commands.{name}"):
                continue  # not built yet
            raise
        app.command(name)(module.command)


_register_commands()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
