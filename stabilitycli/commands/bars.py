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


class ReadingBar:
    """A transient bar while one big log is read and analysed: a rich Progress that
    listens to `stabilitycli.core.progress`."""

    def __init__(self, name: str, size_bytes: int) -> None:
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
            console=_stderr_console(),
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

    def __enter__(self) -> ReadingBar:
        from stabilitycli.core.progress import listening

        self._stack.enter_context(self.bar)
        self._stack.enter_context(listening(self.heard))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)


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
