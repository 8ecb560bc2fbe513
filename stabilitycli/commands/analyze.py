"""`stab analyze`: walk the stability tree over one run (or many) and print the verdict.

Registered by `cli.py` as `app.command("analyze", epilog=EPILOG)(command)`. polars is
imported only inside the functions, so `stab --help` stays instant.

Exit status: 0 when no finding is at or above `--fail-on`, 1 when one is, 2
for unreadable input or a bad option (one line on stderr). With several runs,
2 when any could not be read (an unread run never lets a sweep pass).
"""

from __future__ import annotations

import contextlib
import sys
from enum import StrEnum
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    MetricOpt,
    boundary,
    fail,
    internal_error,
    load_thresholds,
    pairs,
    print_rendered,
    with_settings,
)
from stabilitycli.errors import StabInputError, StabUsageError, visible
from stabilitycli.ingest import SUPPORTED
from stabilitycli.report.formats import Format


class EngineName(StrEnum):
    local = "local"
    ray = "ray"


# below the options in `stab analyze --help`: input errors point here instead of repeating it
EPILOG = f"Inputs: {SUPPORTED}"

# analyze's --set points to the list of thresholds; the other commands' help is shorter
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a threshold, e.g. spike_sigma=4 (repeatable; "
        "see `stab explain thresholds`).",
    ),
]


def split_codes(values: list[str] | None) -> list[str]:
    """`--select a,b --select c` -> ['a', 'b', 'c']."""
    return [c.strip() for v in values or [] for c in v.split(",") if c.strip()]


def command(
    path: Annotated[
        list[str],
        typer.Argument(
            help="Log file(s), directories or URIs (formats below), or - for standard input; "
            "several runs are analysed in parallel."
        ),
    ],
    output: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = (
        Format.terminal
    ),
    fail_on: Annotated[
        FailOn, typer.Option(help="Lowest finding severity that exits 1.")
    ] = FailOn.error,
    metric: MetricOpt = None,
    step_key: Annotated[str | None, typer.Option(help="Log key holding the step.")] = None,
    rank_key: Annotated[str | None, typer.Option(help="Log key holding the rank.")] = None,
    format_in: Annotated[
        str | None, typer.Option(help="Input format, when detection guesses wrong.")
    ] = None,
    pattern: Annotated[
        str | None,
        typer.Option(
            help="Read a text log with this regex: named groups are fields, "
            "(?P<step>...) the step, e.g. 'it=(?P<step>\\d+) l=(?P<loss>\\S+)'."
        ),
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
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            help="Endpoint of an S3-compatible store for s3:// paths (MinIO, R2...; "
            "default: AWS_ENDPOINT_URL)."
        ),
    ] = None,
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
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Say less: no progress bar; the terminal shows the verdict only, "
            "concise only warnings and errors, without its summary line.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Say more: every finding (the terminal shows the first 40)."
        ),
    ] = False,
    engine: Annotated[
        EngineName,
        typer.Option(
            help="Where several runs are analysed: a local process pool, or Ray tasks "
            "(the ray extra) on a local instance or the cluster at --ray-address."
        ),
    ] = EngineName.local,
    ray_address: Annotated[
        str | None,
        typer.Option(help="An existing Ray cluster for --engine ray (default: RAY_ADDRESS)."),
    ] = None,
    retries: Annotated[
        int,
        typer.Option(help="--engine ray: tries again a run whose worker died."),
    ] = 2,
    time_limit: Annotated[
        float | None,
        typer.Option(
            help="--engine ray: seconds one run may take; past it, it is that run's failure.",
        ),
    ] = None,
    results: Annotated[
        str | None,
        typer.Option(
            "--results",
            help="Keep every run's result in this SQLite file and reuse it while the run "
            "and the settings are unchanged: a rerun analyses only new or changed runs "
            "(see `stab summary`).",
        ),
    ] = None,
    show_settings: Annotated[
        bool,
        typer.Option(
            "--show-settings",
            help="Print every threshold in force for the run, its value and its source "
            "(default, config file and key, or --set), and exit.",
        ),
    ] = False,
) -> None:
    """Read one run (or many), walk the stability decision tree (NaN, spikes, fp16 loss
    scale, divergence) and print the verdict with its evidence and remedies."""
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
            endpoint_url=endpoint_url,
            rank_pattern=rank_pattern,
            include_deleted=include_deleted,
            pattern=pattern,
        )
    except StabUsageError as err:
        raise fail(str(err)) from None
    if quiet and verbose:
        raise fail("--quiet and --verbose contradict each other; give one")
    verbosity = "quiet" if quiet else "verbose" if verbose else "normal"
    if show_settings:
        raise typer.Exit(_show_settings(path[0], set_values))
    if engine is EngineName.local and (time_limit is not None or ray_address):
        raise fail("--time-limit and --ray-address are for --engine ray")
    # checked here, not by typer's min=: a bounded option makes typer import pydantic
    if retries < 0 or (time_limit is not None and not time_limit > 0):
        raise fail("--retries must be 0 or more and --time-limit more than 0 seconds")
    if len(path) > 1 or recursive or results or engine is EngineName.ray:
        from stabilitycli.pipeline.batch import Engine

        raise typer.Exit(
            _analyze_many(
                path,
                recursive,
                jobs,
                quiet,
                output,
                fail_on,
                options,
                select,
                ignore,
                set_values,
                results,
                Engine(engine.value, ray_address, retries, time_limit),
            )
        )
    target = path[0]
    try:
        thresholds, settings = load_thresholds(target, set_values)
        from stabilitycli.pipeline import run as pipeline

        with _reading(target, progress_wanted(output, quiet)):
            result = pipeline.analyze(
                target,
                thresholds,
                options=options,
                select=split_codes(select),
                ignore=split_codes(ignore),
            )
        with_settings(result, settings)
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, target) from None
    except BaseException as err:
        raise internal_error(err, target) from None
    from stabilitycli.exit_codes import exit_code_for
    from stabilitycli.model import Severity

    threshold = Severity.parse(fail_on.value)
    print_rendered(output.render(result, threshold, verbosity))
    raise typer.Exit(exit_code_for(result.worst_severity, threshold))


def _reading(target: str, wanted: bool):
    """A transient bar on stderr while a big log (at least PROGRESS_MIN_BYTES) is read and
    analysed; nothing for a small one. It shows the megabytes read while a reader says
    how far it got (the JSONL reader does, a piece at a time), a pulse while one reads the
    log in one go, then the rules done of the rules selected."""
    import os

    size = os.path.getsize(target) if wanted and os.path.isfile(target) else 0
    if size < PROGRESS_MIN_BYTES:
        return contextlib.nullcontext()
    return _ReadingBar(visible(os.path.basename(target)), size)


class _ReadingBar:
    """The bar of `_reading`: a rich Progress that listens to `stabilitycli.progress`."""

    def __init__(self, name: str, size_bytes: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.name = name
        # the name is the user's: no rich markup in it, so the columns render fields as text
        self.bar = Progress(
            TextColumn("{task.fields[doing]}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[amount]}", markup=False),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.stage = "read"
        self.task = self.bar.add_task(
            "read", total=None, doing=f"reading {name}", amount=f"{size_bytes >> 20:,} MB"
        )
        self._stack = contextlib.ExitStack()

    def heard(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            # a new stage starts its own clock, so the time left is not the read's rate
            self.stage = stage
            self.bar.reset(self.task, total=total or None)
        if stage == "read":
            doing, amount = f"reading {self.name}", f"{done >> 20:,} of {total >> 20:,} MB"
        else:
            doing, amount = "checking the rules", f"{done} of {total} rules"
        self.bar.update(self.task, completed=done, total=total or None, doing=doing, amount=amount)

    def __enter__(self) -> _ReadingBar:
        from stabilitycli.progress import listening

        self._stack.enter_context(self.bar)
        self._stack.enter_context(listening(self.heard))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)


def _show_settings(target: str, set_values: list[str] | None) -> int:
    """Every threshold for the run at `target`: name, value, default, source. Exit status."""
    from stabilitycli.settings import load_settings

    try:
        _, settings = load_settings(target, pairs(set_values, "--set"))
    except StabUsageError as err:
        raise fail(str(err)) from None
    width = max(len(s.name) for s in settings.entries)
    for s in settings.entries:
        default = "" if not s.changed else f" (default {s.default:g})"
        typer.echo(f"{s.name:<{width}}  {s.value:<10g}  {s.source}{default}")
    return 0


def _analyze_many(
    targets,
    recursive,
    jobs,
    quiet,
    output: Format,
    fail_on: FailOn,
    options,
    select,
    ignore,
    set_values,
    results_path: str | None = None,
    engine=None,
) -> int:
    """Several runs: the library finds and analyses them (stabilitycli.pipeline.batch); here only
    the output. Object-store prefixes are walked in a local copy (`ingest.remote.mirrored`)
    and every result names their URIs."""
    from contextlib import ExitStack

    from stabilitycli.ingest import remote

    stack = ExitStack()
    to_uri = None
    # with a results store, object-store runs are known by their URIs and fetched one by
    # one when they changed (the store walks a prefix itself); without, a prefix is copied
    # once and swept as a local folder
    if not results_path:
        try:
            targets, to_uri = stack.enter_context(remote.mirrored(list(targets), options))
        except StabInputError as err:  # an object store that refused, or a missing prefix
            raise boundary(err, " ".join(targets)) from None
    with stack:
        from stabilitycli.model import Severity
        from stabilitycli.pipeline import batch

        try:
            settings = batch.BatchSettings(
                options=options,
                set_values=pairs(set_values, "--set"),
                select=tuple(split_codes(select)),
                ignore=tuple(split_codes(ignore)),
                fail_on=fail_on.value,
                render_fragment=output.fragment_renderer(Severity.parse(fail_on.value)),
            )
            from stabilitycli.detect.registry import select_rules

            # a bad code is a usage error, not N failures; without codes there is nothing to
            # check, and the rules (polars with them) stay unimported by a sweep that reuses all
            if settings.select or settings.ignore:
                select_rules(list(settings.select), list(settings.ignore))
        except StabUsageError as err:
            raise fail(str(err)) from None
        walk_warnings: list[str] = []
        sweep = _sweep(results_path, settings, output) if results_path else None
        try:
            paths = (
                sweep.discover(list(targets), recursive, walk_warnings)
                if sweep
                else batch.discover(targets, recursive, walk_warnings)
            )
        except StabInputError as err:
            raise boundary(err, " ".join(targets)) from None
        for warning in walk_warnings:
            typer.echo(f"stab: warning: {visible(warning)}", err=True)
        if not paths:
            raise fail(f"no runs found in {', '.join(targets)}")
        results = [
            batch.renamed(r, to_uri)
            for r in _with_progress(paths, settings, jobs, quiet, output, sweep, engine)
        ]
        print_rendered(output.render_many(results))
        for r in results:
            if not r.ok:
                typer.echo(f"stab: error: {visible(r.error or '')}", err=True)
        if sweep is not None:
            counts = sweep.finish(results, lambda r: batch.exit_status([r], fail_on.value))
            _say_reuse(counts, results_path or "", output, quiet)
        return batch.exit_status(results, fail_on.value)


def _sweep(results_path: str, settings, output: Format):
    """The results store's sweep (its `stored` hook skips unchanged runs); a store that
    cannot be opened is one line and exit 2, before anything is analysed."""
    from stabilitycli.results.store import Sweep, open_store

    try:
        conn = open_store(results_path, create=True)
    except StabInputError as err:
        raise fail(str(err)) from None
    fragment_format = output.value if settings.render_fragment is not None else None
    return Sweep(conn, settings, fragment_format)


def _say_reuse(counts: dict[str, int], results_path: str, output: Format, quiet: bool) -> None:
    # machine formats keep stdout as a fresh sweep prints it: the count goes to stderr
    line = (
        f"stab: {counts['reused']:,} of {counts['runs']:,} runs reused from "
        f"{visible(results_path)}, {counts['analysed']:,} analysed"
    )
    if not quiet:
        typer.echo(line, err=output is not Format.terminal)


# a single log at least this big gets a progress line while it is read and analysed
PROGRESS_MIN_BYTES = 64 << 20


def progress_wanted(output: Format, quiet: bool) -> bool:
    """Progress goes to stderr only for a person: a terminal there, the terminal format on
    stdout (never beside JSON, JUnit, GitHub or other machine output), and not --quiet."""
    return not quiet and output is Format.terminal and sys.stderr.isatty()


def _with_progress(paths, settings, jobs, quiet, output: Format, sweep=None, engine=None):
    from stabilitycli.pipeline import batch

    stored = sweep.stored if sweep is not None else None
    if not progress_wanted(output, quiet):
        return batch.sweep(paths, settings, jobs, engine, stored=stored)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("analysing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("runs", total=len(paths), rate="")

        def done(_result) -> None:
            progress.advance(task)
            state = progress.tasks[task]
            if state.elapsed:
                progress.update(task, rate=f"{state.completed / state.elapsed:.1f} runs/s")

        return batch.sweep(paths, settings, jobs, engine, on_done=done, stored=stored)
