"""The TensorBoard follower against event files written by tensorboardX while it polls."""

from __future__ import annotations

import math
import shutil
import struct
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboardX", reason="tensorboardX writes the event files these tests read")

from tensorboardX import SummaryWriter

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tensorboard import reader
from stabilitycli.watch.follow import Follower
from stabilitycli.watch.sources import tensorboard as tb_source
from tests.watch.sources._same import (
    assert_said_once,
    assert_same_run,
    cut_points,
    grow,
    refuse_reading,
)

OPTIONS = ReadOptions()


def _value(step: int) -> float:
    """A loss with NaN, +Inf and -Inf in it: they must come through exactly."""
    special = {40: math.nan, 41: math.inf, 42: -math.inf}
    return special.get(step, 2.0 + math.sin(step / 7.0) / 4.0)


def _log(writer: SummaryWriter, steps: range) -> None:
    for step in steps:
        writer.add_scalar("train/loss", _value(step), step)
        writer.add_scalar("train/grad_norm", 1.0 + (step % 5) / 10.0, step)


def _written(folder: Path, steps: range) -> tuple[Path, bytes]:
    """An event file tensorboardX wrote and closed, and its bytes."""
    writer = SummaryWriter(str(folder))
    _log(writer, steps)
    writer.close()
    (event_file,) = folder.iterdir()
    return event_file, event_file.read_bytes()


def _complete(data: bytes) -> int:
    """Where the last whole TFRecord of `data` ends (length, its CRC, payload, CRC)."""
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        if pos + 12 + length + 4 > len(data):
            break
        pos += 12 + length + 4
    return pos


def test_follows_a_live_writer_and_a_resume(tmp_path):
    run = tmp_path / "run"
    writer = SummaryWriter(str(run))
    writer.flush()
    follower: Follower = tb_source.follow(str(run), OPTIONS)
    assert follower.poll().problems == []
    for start in range(0, 300, 60):
        _log(writer, range(start, start + 60))
        writer.flush()
        poll = follower.poll()  # tensorboardX's writer thread may still hold a few events
        assert poll.records_read > 60 and poll.problems == [] and poll.reread is None
        assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))
    writer.close()
    # the job is restarted from step 200: a second event file in the same folder
    time.sleep(1.1)  # the file name carries the second it was created
    resumed = SummaryWriter(str(run))
    _log(resumed, range(200, 260))
    resumed.flush()
    poll = follower.poll()
    assert poll.records_read > 60 and poll.reread is None
    snapshot = follower.snapshot()
    assert_same_run(snapshot, reader.read(run, OPTIONS))
    assert snapshot.source.restarts and snapshot.frame["step"].max() == 299
    loss = dict(
        zip(snapshot.frame["step"].to_list(), snapshot.frame["loss"].to_list(), strict=True)
    )
    assert math.isnan(loss[40]) and loss[41] == math.inf and loss[42] == -math.inf
    resumed.close()
    follower.close()


def test_random_cut_points_equal_the_reader_on_the_complete_records(tmp_path):
    source, data = _written(tmp_path / "whole", range(600))
    live, ref = tmp_path / "live" / "run", tmp_path / "ref" / "run"
    live.mkdir(parents=True)
    ref.mkdir(parents=True)
    (live / source.name).write_bytes(b"")
    follower = tb_source.follow(str(live), OPTIONS)
    done = 0
    for cut in cut_points(len(data), 25, seed=7):
        grow(live / source.name, data, done, cut)
        done = cut
        poll = follower.poll()
        assert poll.problems == [] and poll.reread is None
        complete = _complete(data[:cut])
        assert follower.folders["."].files[0].offset == complete  # a cut record waits
        (ref / source.name).write_bytes(data[:complete])
        try:
            want = reader.read(ref, OPTIONS)
        except Exception as err:  # nothing scalar yet: the follower says the same
            with pytest.raises(type(err)):
                follower.snapshot()
            continue
        assert_same_run(follower.snapshot(), want, paths={str(ref): str(live)})
    assert follower.snapshot().frame.height == 600


def _records_end(data: bytes, count: int) -> int:
    """Where the first `count` TFRecords of `data` end."""
    pos = 0
    for _ in range(count):
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 12 + length + 4
    return pos


@pytest.mark.slow  # 100k points written first
def test_a_poll_reads_only_what_was_added(tmp_path):
    """100k points, then 100 more: the poll reads the new bytes and nothing else."""
    written, data = _written(tmp_path / "whole", range(50_050))  # two tags a step
    run = tmp_path / "run"
    run.mkdir()
    event_file = run / written.name
    first = _records_end(data, 1 + 100_000)  # file_version, then 100k points
    grow(event_file, data, 0, first)
    follower = tb_source.follow(str(run), OPTIONS)
    assert follower.poll().records_read == 1 + 100_000
    before = follower.bytes_read
    grow(event_file, data, first, len(data))
    started = time.perf_counter()
    poll = follower.poll()
    elapsed = time.perf_counter() - started
    assert poll.records_read == 100
    assert follower.bytes_read - before == len(data) - first
    assert follower.poll().records_read == 0 and follower.bytes_read - before == len(data) - first
    assert elapsed < 1.0, f"{elapsed:.3f} s for a poll of 100 new points"
    assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))


def test_rank_folders_are_one_per_rank_run(tmp_path):
    writers = [SummaryWriter(str(tmp_path / f"rank_{rank}")) for rank in range(2)]
    follower = tb_source.follow(str(tmp_path), OPTIONS)
    for start in (0, 30):
        for writer in writers:
            _log(writer, range(start, start + 30))
            writer.flush()
        follower.poll()
        snapshot = follower.snapshot()
        assert_same_run(snapshot, reader.read(tmp_path, OPTIONS))
        assert snapshot.has_ranks
    for writer in writers:
        writer.close()


def test_deleted_unreadable_and_rewritten_files(tmp_path, monkeypatch):
    run = tmp_path / "run"
    event_file, data = _written(run, range(100))
    follower = tb_source.follow(str(run), OPTIONS)
    follower.poll()
    kept = follower.snapshot()
    # permission lost: one line, said once, and the run read so far stays
    refuse_reading(monkeypatch, lambda path: path == event_file)
    assert_said_once(follower, "permission denied")
    monkeypatch.undo()
    assert follower.poll().problems == []
    # deleted: one line, the watch goes on with what it read
    event_file.unlink()
    poll = follower.poll()
    assert len(poll.problems) == 1 and "gone" in poll.problems[0]
    assert_same_run(follower.snapshot(), kept)
    shutil.rmtree(run)
    assert len(follower.poll().problems) == 1 and follower.poll().problems == []
    # the file comes back shorter (a job restarted from scratch): read again from its start
    run.mkdir()
    (run / event_file.name).write_bytes(data[: _complete(data[: len(data) // 2])])
    poll = follower.poll()
    assert poll.reread is not None and poll.problems == []
    assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))
    # garbage appended: the damaged bytes are rejected as the reader rejects them
    grow(run / event_file.name, b"\x00garbage" * 4 + data, 0, 32 + len(data))
    poll = follower.poll()
    assert poll.problems == []
    assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))


def test_two_writers_in_one_folder_keep_the_readers_file_order(tmp_path, monkeypatch):
    """A trainer and an evaluator writing the same run folder (the evaluator writing the loss
    too, which makes the order of the files matter): polls take their records
    interleaved, the snapshot puts them back file by file as the reader reads them (also
    once a long watch has joined the points of many polls into one frame)."""
    monkeypatch.setattr(tb_source, "_PARTS_MAX", 1)
    run = tmp_path / "run"
    train = SummaryWriter(str(run))
    time.sleep(1.1)  # a second event file, named a second later
    evaluate = SummaryWriter(str(run), filename_suffix=".eval")
    follower = tb_source.follow(str(run), OPTIONS)
    for start in range(0, 120, 30):
        _log(train, range(start, start + 30))
        for step in range(start, start + 30, 10):
            evaluate.add_scalar("eval/loss", 2.5 - step / 100.0, step)
            evaluate.add_scalar("train/loss", 2.4 - step / 100.0, step)  # logged twice: order
        train.flush()
        evaluate.flush()
        follower.poll()
        assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))
    train.close()
    evaluate.close()
    follower.poll()
    assert_same_run(follower.snapshot(), reader.read(run, OPTIONS))
