"""`stab watch --each-run`: every run of an MLflow experiment, and each run that starts
while it is watched, followed and judged on its own.

What someone watching an experiment expects: a sweep or a queue of jobs logs into one
experiment, and a run created after the watch began is as much theirs as the first one. So
the store's runs are listed again at each poll (one query for sqlite, a folder listing for
a file store, one paged request for a server); a run not seen before joins with one status
line, and gets its own follower (the store's follower with `--run ID`) and its own judgments
and alert book, so that its alert lines carry its own run name and step. A run whose
status says it is over gets its final judgment then (`stab analyze --run ID` on the store),
and the watch goes on for the runs to come. The watch ends on Ctrl-C, or when nothing was
logged and no run started for `--idle` seconds; its result is each run's final analysis,
in the order the runs joined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Analysis
from stabilitycli.ingest.mlflow._common import MlflowRun
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.loop import Clock, Watch

STORES = ("mlflow_db", "mlflow_file", "mlflow_server")


def list_runs(name: str, target: str, options: ReadOptions) -> list[MlflowRun]:
    """The runs of the store at `target` that the reader's selection keeps (`--experiment`,
    deleted runs left out unless `--include-deleted`), in the store's order."""
    if name == "mlflow_db":
        from stabilitycli.ingest.mlflow import database as db

        with db.opened(db.db_path(target), limits=options.limits) as conn:
            runs = db.list_runs(conn, options, target)
    elif name == "mlflow_file":
        from stabilitycli.ingest.mlflow import file_store

        runs = file_store.list_runs(file_store.local_path(target), options)
    elif name == "mlflow_server":
        from stabilitycli.ingest.mlflow import server

        base, chosen = server.split_target(target, options)
        client = server.Client(base, server.without_userinfo(target), options.limits)
        runs = server.list_runs(client, chosen)
    else:
        raise StabUsageError(
            f"--each-run follows the runs of an MLflow store (mlruns/, sqlite:///, http://), "
            f"not {name} inputs"
        )
    return [r for r in runs if options.include_deleted or not r.deleted]


@dataclass
class _Member:
    """One run of the experiment being watched."""

    run: MlflowRun
    options: ReadOptions
    watch: Watch
    final: Analysis | None = None
    done: bool = False


class ExperimentWatch:
    def __init__(
        self,
        name: str,
        target: str,
        options: ReadOptions,
        open_run: Callable[[ReadOptions], Watch],
        final_of: Callable[[ReadOptions], Analysis],
        say: Callable[[str], None],
        clock: Clock,
        interval_s: float,
        idle_s: float | None,
    ):
        self.name, self.target, self.options = name, target, options
        self.open_run = open_run  # the Watch of one run, from the reader options naming it
        self.final_of = final_of  # `stab analyze` of one run, from the same options
        self.say = say
        self.clock = clock
        self.interval_s, self.idle_s = interval_s, idle_s
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
            raise StabInputError(self.target, "no MLflow run was logged while it was watched")
        return [m.final for m in self.members.values() if m.final is not None]

    def _join_new_runs(self) -> bool:
        """Take in the runs not seen before; whether there was one."""
        try:
            runs = list_runs(self.name, self.target, self.options)
        except (StabInputError, OSError) as err:
            line = f"{self.target}: the runs could not be listed: {err}"
            if line != self._listing_failed:
                self.say(line)
            self._listing_failed = line
            return False
        self._listing_failed = None
        joined = False
        for run in runs:
            if run.run_id in self.members:
                continue
            options = replace(self.options, run=run.run_id)
            try:
                watch = self.open_run(options)
            except StabInputError as err:  # listed before its first write: asked again
                self.say(f"run {run.label}: not followed yet: {err.reason}")
                continue
            self.members[run.run_id] = _Member(run, options, watch)
            self.say(f"run {run.label} joined the watch")
            joined = True
        return joined

    def _finish(self, member: _Member) -> None:
        member.done = True
        try:
            member.final = self.final_of(member.options)
        except (StabInputError, StabUsageError) as err:
            self.say(f"run {member.run.label}: no final verdict: {err}")
            member.watch.follower.close()
            return
        member.watch.take(member.final, final=True)
        member.watch.follower.close()
