"""The watch itself: poll the follower, judge what is complete, alert what is new, act on it.

Cost: a poll reads only the bytes written since the last one. A judgment is the library's
`analyze` on the whole snapshot (so the alerts are the findings `stab analyze` gives on the
same bytes, never those of a shortened log), and its cost grows with the run; it is
throttled by CPU time: a judgment starts only while the CPU time the watch spent (its
polls and judgments) stays within `cpu_share` of the wall time watched (the first is
always made). Early in a run every poll with new records is judged; on a long run the
judgments space out so that the average cost stays at `cpu_share` of one core.

A poll with new records that the budget does not give a whole-run judgment gets a tail
judgment instead, where the follower keeps a tail (`tail.py`): the local rules (a spike's
onset, NaN/Inf, the loss scaler, a rank gone NaN, silent or shifted) on the last lines of
each file, with the noise memory the last whole-run judgment measured. Its cost is that of
the rules' windows, so a material event is alerted at the poll that brings its decisive
point however long the run. It only adds: a new event, or a pending spike settled; what it
alerts, the next whole-run judgment confirms or withdraws, and the final document is the
whole run's. Its CPU counts in the same budget. The clock is passed in so that tests run
the loop without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import field

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Analysis, Severity
from stabilitycli.core.records import dataclass
from stabilitycli.detect.autocorr import NOISE_MEMORY_KEY
from stabilitycli.watch.alerts import Alert, AlertBook
from stabilitycli.watch.follow import Follower, Poll
from stabilitycli.watch.hooks import Hooks


@dataclass
class Clock:
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cpu: Callable[[], float] = time.process_time


@dataclass
class WatchSettings:
    interval_s: float = 2.0
    # the run is over when nothing was written for this long (None: never, by that)
    idle_s: float | None = 600.0
    # the share of one core that the watch (its polls and judgments) may take on average
    cpu_share: float = 0.04
    fail_on: Severity = Severity.ERROR
    hooks: Hooks = field(default_factory=Hooks)
    # judge the run's last lines between whole-run judgments (where the format has a tail)
    tail: bool = True


@dataclass
class WatchStats:
    polls: int = 0
    judgments: int = 0
    judge_cpu_s: float = 0.0  # the whole-run judgments' and the tail judgments'
    poll_cpu_s: float = 0.0
    tail_judgments: int = 0
    tail_cpu_s: float = 0.0
    records: int = 0


class Watch:
    def __init__(
        self,
        follower: Follower,
        judge: Callable[..., Analysis],
        settings: WatchSettings,
        emit: Callable[[Alert], None],
        say: Callable[[str], None],
        clock: Clock | None = None,
        size_of: Callable[[], int] | None = None,
        judge_tail: Callable[..., Analysis] | None = None,
        tail_from_steps: int = 0,
        stats: WatchStats | None = None,
    ):
        self.follower = follower
        # the bytes the log holds: a writer midway through a large record (an image in an
        # event file) is writing, though no record is complete yet, so it is not idle
        self.size_of = size_of
        self.judge = judge  # (RunData, derived) -> Analysis
        # (RunData, derived) -> Analysis of the local rules on a run's last lines; a tail
        # alerts only from this many steps after its first one (the rules' baseline before)
        self.judge_tail = judge_tail
        self.tail_from_steps = tail_from_steps
        # what the last whole-run judgment measured that a tail takes as measured
        self._kept: dict = {}
        self._untailed = False
        self.settings = settings
        self.emit = emit  # an alert line, on the alert stream
        self.say = say  # a status line (stderr)
        self.clock = clock or Clock()
        self.book = AlertBook(min(Severity.WARNING, settings.fail_on))
        self.stats = stats if stats is not None else WatchStats()
        self._unjudged = False
        self._said: set[str] = set()
        self._rejected = 0
        self._started = self.clock.now()

    def run(self) -> str:
        """Watch until the run ends; why it ended."""
        last_growth = self._started
        size = self.size_of() if self.size_of else -1
        try:
            while True:
                poll = self.poll_once()
                now = self.clock.now()
                grown = self.size_of() if self.size_of else -1
                if poll.records_read or poll.reread or grown != size:
                    last_growth, size = now, grown
                if poll.ended:
                    return poll.ended
                idle = self.settings.idle_s
                if idle is not None and now - last_growth >= idle:
                    return f"nothing written for {idle:g} s (--idle)"
                self.clock.sleep(self.settings.interval_s)
        except KeyboardInterrupt:
            return "interrupted (Ctrl-C)"

    def poll_once(self) -> Poll:
        """One poll, and a judgment when something new is complete and the budget allows."""
        self.stats.polls += 1
        began = self.clock.cpu()
        try:
            poll = self.follower.poll()
        except (StabInputError, StabUsageError, OSError) as err:
            poll = Poll(problems=[f"{self.follower.display}: this poll failed: {err}"])
        self.stats.poll_cpu_s += self.clock.cpu() - began
        for problem in poll.problems:
            self.say(problem)
        if poll.reread:
            self.say(poll.reread)
        self.stats.records += poll.records_read
        if poll.records_read or poll.reread:
            self._unjudged = self._untailed = True
        if self._unjudged and self._within_budget():
            self.judge_now()
        elif self._untailed:
            self.tail_now()
        return poll

    def _within_budget(self) -> bool:
        if self.stats.judgments == 0:
            return True
        watched = self.clock.now() - self._started
        spent = self.stats.judge_cpu_s + self.stats.poll_cpu_s
        return spent <= self.settings.cpu_share * watched

    def judge_now(self) -> None:
        self._unjudged = self._untailed = False
        began = self.clock.cpu()
        derived: dict = {}
        try:
            analysis = self.judge(self.follower.snapshot(), derived)
        except (StabInputError, StabUsageError) as err:
            self._say_once(f"{self.follower.display}: not judged yet: {err}")
            return
        finally:
            self.stats.judgments += 1
            self.stats.judge_cpu_s += self.clock.cpu() - began
        self._kept = {k: v for k, v in derived.items() if k.startswith(NOISE_MEMORY_KEY)}
        self._tell_rejections(analysis)
        self.take(analysis)

    def tail_now(self) -> None:
        """The local rules on the last lines of the run: alert what they find new."""
        self._untailed = False
        tail = getattr(self.follower, "tail", None)
        if tail is None or self.judge_tail is None:
            return
        began = self.clock.cpu()
        try:
            run = tail()
            if run is None or run.frame.height == 0:
                return
            first = _common_first_step(run)
            analysis = self.judge_tail(run, dict(self._kept))
        except (StabInputError, StabUsageError):
            return  # the whole-run judgment says why, when it comes
        finally:
            spent = self.clock.cpu() - began
            self.stats.tail_judgments += 1
            self.stats.tail_cpu_s += spent
            self.stats.judge_cpu_s += spent
        logged = analysis.source.last_step
        for alert in self.book.add(analysis.findings, logged, first + self.tail_from_steps):
            self._act(alert)

    def take(self, analysis: Analysis, final: bool = False) -> None:
        """Alert what this judgment found that was not alerted; act on what calls for it."""
        for alert in self.book.update(analysis, analysis.source.last_step, final):
            self._act(alert)

    def _act(self, alert: Alert) -> None:
        self.emit(alert)
        if self.settings.hooks.any and self.book.to_act_on(alert, self.settings.fail_on):
            self.settings.hooks.act(alert, self.say)

    def _tell_rejections(self, analysis: Analysis) -> None:
        source = analysis.source
        if source.rows_rejected > self._rejected:
            first = next(iter(source.rejections[-1:]), None)
            where = f" (latest: line {first.line}: {first.reason})" if first else ""
            self.say(
                f"{self.follower.display}: {source.rows_rejected} of {source.rows_read} rows "
                f"rejected so far{where}"
            )
            self._rejected = source.rows_rejected

    def _say_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.say(line)


def _common_first_step(run) -> int:
    """The first step every rank's tail reaches: a rank silent for long has old lines only,
    and before the others' first step their trailing windows are not there."""
    import polars as pl

    frame = run.frame
    if "rank" not in frame.columns:
        return int(frame["step"].min())
    return int(frame.group_by("rank").agg(pl.col("step").min())["step"].max())
