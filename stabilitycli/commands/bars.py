"""The progress bars `stab analyze` draws on stderr: one big log read, or many runs swept.

rich is imported when a bar is made; a bar is drawn for a person only (`progress_wanted`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from stabilitycli.report.formats import Format


def progress_wanted(output: Format, quiet: bool) -> bool:
    """Progress goes to stderr only for a person: a terminal there, the terminal format on
    stdout (never beside JSON, JUnit, GitHub or other machine output), and not --quiet."""
    return not quiet and output is Format.terminal and sys.stderr.isatty()


# a bar shows only once the work has taken this long: a quick run prints nothing on stderr
PROGRESS_DELAY_SECONDS = 2.0

_DOING = {"read": "reading {name}", "rules": "checking the rules", "ranks": "comparing the ranks"}
_UNIT = {"rules": "rules", "ranks": "parts"}


class ReadingBar:
    """A transient bar while one log is read and analysed: a rich Progress that listens to
    `stabilitycli.core.progress`, drawn only once the work has taken PROGRESS_DELAY_SECONDS
    (a timer starts it), with the rows a second of the stage in hand."""

    def __init__(
        self,
        name: str,
        size_bytes: int = 0,
        *,
        delay_seconds: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import threading
        import time

        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.name = name
        self.clock = clock or time.monotonic
        # the name is the user's: no rich markup in it, so the columns render fields as text
        self.bar = Progress(
            TextColumn("{task.fields[doing]}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[amount]}", markup=False),
            TextColumn("{task.fields[rate]}", markup=False),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=_stderr_console(),
            transient=True,
        )
        self.stage = "read"
        # each stage's own clock, kept when the rules hand over to the rank check and back
        self.began: dict[str, float] = {}
        size = f"{size_bytes >> 20:,} MB" if size_bytes else ""
        self.task = self.bar.add_task(
            "read", total=None, doing=f"reading {name}", amount=size, rate=""
        )
        delay = PROGRESS_DELAY_SECONDS if delay_seconds is None else delay_seconds
        self.timer = threading.Timer(delay, self.bar.start)
        self.timer.daemon = True
        self._stack = contextlib.ExitStack()

    def heard(self, stage: str, done: int, total: int, rows: int = 0) -> None:
        now = self.clock()
        began = self.began.setdefault(stage, now)
        if stage != self.stage:
            # a new stage starts its own bar, so the time left is not the read's
            self.stage = stage
            self.bar.reset(self.task, total=total or None)
        if stage == "read":
            amount = f"{done >> 20:,} of {total >> 20:,} MB" if total else f"{done >> 20:,} MB"
        else:
            amount = f"{done} of {total} {_UNIT.get(stage, 'parts')}"
        rate = f"{rows / (now - began):,.0f} rows/s" if rows and now > began else ""
        doing = _DOING.get(stage, stage).format(name=self.name)
        self.bar.update(
            self.task, completed=done, total=total or None, doing=doing, amount=amount, rate=rate
        )

    @property
    def shown(self) -> bool:
        return self.bar.live.is_started

    def __enter__(self) -> ReadingBar:
        from stabilitycli.core.progress import listening

        self._stack.enter_context(listening(self.heard))
        self._stack.callback(self._stop)
        self.timer.start()
        return self

    def _stop(self) -> None:
        self.timer.cancel()
        self.timer.join()  # a timer that fired as the work ended has started the bar by now
        if self.shown:
            self.bar.stop()

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)


def bar_for(target: str, wanted: bool):
    """A transient bar on stderr while one log is read and analysed, drawn once that has
    taken about PROGRESS_DELAY_SECONDS: the megabytes and rows read while a reader says how
    far it got (the JSONL reader does, a piece at a time), a pulse while one reads the log
    in one go, then the rules or the rank check, each stage with its rows a second.
    Nothing when not `wanted` (progress_wanted)."""
    if not wanted:
        return contextlib.nullcontext()
    import os

    from stabilitycli.core.errors import visible

    size = os.path.getsize(target) if os.path.isfile(target) else 0
    return ReadingBar(visible(os.path.basename(target.rstrip("/")) or target), size)


def with_sweep_bar(runs: int, sweep: Callable[[Callable[[Any], None]], Any]) -> Any:
    """`sweep(on_done)` under a transient bar of the runs done, their rate and the time left."""
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
        console=_stderr_console(),
        transient=True,
    ) as progress:
        task = progress.add_task("runs", total=runs, rate="")

        def done(_result) -> None:
            progress.advance(task)
            state = progress.tasks[task]
            if state.elapsed:
                progress.update(task, rate=f"{state.completed / state.elapsed:.1f} runs/s")

        return sweep(done)


def _stderr_console():
    """stderr's console, decided where stdout's is (a bar shows only on a terminal)."""
    from stabilitycli.report.console import console, medium

    return console(medium(sys.stderr), stderr=True)
