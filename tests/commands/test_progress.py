"""Progress on long work (issue 15, item 4): on stderr, for a person only. Never beside a
machine format, never when stderr is not a terminal, never with --quiet."""

from __future__ import annotations

import contextlib
import sys

from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.commands import analyze as analyze_command
from stabilitycli.commands import bars
from stabilitycli.core import progress
from stabilitycli.detect.registry import load_rules
from stabilitycli.ingest.jsonl import reader as jsonl
from stabilitycli.pipeline.run import load_run
from stabilitycli.report.formats import Format
from tests.conftest import FIXTURES

RUN = FIXTURES / "runs" / "spike-lr-jump" / "run.jsonl"


def test_progress_is_for_a_person_at_a_terminal_only(monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert analyze_command.progress_wanted(Format.terminal, quiet=False)
    assert not analyze_command.progress_wanted(Format.terminal, quiet=True)
    for machine in (Format.json, Format.junit, Format.github, Format.concise, Format.markdown):
        assert not analyze_command.progress_wanted(machine, quiet=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not analyze_command.progress_wanted(Format.terminal, quiet=False)


def test_any_log_gets_a_bar_when_a_person_watches() -> None:
    """The bar is made for any input, small or big; it draws itself only once the work has
    taken PROGRESS_DELAY_SECONDS, so a quick run prints nothing (test below)."""
    assert isinstance(bars.bar_for(str(RUN), wanted=True), bars.ReadingBar)
    assert isinstance(bars.bar_for(str(RUN.parent), wanted=True), bars.ReadingBar)
    assert isinstance(bars.bar_for(str(RUN), wanted=False), contextlib.nullcontext)


def test_the_library_tells_the_bytes_read_and_the_rules_done(monkeypatch) -> None:
    """A log read in pieces tells how far the read got after each piece, up to its size;
    then every rule done, of the rules selected. Nothing is told outside the block."""
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 4096)
    heard: list[tuple[str, int, int, int]] = []
    height = load_run(RUN).frame.height
    with progress.listening(lambda *said: heard.append(said)):
        analyze(RUN)
    size = RUN.stat().st_size
    read = [(done, total) for stage, done, total, _ in heard if stage == "read"]
    assert len(read) >= size // 4096
    assert all(total == size for _, total in read)
    assert [done for done, _ in read] == sorted(done for done, _ in read)
    assert read[-1][0] == size
    # the rows read so far, told with the bytes: never fewer than before
    rows_read = [rows for stage, _, _, rows in heard if stage == "read"]
    assert rows_read == sorted(rows_read) and 0 < rows_read[-1] <= height
    rules = [(done, total) for stage, done, total, _ in heard if stage == "rules"]
    selected = len(load_rules())
    assert rules == [(done, selected) for done in range(selected + 1)]
    # a row is through the rules when every rule has read it
    rules_rows = [rows for stage, _, _, rows in heard if stage == "rules"]
    assert rules_rows[0] == 0 and rules_rows[-1] == height
    # the rules come after the read
    assert [stage for stage, *_ in heard].index("rules") > len(read) - 1
    count = len(heard)
    analyze(RUN)
    assert len(heard) == count


def test_the_bar_shows_what_it_hears() -> None:
    now = [100.0]
    bar = bars.ReadingBar("run.jsonl", 10 << 20, clock=lambda: now[0])
    task = bar.bar.tasks[0]
    assert task.total is None  # a pulse until a reader says how far it got
    bar.heard("read", 0, 10 << 20)
    now[0] = 102.0
    bar.heard("read", 5 << 20, 10 << 20, 400_000)
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (5 << 20, 10 << 20)
    assert task.fields["amount"] == "5 of 10 MB"
    assert task.fields["doing"] == "reading run.jsonl"
    assert task.fields["rate"] == "200,000 rows/s"  # 400,000 rows in the read's 2 s
    bar.heard("rules", 0, 13)
    now[0] = 106.0
    bar.heard("rules", 3, 13, 300_000)
    task = bar.bar.tasks[0]
    assert (task.completed, task.total) == (3, 13)
    assert (task.fields["doing"], task.fields["amount"]) == ("checking the rules", "3 of 13 rules")
    assert task.fields["rate"] == "75,000 rows/s"  # the rules' own clock: 4 s, not 6
    bar.heard("ranks", 0, 4)
    now[0] = 107.0
    bar.heard("ranks", 1, 4, 250_000)
    task = bar.bar.tasks[0]
    assert (task.fields["doing"], task.fields["amount"]) == ("comparing the ranks", "1 of 4 parts")
    assert task.fields["rate"] == "250,000 rows/s"
    now[0] = 108.0
    bar.heard("rules", 4, 13, 400_000)
    # back to the rules: their clock kept running from their first word (at 102 s)
    assert bar.bar.tasks[0].fields["rate"] == "66,667 rows/s"


def test_a_quick_run_draws_nothing_and_a_slow_one_the_bar() -> None:
    """The bar starts from a timer: work that ends before it fires never draws it; work that
    outlasts it does, and the bar is gone (transient) when the work ends."""
    quick = bars.ReadingBar("run.jsonl", delay_seconds=3600)
    with quick:
        progress.tell("rules", 1, 2, 10)
    assert not quick.shown and not quick.timer.is_alive()
    slow = bars.ReadingBar("run.jsonl", delay_seconds=0)
    with slow:
        slow.timer.join()  # the delay has passed: the timer has drawn the bar
        assert slow.shown
        progress.tell("rules", 1, 2, 10)
    assert not slow.shown


def test_no_progress_reaches_a_pipe(monkeypatch) -> None:
    monkeypatch.setattr(bars, "PROGRESS_DELAY_SECONDS", 0)
    runner = CliRunner()
    one = runner.invoke(app, ["analyze", str(RUN)])
    many = runner.invoke(app, ["analyze", "--format", "json", str(RUN), str(RUN)])
    for result in (one, many):
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "analysing" not in result.stderr
