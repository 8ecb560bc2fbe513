"""The parsed pieces of a JSONL log kept in files while a memory limit leaves too little room
(`ingest.jsonl.kept`): the frame the pieces held in memory make, bit for bit, and nothing
left on disk."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from stabilitycli import read
from stabilitycli.frame.spill import SPILL_ENV
from stabilitycli.ingest.jsonl import reader as jsonl_reader
from stabilitycli.ingest.jsonl.kept import KeptPieces
from tests.conftest import mapped_spill_columns


def _piece(first: int, rows: int, **extra) -> pl.DataFrame:
    step = np.arange(first, first + rows)
    columns = {"step": step, "loss": 2.0 + np.sin(step), "_row": (step + 1).astype(np.int32)}
    return pl.DataFrame(columns | extra)


def _kept(pieces: list[pl.DataFrame]) -> tuple[list[pl.DataFrame], bool]:
    kept = KeptPieces(file_bytes=10**6)
    for piece in pieces:
        kept.add(piece, 1000)
    try:
        return kept.finished()
    finally:
        kept.close()


def test_pieces_that_go_on_column_for_column_come_back_as_one_mapped_frame(
    own_tmp, monkeypatch
) -> None:
    monkeypatch.setenv(SPILL_ENV, "1")
    pieces = [_piece(0, 50), _piece(50, 70), _piece(120, 3)]
    want = pl.concat([p.clone() for p in pieces])
    before = mapped_spill_columns()
    frames, spilled = _kept(pieces)
    assert spilled and len(frames) == 1
    assert mapped_spill_columns() == before + 3  # a file a column, mapped
    assert list(own_tmp.iterdir()) == []  # and removed from the folder once mapped
    assert_frame_equal(frames[0], want, check_exact=True)


@pytest.mark.parametrize(
    "odd",
    [
        _piece(60, 5, grad_norm=np.ones(5)),  # a key first seen here
        _piece(60, 5).drop("loss"),  # one it lacks
        _piece(60, 5).with_columns(pl.Series("loss", [1.0, None, 2.0, np.nan, 3.0])),
        _piece(60, 5).with_columns(pl.col("step").cast(pl.Float64)),  # another type
    ],
    ids=["new-key", "missing-key", "a-null", "another-type"],
)
def test_a_piece_that_breaks_the_run_is_held_with_those_after_it(own_tmp, monkeypatch, odd):
    monkeypatch.setenv(SPILL_ENV, "1")
    pieces = [_piece(0, 30), _piece(30, 30), odd, _piece(65, 10)]
    want = pl.concat([p.clone() for p in pieces], how="diagonal_relaxed")
    frames, spilled = _kept(pieces)
    assert not spilled and len(frames) == 3  # the two on file, mapped, then the rest held
    assert frames[0].height == 60
    assert_frame_equal(pl.concat(frames, how="diagonal_relaxed"), want, check_exact=True)
    assert list(own_tmp.iterdir()) == []


def test_a_first_piece_with_a_null_files_nothing(own_tmp, monkeypatch) -> None:
    monkeypatch.setenv(SPILL_ENV, "1")
    first = _piece(0, 3).with_columns(pl.Series("loss", [None, 1.0, 2.0]))
    frames, spilled = _kept([first, _piece(3, 4)])
    assert not spilled and [f.height for f in frames] == [3, 4]
    assert list(own_tmp.iterdir()) == []


def test_without_a_limit_the_pieces_are_held(monkeypatch) -> None:
    import stabilitycli.core.memory_cap as memory_cap

    monkeypatch.delenv(SPILL_ENV, raising=False)
    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: None)
    frames, spilled = _kept([_piece(0, 5), _piece(5, 5)])
    assert not spilled and len(frames) == 2


def test_the_room_is_weighed_against_the_log_the_first_piece_foretells(monkeypatch) -> None:
    import stabilitycli.core.memory_cap as memory_cap

    monkeypatch.delenv(SPILL_ENV, raising=False)
    # a first piece of 1,000 bytes and 10 rows of 3 columns: a 1 MB log is about 10,000
    # rows, 240,000 bytes of columns, so a room of 400 KB is too little (under twice that)
    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: 400_000)
    assert _kept([_piece(0, 10), _piece(10, 10)])[1]
    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: 500_000)
    assert not _kept([_piece(0, 10), _piece(10, 10)])[1]


def test_a_log_read_into_files_is_the_log_read_in_memory(tmp_path, own_tmp, monkeypatch):
    """Through the reader: a per-rank log (joined in rank order from the files) and a log
    whose grad norm first appears halfway (the filing ends there), each as held in memory."""
    monkeypatch.setattr(jsonl_reader, "PIECE_BYTES", 2048)
    for ranks in (4, 1):
        log = tmp_path / f"train-{ranks}.jsonl"
        with open(log, "w") as out:
            for step in range(400):
                for rank in range(ranks):
                    row = {"step": step, "loss": 2.0 + 0.001 * step + 0.01 * rank}
                    row |= {"rank": rank} if ranks > 1 else {}
                    row |= {"grad_norm": 0.5} if ranks == 1 and step >= 200 else {}
                    out.write(json.dumps(row) + "\n")
        monkeypatch.delenv(SPILL_ENV, raising=False)
        held = read(log)
        monkeypatch.setenv(SPILL_ENV, "1")
        filed = read(log)
        assert_frame_equal(filed.frame, held.frame, check_exact=True)
        assert filed.source.to_dict() == held.source.to_dict()
        assert list(own_tmp.iterdir()) == []
