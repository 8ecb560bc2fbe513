"""`stab ranks`: find the rank that the mean hides (spec 5, seed 000).

Registered by `cli.py` as `app.command("ranks")(command)`. polars is imported
only inside the function, so `stab --help` stays instant.

Exit status: 0 when no outlier at or above `--fail-on` (default error: a
level or non-finite rank), 1 when there is one, 2 for unreadable input or a
bad option (one line on stderr).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    boundary,
    fail,
    internal_error,
    metric_keys,
    pairs,
    print_rendered,
    set_flag,
)
from stabilitycli.commands.bars import bar_for
from stabilitycli.commands.read_options import ReadArgs, takes_read_options
from stabilitycli.core.errors import StabInputError, StabUsageError

PATH_HELP = "The run: a log file, a directory of per-rank files, or a URI."


class RanksFormat(StrEnum):
    terminal = "terminal"
    json = "json"


@takes_read_options(
    only=("rank_pattern", "rank_key", "step_key", "experiment", "tracking_uri", "endpoint_url"),
    helps={
        "rank_pattern": "Regex with one group: the rank in a per-rank file name, e.g. 'gpu(\\d+)'.",
        "experiment": "MLflow experiment (name or id) whose runs are the ranks.",
        "tracking_uri": "MLflow store or server holding the run (PATH is then a run id or name).",
        "endpoint_url": "Endpoint of an S3-compatible store for s3:// runs "
        "(default: AWS_ENDPOINT_URL).",
    },
    then={"rank_pattern": ("fail_on",), "step_key": ("set_values",)},
)
def command(
    path: Annotated[str | None, typer.Argument(help=PATH_HELP, show_default=False)] = None,
    *,
    # the path's name before it became positional like every other command's; kept for one
    # release so that scripts keep working, with a note on stderr
    run_option: Annotated[str | None, typer.Option("--run", hidden=True)] = None,
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            "-m",
            help="Metric to compare across ranks (canonical name, or NAME=LOGKEY).",
        ),
    ] = "loss",
    output: Annotated[
        RanksFormat, typer.Option("--format", "-f", help="Output format.")
    ] = RanksFormat.terminal,
    read: ReadArgs,
    fail_on: Annotated[
        FailOn,
        typer.Option(
            help="Lowest outlier severity that exits 1 "
            "(level/nonfinite: error; silent/straggler: warning)."
        ),
    ] = FailOn.error,
    set_values: Annotated[list[str] | None, set_flag("rank_z=8")] = None,
) -> None:
    """Compare every rank with its cohort: name outlier, non-finite, silent and straggling ranks."""
    run = _the_path(path, run_option)
    try:
        # progress on stderr for a person only: a terminal there, and not beside JSON
        bar = output is RanksFormat.terminal and sys.stderr.isatty()
        report = _report(run, metric, read, set_values, bar)
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, run) from None
    except BaseException as err:
        raise internal_error(err, run) from None
    if output is RanksFormat.json:
        import json

        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        from stabilitycli.report.ranks_terminal import build

        print_rendered(build(report))
    from stabilitycli.core.exit_codes import exit_code_for
    from stabilitycli.core.model import Severity

    raise typer.Exit(int(exit_code_for(report.worst_severity, Severity.parse(fail_on.value))))


def _the_path(path: str | None, run_option: str | None) -> str:
    """PATH, or the deprecated `--run PATH` with a note on stderr; one of the two."""
    if path is not None and run_option is not None:
        raise fail("give the run once: `stab ranks PATH` (--run PATH is its old spelling)")
    if run_option is not None:
        typer.echo(
            "stab: note: `stab ranks --run PATH` is deprecated and will be removed; "
            "give the path as the argument: `stab ranks PATH`",
            err=True,
        )
        return run_option
    if path is None:
        raise fail("stab ranks needs the run: `stab ranks PATH` (a log file, a folder or a URI)")
    return path


def _report(run: str, metric: str, read: ReadArgs, set_values: list[str] | None, bar: bool):
    from dataclasses import replace

    from stabilitycli.ingest import read as read_run
    from stabilitycli.pipeline.run import rank_report

    (name,), overrides = metric_keys([metric])
    options = read.options(metric_overrides=overrides)
    from stabilitycli.core.settings import load_settings, sentence

    thresholds, settings = load_settings(run, pairs(set_values, "--set"))
    with bar_for(run, bar):
        data = read_run(run, options)
        report = rank_report(data, name, thresholds)
    said = sentence(settings.to_dict())
    # thresholds not at their defaults change what is an outlier: the first note says so
    return replace(report, notes=(said, *report.notes)) if said else report
