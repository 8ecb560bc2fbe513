"""`stab watch --each-run`: every run of an MLflow experiment (or of a folder of runs), and
each run that starts while it is watched, followed and judged on its own.

What someone watching an experiment expects: a sweep or a queue of jobs logs into one
experiment (or one folder), and a run created after the watch began is as much theirs as
the first one. So the runs are listed again at each poll (one query for sqlite, a folder
listing for a file store, one paged request for a server, the folder walk `stab analyze
--recursive` makes for a folder); a run not seen before joins with one status line, and gets
its own follower (an MLflow store's with `--run ID`, or the one `stab watch RUN` picks), its
own judgments and its own alert book, so that its alert lines carry its own run name and
step. A run whose status says it is over (MLflow) gets its final judgment then, and the
watch goes on for the runs to come. The watch ends on Ctrl-C, or when nothing was logged and
no run started for `--idle` seconds; its result is each run's final analysis, in the order
the runs joined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Analysis
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.alerts import Alert
from stabilitycli.watch.loop import Clock, Watch
from stabilitycli.watch.session import (
    WatchRequest,
    analyze_alone,
    follow_format,
    open_follower,
    watch_of,
)

STORES = ("mlflow_db", "mlflow_file", "mlflow_server")


@dataclass(frozen=True)
class RunRef:
    """One run of what is watched: how it is known, said, read."""

    key: str  # its MLflow run id, or its path
    label: str  # as the status lines name it
    target: str  # what its follower and `stab analyze` read
    options: ReadOptions


def mlflow_runs(name: str, target: str, options: ReadOptions) -> list[RunRef]:
    """The runs of the store at `target` that the reader's selection keeps (`--experiment`,
    deleted runs left out unless `--include-deleted`), in the store's order."""
    if name == "mlflow_db":
        from stabilitycli.ingest.mlflow import database as db

        with db.opened(db.db_path(target), limits=options.limits) as conn:
            runs = db.list_runs(conn, options, target)
    elif name == "mlflow_file":
        from stabilitycli.ingest.mlflow import file_store

        runs = file_store.list_runs(file_store.local_path(target), options)
    else:
        from stabilitycli.ingest.mlflow import server

        base, chosen = server.split_target(target, options)
        client = server.Client(base, server.without_userinfo(target), options.limits)
        runs = server.list_runs(client, chosen)
    return [
        RunRef(r.run_id, r.label, target, replace(options, run=r.run_id))
        for r in runs
        if options.include_deleted or not r.deleted
    ]


def folder_runs(folder: str, options: ReadOptions, known: set[str]) -> list[RunRef]:
    """The runs below a folder, as `stab analyze --recursive` finds them (the runs already
    followed are not sniffed again)."""
    from stabilitycli.pipeline import batch

    paths = batch.discover([folder], True, [], known=lambda path: path in known)
    root = Path(folder)
    return [
        RunRef(p, str(Path(p).relative_to(root)) if Path(p) != root else p, p, options)
        for p in paths
    ]


@dataclass
class _Member:
    """One run of the experiment being watched."""

    ref: RunRef
    watch: Watch
    final: Analysis | None = None
    done: bool = False


class EachRunWatch:
    def __init__(
        self,
        lister: Callable[[set[str]], list[RunRef]],
        open_run: Callable[[RunRef], Watch],
        final_of: Callable[[RunRef], Analysis],
        say: Callable[[str], None],
        clock: Clock,
        request: WatchRequest,
    ):
        self.lister = lister  # the runs there now, given the keys of those followed
        self.open_run = open_run  # the Watch of one run
        self.final_of = final_of  # `stab analyze` of one run
        self.say = say
        self.clock = clock
        self.target = request.target
        self.interval_s, self.idle_s = request.settings.interval_s, request.settings.idle_s
        self.members: dict[str, _Member] = {}
        self._listing_failed: str | None = None

    def run(self) -> list[Analysis]:
        """Watch until Ctrl-C or --idle; each run's final analysis, in the order they joined."""
        last_news = self.clock.now()
        try:
            while True:
                news = self._join_new_runs()
                for member in [m for m in self.members.values() if not m.done]:
                    poll = member.watch.poll_once()
                    news = news or bool(poll.records_read or poll.reread)
                    if poll.ended:
                        self.say(f"{poll.ended}; its final verdict follows at the end")
                        self._finish(member)
                now = self.clock.now()
                if news:
                    last_news = now
                if self.idle_s is not None and now - last_news >= self.idle_s:
                    self.say(f"nothing logged and no new run for {self.idle_s:g} s (--idle)")
                    break
                self.clock.sleep(self.interval_s)
        except KeyboardInterrupt:
            self.say("interrupted (Ctrl-C)")
        for member in self.members.values():
            if not member.done:
                self._finish(member)
        if not self.members:
            raise StabInputError(self.target, "no run was logged while it was watched")
        return [m.final for m in self.members.values() if m.final is not None]

    def _join_new_runs(self) -> bool:
        """Take in the runs not seen before; whether there was one."""
        try:
            refs = self.lister(set(self.members))
        except (StabInputError, OSError) as err:
            line = f"{self.target}: the runs could not be listed: {err}"
            if line != self._listing_failed:
                self.say(line)
            self._listing_failed = line
            return False
        self._listing_failed = None
        joined = False
        for ref in refs:
            if ref.key in self.members:
                continue
            try:
                watch = self.open_run(ref)
            except StabInputError as err:  # listed before its first write: asked again
                self.say(f"run {ref.label}: not followed yet: {err.reason}")
                continue
            self.members[ref.key] = _Member(ref, watch)
            self.say(f"run {ref.label} joined the watch")
            joined = True
        return joined

    def _finish(self, member: _Member) -> None:
        member.done = True
        try:
            member.final = self.final_of(member.ref)
        except (StabInputError, StabUsageError) as err:
            self.say(f"run {member.ref.label}: no final verdict: {err}")
        else:
            member.watch.take(member.final, final=True)
        member.watch.follower.close()


def watch_each_run(
    request: WatchRequest,
    emit: Callable[[Alert], None],
    say: Callable[[str], None],
    clock: Clock | None = None,
) -> list[Analysis]:
    """`--each-run`: every run of an MLflow store or of a folder of runs, and each run that
    starts while it is watched, judged on its own; each run's final analysis."""
    clock = clock or Clock()
    folder = "://" not in request.target and Path(request.target).is_dir()
    if folder and not _mlflow_folder(request):
        name = "a folder of runs"

        def lister(known: set[str]) -> list[RunRef]:
            return folder_runs(request.target, request.options, known)

        def open_run(ref: RunRef) -> Watch:
            follower, _ = open_follower(ref.target, ref.options)
            return watch_of(follower, replace(request, target=ref.target), emit, say, clock)

    else:
        from stabilitycli.ingest import choose_reader

        name, chosen, options = choose_reader(request.target, request.options)
        if name not in STORES:
            raise StabUsageError(
                "--each-run follows the runs of an MLflow store (mlruns/, sqlite:///, http://) "
                f"or of a folder, not {name} inputs"
            )

        def lister(known: set[str]) -> list[RunRef]:
            return mlflow_runs(name, str(chosen), options)

        def open_run(ref: RunRef) -> Watch:
            return watch_of(follow_format(name, ref.target, ref.options), request, emit, say, clock)

    def final_of(ref: RunRef) -> Analysis:
        return analyze_alone(request, ref.target, ref.options)

    say(f"watching every run of {request.target} ({name}); Ctrl-C ends it with their verdicts")
    return EachRunWatch(lister, open_run, final_of, say, clock, request).run()


def _mlflow_folder(request: WatchRequest) -> bool:
    from stabilitycli.ingest import choose_reader

    try:
        return choose_reader(request.target, request.options)[0] in STORES
    except (StabInputError, StabUsageError):
        return False
