"""`stab analyze`: walk the stability tree over one run (or many) and print the verdict.

Registered by `cli.py` as `app.command("analyze", epilog=EPILOG)(command)`. Several runs
go to `commands/analyze_many.py`. polars is imported only inside the functions, so
`stab --help` stays instant.

Exit status: 0 when no finding is at or above `--fail-on`, 1 when one is, 2
for unreadable input or a bad option (one line on stderr). With several runs,
2 when any could not be read (an unread run never lets a sweep pass).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    FailOnOpt,
    boundary,
    fail,
    internal_error,
    load_thresholds,
    pairs,
    print_rendered,
    set_flag,
    split_codes,
    with_settings,
)
from stabilitycli.commands.bars import bar_for, progress_wanted
from stabilitycli.commands.read_options import ReadArgs, takes_read_options
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.ingest import SUPPORTED
from stabilitycli.report.formats import Format

if TYPE_CHECKING:
    from stabilitycli.ingest.options import ReadOptions


class EngineName(StrEnum):
    local = "local"
    ray = "ray"


# below the options in `stab analyze --help`: input errors point here instead of repeating it
EPILOG = (
    "Examples:\n\n"
    "stab analyze run.jsonl --fail-on warning\n\n"
    "stab analyze -r sweeps/ --format github\n\n"
    "stab analyze train.log --pattern 'it=(?P<step>\\d+) L=(?P<loss>\\S+)'\n\n"
    f"Inputs: {SUPPORTED}"
)


# the options of `stab analyze` besides the read options, in its --help order
PathsArg = Annotated[
    list[str],
    typer.Argument(
        help="Log file(s), directories or URIs (formats below), or - for standard input; "
        "several runs are analysed in parallel."
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
SelectOpt = Annotated[
    list[str] | None, typer.Option(help="Only these rule/finding codes (comma list).")
]
IgnoreOpt = Annotated[
    list[str] | None, typer.Option(help="Skip these rule/finding codes (comma list).")
]
RecursiveOpt = Annotated[
    bool,
    typer.Option(
        "--recursive",
        "-r",
        help="Find every run inside the directories given (a run directory is one run).",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs", "-j", min=1, help="Worker processes for several runs (default: all cores)."
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Say less: no progress bar; the terminal shows the verdict only, "
        "concise only warnings and errors, without its summary line.",
    ),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Say more: every finding (the terminal shows the first 40)."
    ),
]
EngineOpt = Annotated[
    EngineName,
    typer.Option(
        help="Where several runs are analysed: a local process pool, or Ray tasks "
        "(the ray extra) on a local instance or the cluster at --ray-address."
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(help="An existing Ray cluster for --engine ray (default: RAY_ADDRESS)."),
]
RetriesOpt = Annotated[
    int,
    typer.Option(help="--engine ray: tries again a run whose worker died."),
]
TimeLimitOpt = Annotated[
    float | None,
    typer.Option(
        help="--engine ray: seconds one run may take; past it, it is that run's failure.",
    ),
]
ResultsOpt = Annotated[
    str | None,
    typer.Option(
        "--results",
        help="Keep every run's result in this SQLite file and reuse it while the run "
        "and the settings are unchanged: a rerun analyses only new or changed runs "
        "(see `stab summary`).",
    ),
]
ShowSettingsOpt = Annotated[
    bool,
    typer.Option(
        "--show-settings",
        help="Print every threshold in force for the run, its value and its source "
        "(default, config file and key, or --set), and exit.",
    ),
]


# the one --set (set_flag), here pointing to the list of thresholds
ThresholdSetOpt = Annotated[list[str] | None, set_flag(see_also="; see `stab explain thresholds`")]


PlannedRestartsOpt = Annotated[
    str | None,
    typer.Option(
        "--planned-restarts",
        help="Steps where the LR is restarted on purpose (e.g. 1000,2000): a loss bump there "
        "that decays is a schedule-restart, not a spike (--set planned_lr_restart_steps=...).",
    ),
]


@takes_read_options(then={"dtype": ("select", "ignore", "set_values")})
def command(
    path: PathsArg,
    *,
    output: FormatOpt = Format.terminal,
    fail_on: FailOnOpt = FailOn.error,
    read: ReadArgs,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    set_values: ThresholdSetOpt = None,
    recursive: RecursiveOpt = False,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    engine: EngineOpt = EngineName.local,
    ray_address: RayAddressOpt = None,
    retries: RetriesOpt = 2,
    time_limit: TimeLimitOpt = None,
    results: ResultsOpt = None,
    show_settings: ShowSettingsOpt = False,
    planned_restarts: PlannedRestartsOpt = None,
) -> None:
    """Read one run (or many), walk the stability decision tree (NaN, spikes, fp16 loss
    scale, divergence) and print the verdict with its evidence and remedies."""
    if planned_restarts:  # the flag is the threshold, said shorter
        set_values = [*(set_values or []), f"planned_lr_restart_steps={planned_restarts}"]
    try:
        options = read.options()
    except StabUsageError as err:
        raise fail(str(err)) from None
    if quiet and verbose:
        raise fail("--quiet and --verbose contradict each other; give one")
    if show_settings:
        raise typer.Exit(_show_settings(path[0], set_values))
    _check_engine(engine, ray_address, retries, time_limit)
    if len(path) > 1 or recursive or results or engine is EngineName.ray:
        from stabilitycli.commands.analyze_many import ManyRuns, analyze_many
        from stabilitycli.pipeline.engines import Engine

        asked = ManyRuns(
            targets=path,
            recursive=recursive,
            jobs=jobs,
            quiet=quiet,
            output=output,
            fail_on=fail_on,
            options=options,
            select=select,
            ignore=ignore,
            set_values=set_values,
            results_path=results,
            engine=Engine(engine.value, ray_address, retries, time_limit),
        )
        raise typer.Exit(analyze_many(asked))
    verbosity = "quiet" if quiet else "verbose" if verbose else "normal"
    one = _analyze_one(path[0], options, select, ignore, set_values, output, quiet)
    from stabilitycli.core.exit_codes import exit_code_for
    from stabilitycli.core.model import Severity

    threshold = Severity.parse(fail_on.value)
    print_rendered(output.render(one, threshold, verbosity))
    raise typer.Exit(exit_code_for(one.worst_severity, threshold))


def _check_engine(
    engine: EngineName, ray_address: str | None, retries: int, time_limit: float | None
) -> None:
    """The Ray options make sense together; one line and exit 2 when they do not."""
    if engine is EngineName.local and (time_limit is not None or ray_address):
        raise fail("--time-limit and --ray-address are for --engine ray")
    # checked here, not by typer's min=: a bounded option makes typer import pydantic
    if retries < 0 or (time_limit is not None and not time_limit > 0):
        raise fail("--retries must be 0 or more and --time-limit more than 0 seconds")


def _analyze_one(
    target: str,
    options: ReadOptions,
    select: list[str] | None,
    ignore: list[str] | None,
    set_values: list[str] | None,
    output: Format,
    quiet: bool,
):
    """The Analysis of one run, its thresholds not at their defaults said; exit 2 with
    one line on bad input."""
    try:
        thresholds, settings = load_thresholds(target, set_values)
        from stabilitycli.pipeline import run as pipeline

        with bar_for(target, progress_wanted(output, quiet)):
            result = pipeline.analyze(
                target,
                thresholds,
                options=options,
                select=split_codes(select),
                ignore=split_codes(ignore),
            )
        return with_settings(result, settings)
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, target) from None
    except BaseException as err:
        raise internal_error(err, target) from None


def _show_settings(target: str, set_values: list[str] | None) -> int:
    """Every threshold for the run at `target`: name, value, default, source. Exit status."""
    from stabilitycli.core.settings import load_settings, shown

    try:
        _, settings = load_settings(target, pairs(set_values, "--set"))
    except StabUsageError as err:
        raise fail(str(err)) from None
    width = max(len(s.name) for s in settings.entries)
    for s in settings.entries:
        default = "" if not s.changed else f" (default {shown(s.default)})"
        typer.echo(f"{s.name:<{width}}  {shown(s.value):<10}  {s.source}{default}")
    return 0
