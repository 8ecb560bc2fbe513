"""The followers of local files: each poll reads only what is new and complete, the snapshot
is the reader's run of those bytes at any cut, and a truncated, rotated, deleted or
unreadable file is one line and the watch goes on."""

from __future__ import annotations

import gzip
import random
import shutil
from pathlib import Path

import pytest

from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.mirror import whole_blocks, whole_lines
from stabilitycli.watch.session import follow_format
from tests.conftest import FIXTURES, RUNS

LOGS = {
    "jsonl": RUNS / "spike-long-tail" / "run.jsonl",
    "kvlog": FIXTURES / "textlogs" / "nanogpt" / "train.log",
    "megatron": FIXTURES / "megatron" / "gpt_fp16.log",
    "deepspeed": FIXTURES / "deepspeed" / "fused_4ranks.log",
    "llmc": FIXTURES / "llmc" / "main.log",
    "blocklog": FIXTURES / "textlogs" / "composer" / "train.log",
    "tabular": FIXTURES / "tabular" / "metrics.csv",
}


def _same_run(got, want) -> None:
    assert got.frame.equals(want.frame), "frames differ"
    for name in ("rows_read", "rows_used", "rows_rejected", "first_step", "last_step", "run"):
        assert getattr(got.source, name) == getattr(want.source, name), name


def _expected(name: str, data: bytes, where: Path):
    """The reader's run of exactly these bytes, in a file of the same names."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_bytes(data)
    return read(where, ReadOptions(format_in=name))


@pytest.mark.parametrize("name", sorted(LOGS))
def test_snapshot_is_the_reader_run_at_random_cuts(name: str, tmp_path: Path) -> None:
    data = LOGS[name].read_bytes()
    live = tmp_path / "live" / "run" / LOGS[name].name
    live.parent.mkdir(parents=True)
    live.write_bytes(b"")
    follower = follow_format(name, live, ReadOptions())
    boundary = whole_blocks if name == "blocklog" else whole_lines
    rng = random.Random(len(data))
    cuts = sorted(rng.sample(range(len(data) // 3, len(data)), 4))
    try:
        for cut in cuts:
            with open(live, "ab") as sink:
                sink.write(data[live.stat().st_size : cut])
            follower.poll()
            complete = data[: boundary(data[:cut])]
            _same_run(
                follower.snapshot(),
                _expected(name, complete, tmp_path / "want" / "run" / live.name),
            )
    finally:
        follower.close()


def test_poll_reads_only_the_new_complete_lines(tmp_path: Path) -> None:
    live = tmp_path / "run" / "metrics.jsonl"
    live.parent.mkdir()
    live.write_bytes(b'{"step": 0, "loss": 2.0}\n{"step": 1, "lo')
    follower = follow_format("jsonl", live, ReadOptions())
    try:
        assert follower.poll().records_read == 1
        assert follower.poll().records_read == 0  # the half line waits
        with open(live, "ab") as sink:
            sink.write(b'ss": 1.9}\n{"step": 2, "loss": NaN}\n')
        assert follower.poll().records_read == 2
        run = follower.snapshot()
        assert run.frame["step"].to_list() == [0, 1, 2]
        assert run.source.path == str(live)
    finally:
        follower.close()


def test_truncated_and_rotated_files_are_read_again(tmp_path: Path) -> None:
    live = tmp_path / "run" / "train.log"
    live.parent.mkdir()
    lines = [f"step {i} loss {3.0 - i * 0.01:.3f}\n".encode() for i in range(40)]
    live.write_bytes(b"".join(lines[:30]))
    follower = follow_format("kvlog", live, ReadOptions())
    try:
        follower.poll()
        live.write_bytes(b"".join(lines[:10]))  # truncated in place
        poll = follower.poll()
        assert poll.reread and "truncated" in poll.reread
        assert follower.snapshot().source.rows_read == 10
        live.rename(live.with_name("train.log.1"))  # rotated: a new file under the name
        live.write_bytes(b"".join(lines[:5]))
        poll = follower.poll()
        assert poll.reread and "rotated" in poll.reread
        assert follower.snapshot().source.rows_read == 5
    finally:
        follower.close()


def test_deleted_and_unreadable_files_are_one_line_each(tmp_path: Path, monkeypatch) -> None:
    live = tmp_path / "run" / "metrics.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"".join(b'{"step": %d, "loss": 2.0}\n' % i for i in range(20)))
    follower = follow_format("jsonl", live, ReadOptions())
    try:
        follower.poll()
        live.unlink()
        first, second = follower.poll(), follower.poll()
        assert len(first.problems) == 1 and "deleted" in first.problems[0]
        assert second.problems == []  # said once
        assert follower.snapshot().source.rows_read == 20  # what was read is kept
        live.write_bytes(b'{"step": 0, "loss": 2.0}\n')
        back = follower.poll()
        assert any("back" in p for p in back.problems) and back.reread
        real_open = open

        def denied(path, *args, **kwargs):
            if Path(path) == live:
                raise PermissionError(13, "Permission denied")
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr("builtins.open", denied)
        lost = follower.poll()
        assert len(lost.problems) == 1 and "permission denied" in lost.problems[0]
        assert follower.poll().problems == []
    finally:
        follower.close()


def test_rank_folder_grows_file_by_file(tmp_path: Path) -> None:
    src = FIXTURES / "ranks" / "seed_64"
    folder = tmp_path / "seed_64"
    folder.mkdir()
    files = sorted(src.glob("rank_*.jsonl.gz"))[:8]
    halves = {}
    for path in files:
        data = gzip.decompress(path.read_bytes())  # a rank's log as its writer appends it
        name = path.name.removesuffix(".gz")
        halves[name] = data[: whole_lines(data[: len(data) // 2])]
        (folder / name).write_bytes(data[: len(data) // 2])
    follower = follow_format("rank_dir", folder, ReadOptions())
    try:
        follower.poll()
        want_dir = tmp_path / "want" / "seed_64"
        want_dir.mkdir(parents=True)
        for name, data in halves.items():
            (want_dir / name).write_bytes(data)
        want = read(want_dir, ReadOptions(format_in="rank_dir"))
        got = follower.snapshot()
        assert got.frame.equals(want.frame)
        assert got.source.ranks == want.source.ranks
    finally:
        follower.close()
        shutil.rmtree(tmp_path / "want", ignore_errors=True)
