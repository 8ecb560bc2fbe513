"""One `stab watch`: pick the follower as `stab analyze` picks the reader, watch, end with
the analysis `stab analyze` gives on the final log."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from stabilitycli.core.config import Thresholds
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Analysis
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.folders import list_folder, walk
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.alerts import TAIL_RULES, Alert
from stabilitycli.watch.follow import Follower
from stabilitycli.watch.loop import Clock, Watch, WatchSettings, WatchStats
from stabilitycli.watch.sources._files import appended

SOURCES = "stabilitycli.watch.sources"


@dataclass
class WatchRequest:
    target: str
    options: ReadOptions
    thresholds: Thresholds
    settings: WatchSettings
    select: list[str] | None = None
    ignore: list[str] | None = None


def tail_lines(thresholds: Thresholds) -> int:
    """The lines of each file a tail judgment reads: three times the spike rule's baseline
    and recovery windows, so that the steps after the first baseline window (where it may
    alert) hold the new points, a spike's sustained test and its recovery window."""
    return 3 * (thresholds.spike_window_steps + thresholds.recovery_window_steps)


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
    """A log that is not there yet, or holds too little to tell its format (the job has
    not written its first lines): wait for it while it grows, up to --idle seconds of
    nothing new."""
    if target == "-" or "://" in target:
        return
    path = Path(target)
    last_growth, size, told = clock.now(), -1, False
    while not _enough(path):
        now = clock.now()
        grown = _size(path)
        if grown != size:
            last_growth, size = now, grown
        if settings.idle_s is not None and now - last_growth >= settings.idle_s:
            return  # the reader's own message (no such file, nothing in it) says why
        if not told:
            say(f"{target}: waiting for the log's first lines")
            told = True
        clock.sleep(settings.interval_s)


def _size(path: Path) -> int:
    """How much a log (or a run folder's files) holds; -1 when it is not there."""
    try:
        if path.is_dir():  # a run's files may sit below it (ranks, an MLflow run's metrics/)
            return sum(
                p.stat().st_size
                for _, _, files in walk(path, follow_symlinks=False)
                for p in files
                if p.is_file()
            )
        return path.stat().st_size
    except (OSError, StabInputError):  # gone, or past the walk's bounds: not a size
        return -1


# a format is picked from a file's first bytes: wait for this many lines, or this many bytes
_HEAD_LINES = 5
_HEAD_BYTES = 8192


def _enough(path: Path) -> bool:
    try:
        if path.is_dir():  # a run folder: once its writers have begun
            return any(p.is_file() and p.stat().st_size for p in list_folder(path))
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return False
    if not appended(path):  # saved whole: there once it is there
        return bool(head)
    return len(head) >= _HEAD_BYTES or head.count(b"\n") >= _HEAD_LINES


def _open_when_known(request: WatchRequest, say, clock: Clock, stdin: BinaryIO | None):
    """The follower, once the log's first lines tell its format. A log whose first lines
    do not tell it yet (an argument dump before the first record) is asked again while it
    grows; after --idle seconds of nothing new, the reader's own message is the answer."""
    wait_for_log(request.target, request.settings, say, clock)
    path = Path(request.target)
    last_growth, size, told = clock.now(), -1, False
    while True:
        try:
            return open_follower(request.target, request.options, stdin)
        except StabInputError as err:
            idle = request.settings.idle_s
            grown = _size(path)
            now = clock.now()
            if grown != size:
                last_growth, size = now, grown
            if grown < 0 or (idle is not None and now - last_growth >= idle):
                raise
            if not told:
                say(f"{request.target}: its format is not told yet ({err.reason}); waiting")
                told = True
            clock.sleep(request.settings.interval_s)


def run_watch(
    request: WatchRequest,
    emit: Callable[[Alert], None],
    say: Callable[[str], None],
    clock: Clock | None = None,
    stdin: BinaryIO | None = None,
    stats: WatchStats | None = None,
) -> Analysis:
    """Watch until the run ends, alerting as it goes; the final analysis (`stats`: filled
    in with the polls and judgments made)."""
    clock = clock or Clock()
    follower, name = _open_when_known(request, say, clock, stdin)
    try:
        local = stdin is None and "://" not in request.target and request.target != "-"
        size_of = (lambda: _size(Path(request.target))) if local else None
        watch = watch_of(follower, request, emit, say, clock, size_of, stats)
        judge = watch.judge
        every = f"every {request.settings.interval_s:g} s"
        try:
            say(f"watching {follower.display} ({name}) {every}; Ctrl-C ends it with the verdict")
            why = watch.run()
        except KeyboardInterrupt:
            why = "interrupted (Ctrl-C)"
        say(f"watch ended: {why}")
        final = _final(request, follower, judge, say)
        # what the judgments skipped by the CPU budget, or held for the end, did not alert yet
        watch.take(final, final=True)
        return final
    finally:
        follower.close()


def watch_of(
    follower: Follower,
    request: WatchRequest,
    emit: Callable[[Alert], None],
    say: Callable[[str], None],
    clock: Clock,
    size_of: Callable[[], int] | None = None,
    stats: WatchStats | None = None,
) -> Watch:
    """The watch of one followed run: its whole-run judgments and, where the follower keeps
    a tail, its tail judgments."""
    from stabilitycli.pipeline import run as pipeline

    thresholds = request.thresholds

    def judge(run, derived: dict | None = None) -> Analysis:
        return pipeline.analyze(
            run, thresholds, select=request.select, ignore=request.ignore, derived=derived
        )

    def judge_tail(run, derived: dict) -> Analysis:
        select = request.select or list(TAIL_RULES)
        return pipeline.analyze(
            run, thresholds, select=select, ignore=request.ignore, derived=derived
        )

    keep_tail = getattr(follower, "keep_tail", None) if request.settings.tail else None
    tailed = keep_tail is not None and bool(keep_tail(tail_lines(thresholds)))
    return Watch(
        follower,
        judge,
        request.settings,
        emit,
        say,
        clock,
        size_of,
        judge_tail=judge_tail if tailed else None,
        tail_from_steps=thresholds.spike_window_steps,
        stats=stats,
    )


def _final(request: WatchRequest, follower: Follower, judge, say) -> Analysis:
    """`stab analyze` on the final log; on what was read, when the log is gone."""

    final = getattr(follower, "final", None)  # stdin: its spool, read as `stab analyze -`
    if final is not None:
        return judge(final())
    if "://" not in request.target and not Path(request.target).exists():
        say(f"{request.target}: gone; the final verdict is on what was read before")
        return judge(follower.snapshot())
    return analyze_alone(request, request.target, request.options)


def analyze_alone(request: WatchRequest, target: str, options: ReadOptions) -> Analysis:
    """`stab analyze` of `target` with the request's thresholds and `--select`/`--ignore`."""
    from stabilitycli.pipeline import run as pipeline

    return pipeline.analyze(
        target, request.thresholds, options=options, select=request.select, ignore=request.ignore
    )
