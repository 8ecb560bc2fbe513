"""`stab analyze` over several runs: find them, sweep them, print what each one says.

The library finds and analyses the runs (`stabilitycli.pipeline.batch`); here the
command line's values become its settings, and its results become the output and the
exit status. Object-store prefixes are walked in a local copy (`ingest.remote.mirrored`)
and every result names their URIs.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import typer

from stabilitycli.commands._common import (
    FailOn,
    boundary,
    fail,
    pairs,
    print_rendered,
    split_codes,
)
from stabilitycli.commands.bars import progress_wanted, with_sweep_bar
from stabilitycli.core.errors import StabInputError, StabUsageError, visible
from stabilitycli.core.records import dataclass
from stabilitycli.report.formats import Format

if TYPE_CHECKING:
    from stabilitycli.ingest.options import ReadOptions
    from stabilitycli.pipeline.batch import BatchSettings, RunResult
    from stabilitycli.pipeline.engines import Engine
    from stabilitycli.results.store import Sweep


@dataclass(frozen=True)
class ManyRuns:
    """What `stab analyze` was asked to do with several runs (or a folder of them)."""

    targets: list[str]
    recursive: bool
    jobs: int | None
    quiet: bool
    output: Format
    fail_on: FailOn
    options: ReadOptions
    select: list[str] | None
    ignore: list[str] | None
    set_values: list[str] | None
    results_path: str | None
    engine: Engine


def analyze_many(asked: ManyRuns) -> int:
    """Every run analysed and printed; the exit status of the worst."""
    from stabilitycli.pipeline import batch

    stack = ExitStack()
    targets, to_uri = asked.targets, None
    # with a results store, object-store runs are known by their URIs and fetched one by
    # one when they changed (the store walks a prefix itself); without, a prefix is copied
    # once and swept as a local folder
    if not asked.results_path:
        try:
            targets, to_uri = stack.enter_context(_mirrored(targets, asked.options))
        except StabInputError as err:  # an object store that refused, or a missing prefix
            raise boundary(err, " ".join(targets)) from None
    with stack:
        settings = _batch_settings(asked)
        sweep = _sweep(asked.results_path, settings, asked.output) if asked.results_path else None
        paths = _discover(targets, asked.recursive, sweep)
        results = [batch.renamed(r, to_uri) for r in _analysed(paths, settings, asked, sweep)]
        print_rendered(asked.output.render_many(results))
        for r in results:
            if not r.ok:
                typer.echo(f"stab: error: {visible(r.error or '')}", err=True)
        if sweep is not None:
            counts = sweep.finish(results, lambda r: batch.exit_status([r], asked.fail_on.value))
            _say_reuse(counts, asked.results_path or "", asked.output, asked.quiet)
        return batch.exit_status(results, asked.fail_on.value)


def _mirrored(targets: list[str], options: ReadOptions):
    from stabilitycli.ingest import remote

    return remote.mirrored(list(targets), options)


def _batch_settings(asked: ManyRuns) -> BatchSettings:
    """What every worker needs besides its path; a bad --set or code is one line, exit 2."""
    from stabilitycli.core.model import Severity
    from stabilitycli.detect.registry import select_rules
    from stabilitycli.pipeline import batch

    try:
        settings = batch.BatchSettings(
            options=asked.options,
            set_values=pairs(asked.set_values, "--set"),
            select=tuple(split_codes(asked.select)),
            ignore=tuple(split_codes(asked.ignore)),
            fail_on=asked.fail_on.value,
            render_fragment=asked.output.fragment_renderer(Severity.parse(asked.fail_on.value)),
        )
        # a bad code is a usage error, not N failures; without codes there is nothing to
        # check, and the rules (polars with them) stay unimported by a sweep that reuses all
        if settings.select or settings.ignore:
            select_rules(list(settings.select), list(settings.ignore))
    except StabUsageError as err:
        raise fail(str(err)) from None
    return settings


def _discover(targets: list[str], recursive: bool, sweep: Sweep | None) -> list[str]:
    """The runs to analyse (a results store knows the files it saw unchanged); what the walk
    could not enter is a warning, and no run at all is exit 2."""
    from stabilitycli.pipeline import batch

    walk_warnings: list[str] = []
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
    return paths


def _sweep(results_path: str, settings: BatchSettings, output: Format) -> Sweep:
    """The results store's sweep (its `stored` hook skips unchanged runs); a store that
    cannot be opened is one line and exit 2, before anything is analysed."""
    from stabilitycli.results.store import Sweep, open_store

    try:
        conn = open_store(results_path, create=True)
    except StabInputError as err:
        raise fail(str(err)) from None
    fragment_format = output.value if settings.render_fragment is not None else None
    return Sweep(conn, settings, fragment_format)


def _analysed(
    paths: list[str], settings: BatchSettings, asked: ManyRuns, sweep: Sweep | None
) -> list[RunResult]:
    """Every run's result, in input order, under a bar when a person is watching."""
    from stabilitycli.pipeline import engines

    stored = sweep.stored if sweep is not None else None

    def run(on_done: Any = None) -> list[RunResult]:
        return engines.sweep(
            paths, settings, asked.jobs, asked.engine, on_done=on_done, stored=stored
        )

    if not progress_wanted(asked.output, asked.quiet):
        return run()
    return with_sweep_bar(len(paths), run)


def _say_reuse(counts: dict[str, int], results_path: str, output: Format, quiet: bool) -> None:
    # machine formats keep stdout as a fresh sweep prints it: the count goes to stderr
    line = (
        f"stab: {counts['reused']:,} of {counts['runs']:,} runs reused from "
        f"{visible(results_path)}, {counts['analysed']:,} analysed"
    )
    if not quiet:
        typer.echo(line, err=output is not Format.terminal)
