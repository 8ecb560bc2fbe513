"""One `stab watch`: pick the follower as `stab analyze` picks the reader, watch, end with
the analysis `stab analyze` gives on the final log."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stabilitycli.core.config import Thresholds
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Analysis
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.alerts import Alert
from stabilitycli.watch.follow import Follower
from stabilitycli.watch.loop import Clock, Watch, WatchSettings

SOURCES = "stabilitycli.watch.sources"


@dataclass
class WatchRequest:
    target: str
    options: ReadOptions
    thresholds: Thresholds
    settings: WatchSettings
    select: list[str] | None = None
    ignore: list[str] | None = None


def follow_format(name: str, target: Path | str, options: ReadOptions) -> Follower:
    """The follower of reader `name`'s input at `target`; a usage error when there is none."""
    module_name = f"{SOURCES}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise StabUsageError(f"stab watch does not follow {name} inputs yet") from None
    follower: Follower = module.follow(str(target), options)
    return follower


def open_follower(
    target: str, options: ReadOptions, stdin: BinaryIO | None = None
) -> tuple[Follower, str]:
    """(follower, reader name) for a path, URI or `-` (with the stream `stdin`)."""
    from stabilitycli.ingest import STDIN, choose_reader

    if target == STDIN:
        from stabilitycli.watch.stdin import StdinFollower

        if stdin is None:
            raise StabInputError("<stdin>", "standard input is a terminal; pipe a log into it")
        return StdinFollower(stdin, options, follow_format), "stdin"
    name, chosen, chosen_options = choose_reader(target, options)
    return follow_format(name, chosen, chosen_options), name


def wait_for_log(target: str, settings: WatchSettings, say, clock: Clock) -> None:
    """A log that is not there yet, or still empty (the job has not written its first line):
    wait for it, up to --idle seconds."""
    if target == "-" or "://" in target:
        return
    path = Path(target)
    began, told = clock.now(), False
    while not path.exists() or (path.is_file() and path.stat().st_size == 0):
        if settings.idle_s is not None and clock.now() - began >= settings.idle_s:
            return  # the reader's own message (no such file, nothing in it) says why
        if not told:
            say(f"{target}: waiting for the log to appear")
            told = True
        clock.sleep(settings.interval_s)


def run_watch(
    request: WatchRequest,
    emit: Callable[[Alert], None],
    say: Callable[[str], None],
    clock: Clock | None = None,
    stdin: BinaryIO | None = None,
) -> Analysis:
    """Watch until the run ends, alerting as it goes; the final analysis."""
    from stabilitycli.pipeline import run as pipeline

    clock = clock or Clock()

    def judge(run) -> Analysis:
        return pipeline.analyze(
            run, request.thresholds, select=request.select, ignore=request.ignore
        )

    wait_for_log(request.target, request.settings, say, clock)
    follower, name = open_follower(request.target, request.options, stdin)
    try:
        watch = Watch(follower, judge, request.settings, emit, say, clock)
        every = f"every {request.settings.interval_s:g} s"
        say(f"watching {follower.display} ({name}) {every}; Ctrl-C ends it with the verdict")
        why = watch.run()
        say(f"watch ended: {why}")
        final = _final(request, follower, judge, say)
        watch.take(final)  # what the judgments skipped by the CPU budget did not alert yet
        return final
    finally:
        follower.close()


def _final(request: WatchRequest, follower: Follower, judge, say) -> Analysis:
    """`stab analyze` on the final log; on what was read, when the log is gone."""
    from stabilitycli.pipeline import run as pipeline

    final = getattr(follower, "final", None)  # stdin: its spool, read as `stab analyze -`
    if final is not None:
        return judge(final())
    if "://" not in request.target and not Path(request.target).exists():
        say(f"{request.target}: gone; the final verdict is on what was read before")
        return judge(follower.snapshot())
    return pipeline.analyze(
        request.target,
        request.thresholds,
        options=request.options,
        select=request.select,
        ignore=request.ignore,
    )
