"""The W&B offline follower: `.wandb` files of the real client grown at random cut points,
and long logs framed as the client frames them (tests/ingest/test_hostile_wandb.py)."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.wandb import offline
from stabilitycli.watch.sources import wandb_offline as wandb_source
from tests.ingest.test_hostile_wandb import _field, _frame_log, _history_record
from tests.ingest.test_wandb_offline import FILE1, FILE2
from tests.watch.sources._same import (
    assert_said_once,
    assert_same_run,
    cut_points,
    grow,
    refuse_reading,
)

OPTIONS = ReadOptions()


def _live_copy(tmp_path: Path, source: Path, name: str) -> tuple[Path, Path]:
    live = tmp_path / name / source.parent.name / source.name
    live.parent.mkdir(parents=True)
    live.write_bytes(b"")
    return live, tmp_path / "ref" / source.parent.name / source.name


@pytest.mark.parametrize("fixture", [FILE1, FILE2], ids=["nan-inf", "two-blocks"])
def test_random_cut_points_equal_the_reader_on_the_whole_records(tmp_path, fixture):
    data = fixture.read_bytes()
    live, ref = _live_copy(tmp_path, fixture, "live")
    ref.parent.mkdir(parents=True)
    follower = wandb_source.follow(str(live.parent), OPTIONS)
    done = 0
    for cut in cut_points(len(data), 40, seed=3):
        grow(live, data, done, cut)
        done = cut
        poll = follower.poll()
        assert poll.problems == [] and poll.reread is None
        whole = follower.history.walk.pos
        assert whole <= cut
        ref.write_bytes(data[:whole])
        try:
            want = offline.read(ref, OPTIONS)
        except StabInputError as err:  # no history record yet: the follower says the same
            with pytest.raises(StabInputError, match=err.reason.split(" among")[0]):
                follower.snapshot()
            continue
        got = follower.snapshot()
        assert_same_run(got, want, paths={str(ref): str(live)})
        # and the same points as the reader on the cut file (which warns of the cut)
        assert got.frame.equals(offline.read(live, OPTIONS).frame)
    final = follower.snapshot()
    assert_same_run(final, offline.read(live, OPTIONS))
    if fixture is FILE1:
        loss = final.frame["loss"].to_list()
        assert math.isnan(loss[8]) and loss[10] == -math.inf
        assert final.frame["grad_norm"].to_list()[9] == math.inf


def _records(steps: range) -> list[bytes]:
    return [_history_record(step, 2.0 + math.sin(step / 9.0) / 4.0) for step in steps]


@pytest.mark.slow  # 100k points written first
def test_a_poll_reads_only_what_was_added(tmp_path):
    """100k history records, then 100 more: the poll reads the bytes they added."""
    first = _frame_log(_records(range(100_000)))
    data = _frame_log(_records(range(100_000, 100_100)), before=first)
    run = tmp_path / "offline-run-20260101_000000-big1234"
    run.mkdir()
    log = run / "run-big1234.wandb"
    log.write_bytes(first)
    follower = wandb_source.follow(str(run), OPTIONS)
    assert follower.poll().records_read == 100_000
    before = follower.bytes_read
    grow(log, data, len(first), len(data))
    started = time.perf_counter()
    poll = follower.poll()
    elapsed = time.perf_counter() - started
    assert poll.records_read == 100 and follower.bytes_read - before == len(data) - len(first)
    assert follower.poll().records_read == 0
    assert follower.bytes_read - before == len(data) - len(first)
    assert elapsed < 1.0, f"{elapsed:.3f} s for a poll of 100 new records"
    assert_same_run(follower.snapshot(), offline.read(log, OPTIONS))


def test_deleted_unreadable_replaced_and_garbage(tmp_path, monkeypatch):
    data = FILE2.read_bytes()
    live, _ = _live_copy(tmp_path, FILE2, "live")
    live.write_bytes(data)
    follower = wandb_source.follow(str(live), OPTIONS)
    follower.poll()
    kept = follower.snapshot()
    refuse_reading(monkeypatch, lambda path: path == live)
    assert_said_once(follower, "permission denied")
    monkeypatch.undo()
    moved = tmp_path / "moved.wandb"
    shutil.move(live, moved)
    poll = follower.poll()
    assert len(poll.problems) == 1 and "gone" in poll.problems[0]
    assert_same_run(follower.snapshot(), kept)
    # the run starts over in a new file of the same name
    small = FILE1.read_bytes()
    live.write_bytes(small)
    poll = follower.poll()
    assert poll.reread is not None and poll.problems == []
    assert_same_run(follower.snapshot(), offline.read(live, OPTIONS))
    # garbage, then whole records again: the damage is crossed and rejected as the reader does
    tail = _frame_log(
        [_history_record(50, 1.0), _field(50, b"x" * 10)], before=small + b"\x07" * 40
    )
    grow(live, tail, len(small), len(tail))
    assert follower.poll().problems == []
    want = offline.read(live, OPTIONS)
    assert want.source.rows_rejected >= 1
    assert_same_run(follower.snapshot(), want)
