"""The bounded-tail judgment: between whole-run judgments (throttled on a long run), the
local rules judge the last lines of each file, so an event is alerted at the poll that
brings its decisive point; the final document stays `stab analyze`'s."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.rank_dir import read as read_rank_dir
from stabilitycli.ingest.rank_dir import read_joined
from stabilitycli.pipeline import run as pipeline
from stabilitycli.report.formats import Format
from stabilitycli.watch.loop import WatchSettings, WatchStats
from stabilitycli.watch.session import WatchRequest, run_watch
from stabilitycli.watch.tail import TailKeeper
from tests.watch._replay import TailClock
from tests.watch._runs import jsonl_lines, loss_at

BACKLOG = 1500  # steps logged when the watch starts
PER_POLL = 20  # 10 steps a second, a poll every 2 s
SPIKE = 2010


def _document(analysis) -> dict:
    return json.loads(Format.json.render(analysis))


def _watch(target: Path, writes: list, **settings):
    alerts: list = []
    stats = WatchStats()
    options = WatchSettings(interval_s=2.0, idle_s=4.0, cpu_share=1e-9, **settings)
    request = WatchRequest(str(target), ReadOptions(), Thresholds(), options)
    final = run_watch(request, alerts.append, lambda _line: None, TailClock(writes), stats=stats)
    return final, alerts, stats


def _jsonl_writes(log: Path, last: int, **spike) -> list:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(jsonl_lines(0, BACKLOG, **spike))
    chunks = [jsonl_lines(a, a + PER_POLL, **spike) for a in range(BACKLOG, last, PER_POLL)]
    return [lambda data=data: log.open("ab").write(data) for data in chunks]


def _poll_end(step: int) -> int:
    """The last step written by the poll whose lines hold `step`."""
    return BACKLOG + ((step - BACKLOG) // PER_POLL + 1) * PER_POLL - 1


def test_a_spike_on_a_long_run_is_alerted_by_the_tail_at_its_own_poll(tmp_path: Path) -> None:
    log = tmp_path / "job" / "metrics.jsonl"
    writes = _jsonl_writes(log, 2200, spike_at=SPIKE, stays=True)
    polls = len(writes)
    final, alerts, stats = _watch(log, writes)
    assert stats.judgments == 1 and stats.tail_judgments == polls  # no other whole one
    first = next(a for a in alerts if a.code == "spike")
    assert (first.type, first.step, first.status) == ("alert", SPIKE, "pending")
    assert first.logged_step == _poll_end(SPIKE)  # judged at the poll that wrote the spike
    assert first.run == "job"  # the run's name, not the tail's scratch folder
    settled = next(a for a in alerts if a.code == "spike" and a.type == "update")
    assert settled.status == "persistent" and settled.logged_step == _poll_end(SPIKE + 50)
    assert _document(final) == _document(pipeline.analyze(str(log), Thresholds()))


def test_a_healthy_long_run_gets_no_tail_alert(tmp_path: Path) -> None:
    log = tmp_path / "job" / "metrics.jsonl"
    final, alerts, stats = _watch(log, _jsonl_writes(log, 2600))
    assert stats.tail_judgments > 50
    assert alerts == []
    assert final.verdict.code == pipeline.analyze(str(log), Thresholds()).verdict.code


def test_without_the_tail_the_throttled_watch_alerts_only_at_the_end(tmp_path: Path) -> None:
    log = tmp_path / "job" / "metrics.jsonl"
    writes = _jsonl_writes(log, 2200, spike_at=SPIKE, stays=True)
    _, alerts, stats = _watch(log, writes, tail=False)
    assert stats.tail_judgments == 0
    first = next(a for a in alerts if a.code == "spike")
    assert first.logged_step == 2199  # from the final judgment


def test_a_csv_tail_keeps_its_header(tmp_path: Path) -> None:
    """pandas writes the header once; the tail of the table is read under it."""
    log = tmp_path / "job" / "metrics.csv"
    log.parent.mkdir()
    steps = np.arange(0, 2200)
    frame = pd.DataFrame({"step": steps, "loss": loss_at(steps, SPIKE, stays=True), "lr": 3e-4})
    frame.iloc[:BACKLOG].to_csv(log, index=False)
    writes = [
        lambda a=a: frame.iloc[a : a + PER_POLL].to_csv(log, mode="a", header=False, index=False)
        for a in range(BACKLOG, 2200, PER_POLL)
    ]
    final, alerts, _ = _watch(log, writes)
    first = next(a for a in alerts if a.code == "spike")
    assert first.step == SPIKE and first.logged_step == _poll_end(SPIKE)
    assert _document(final) == _document(pipeline.analyze(str(log), Thresholds()))


def _watch_ranks(folder: Path, write, last: int):
    """The backlog written, then a poll's steps at a time up to `last`, watched with every
    poll after the first judged by its tail alone."""
    write(0, BACKLOG)
    writes = [lambda a=a: write(a, a + PER_POLL) for a in range(BACKLOG, last, PER_POLL)]
    final, alerts, stats = _watch(folder, writes)
    assert stats.judgments == 1
    return final, alerts


def _rank_lines(rank: int, a: int, b: int, nan_from: int | None) -> bytes:
    steps = np.arange(a, b)
    loss = loss_at(np.arange(0, b), seed=rank)[a:b]
    if nan_from is not None:
        loss = np.where(steps >= nan_from, np.nan, loss)
    return b"".join(
        json.dumps({"step": int(s), "rank": rank, "loss": float(v)}).encode() + b"\n"
        for s, v in zip(steps, loss, strict=True)
    )


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_rank_gone_nan_is_alerted_by_the_tail_of_every_rank(tmp_path: Path, suffix) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    ranks, nan_rank = 16 if suffix == "jsonl" else 4, 2

    def write(a: int, b: int) -> None:
        for rank in range(ranks):
            nan_from = SPIKE if rank == nan_rank else None
            path = folder / f"rank_{rank:02d}.{suffix}"
            if suffix == "csv":  # pandas: the header once, then rows appended
                steps = np.arange(a, b)
                loss = loss_at(np.arange(0, b), seed=rank)[a:b]
                loss = np.where(steps >= (nan_from or b), np.nan, loss)
                frame = pd.DataFrame({"step": steps, "loss": loss})
                frame.to_csv(path, mode="a", header=a == 0, index=False, na_rep="NaN")
                continue
            with open(path, "ab") as sink:
                sink.write(_rank_lines(rank, a, b, nan_from))

    final, alerts = _watch_ranks(folder, write, 2200)
    first = next(a for a in alerts if a.code == "rank-nonfinite")
    assert (first.step, first.rank, first.logged_step) == (SPIKE, nan_rank, _poll_end(SPIKE))
    assert _document(final) == _document(pipeline.analyze(str(folder), Thresholds()))


def test_joined_rank_lines_read_as_the_rank_files(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    chunks = {}
    for rank in range(4):
        path = folder / f"rank_{rank}.jsonl"
        chunks[path] = _rank_lines(rank, 100 * rank, 100 * rank + 50, 120 if rank == 1 else None)
        path.write_bytes(chunks[path])
    options = ReadOptions(format_in="rank_dir")
    joined = read_joined(folder, chunks, options)
    assert joined is not None
    alone = read_rank_dir(folder, options)
    assert joined.frame.equals(alone.frame, null_equal=True)
    assert joined.source.to_dict() == alone.source.to_dict()


@pytest.mark.parametrize("headed", [False, True])
def test_the_keeper_holds_the_last_lines(headed: bool) -> None:
    keeper = TailKeeper(3, lambda _path: headed)
    path = Path("log")
    keeper.take(path, b"h\n1\n")
    assert keeper.current() == {path: b"h\n1\n"}
    keeper.take(path, b"2\n3\n4\n")
    assert keeper.current() == {path: (b"h\n" if headed else b"") + b"2\n3\n4\n"}
    keeper.reset(path)
    assert keeper.current() == {}


def test_a_rank_gone_silent_is_alerted_by_the_tail_at_the_first_poll_without_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    silent, stops = 3, SPIKE + 10  # rank 3 writes nothing after step 2019

    def write(a: int, b: int) -> None:
        for rank in range(8):
            if rank == silent and a >= stops:
                continue
            with open(folder / f"rank_{rank}.jsonl", "ab") as sink:
                sink.write(_rank_lines(rank, a, b, None))

    final, alerts = _watch_ranks(folder, write, 2400)
    first = next(a for a in alerts if a.code == "rank-silent")
    assert (first.step, first.rank) == (_poll_end(stops) - PER_POLL + 1, silent)
    assert first.logged_step == _poll_end(stops)  # the first poll that lacks its lines
    assert _document(final) == _document(pipeline.analyze(str(folder), Thresholds()))
