"""A large JSONL log is read a piece at a time (issue 15: the file is never held whole);
it must give the very run the whole-log read gives: the same frame, the same counts,
the same rejected lines by number, the same warnings.

The pieces are made tiny here (a few hundred bytes) so that every fixture is cut
into many, lines fall across piece boundaries, and one line can be longer than a
piece."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from stabilitycli import read
from stabilitycli.core.errors import StabInputError
from stabilitycli.frame import one_chunk_frame
from stabilitycli.ingest.jsonl import pieces as jsonl_pieces
from stabilitycli.ingest.jsonl import reader as jsonl
from stabilitycli.ingest.options import ReadOptions
from tests.conftest import FIXTURES

LOGS = sorted(p for p in FIXTURES.rglob("*.jsonl") if p.stat().st_size > 300)


def _whole_and_pieces(path, monkeypatch, piece_bytes: int):
    with monkeypatch.context() as patch:
        patch.setattr(jsonl, "PIECE_BYTES", 1 << 40)
        whole = read(path)
    with monkeypatch.context() as patch:
        patch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
        pieces = read(path)
    return whole, pieces


def _same(whole, pieces) -> None:
    assert_frame_equal(pieces.frame, whole.frame)
    a, b = whole.source.to_dict(), pieces.source.to_dict()
    # the first five rejected lines are kept; pieces meet them in line order
    a_rejected, b_rejected = a.pop("rejected"), b.pop("rejected")
    assert b == a
    if whole.source.rows_rejected <= 5:
        assert sorted(b_rejected, key=str) == sorted(a_rejected, key=str)


def test_the_fixtures_are_cut_into_pieces() -> None:
    assert len(LOGS) >= 40


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_log_read_in_pieces_is_the_log_read_whole(path, monkeypatch) -> None:
    # a line or two a piece for a small log, a hundredth of a large one (256-byte pieces cut
    # the largest fixtures into thousands: 43 s of the suite)
    piece_bytes = max(256, path.stat().st_size // 100)
    try:
        whole, pieces = _whole_and_pieces(path, monkeypatch, piece_bytes)
    except StabInputError as err:
        # a log that is an error is the same error either way
        with monkeypatch.context() as patch:
            patch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
            with pytest.raises(StabInputError) as again:
                read(path)
        assert str(again.value) == str(err)
        return
    _same(whole, pieces)


def _write(path, lines, end="\n") -> None:
    path.write_text("\n".join(lines) + end)


def test_what_a_later_piece_holds_is_kept_exactly(tmp_path, monkeypatch) -> None:
    lines = [f'{{"step": {i}, "loss": 2}}' for i in range(200)]
    lines += ['{"step": 200, "loss": 2.5, "eval_loss": 1.75}']  # a new key, a fraction
    lines += ['{"step": 201, "loss": NaN}', '{"step": 202, "loss": Infinity}']
    lines += ['{"step": 203, "loss": -Infinity, "grad_norm": 1e400}']
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    whole, pieces = _whole_and_pieces(log, monkeypatch, 512)
    _same(whole, pieces)
    tail = pieces.frame["loss"].tail(4).to_list()
    assert tail[0] == 2.5 and math.isnan(tail[1]) and tail[2] == math.inf
    assert tail[3] == -math.inf
    assert pieces.frame["eval_loss"].drop_nulls().to_list() == [1.75]
    assert pieces.frame["grad_norm"].drop_nulls().to_list() == [math.inf]


def test_bad_lines_in_later_pieces_are_named_by_their_line_in_the_file(
    tmp_path, monkeypatch
) -> None:
    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(300)]
    lines[120] = '{"step": 120, "loss": '  # broken mid-file, line 121
    lines[250] = "[1, 2, 3]"  # not an object, line 251
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    whole, pieces = _whole_and_pieces(log, monkeypatch, 400)
    _same(whole, pieces)
    assert [r.line for r in pieces.source.rejections] == [121, 251]
    assert pieces.source.rows_used == 298


def test_a_last_line_cut_off_mid_write_is_dropped_with_its_number(tmp_path, monkeypatch) -> None:
    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(300)] + ['{"step": 300, "lo']
    log = tmp_path / "run.jsonl"
    _write(log, lines, end="")
    whole, pieces = _whole_and_pieces(log, monkeypatch, 400)
    _same(whole, pieces)
    assert pieces.source.rejections[0].line == 301
    assert pieces.source.warnings[0].startswith("line 301: last line cut off")


def test_a_line_longer_than_a_piece_is_read(tmp_path, monkeypatch) -> None:
    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(100)]
    lines[50] = '{"step": 50, "loss": 2.0, "note": "' + "x" * 5000 + '"}'
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    whole, pieces = _whole_and_pieces(log, monkeypatch, 300)
    _same(whole, pieces)
    assert pieces.frame.height == 100


def test_pieces_are_joined_a_column_at_a_time_into_one_chunk_each() -> None:
    # the join empties the list it is given (the pieces' only other holder), so each
    # column's chunks can go as it is copied instead of the run being held twice
    pieces = [
        pl.DataFrame({"step": [0, 1], "loss": [2.0, float("nan")]}),
        pl.DataFrame({"step": [2], "loss": [float("inf")], "lr": [0.1]}),
        pl.DataFrame({"step": [3], "loss": [1.5], "lr": [1]}),
    ]
    frame = one_chunk_frame(pieces)
    assert pieces == []
    assert {frame[c].n_chunks() for c in frame.columns} == {1}
    assert frame["step"].to_list() == [0, 1, 2, 3]
    loss = frame["loss"].to_list()
    assert loss[0] == 2.0 and math.isnan(loss[1]) and loss[2] == math.inf and loss[3] == 1.5
    assert frame["lr"].to_list() == [None, None, 0.1, 1.0]


def test_a_limit_hit_while_the_next_piece_is_read_ahead_is_the_same_input_error(
    tmp_path, monkeypatch
) -> None:
    """The next piece is read on a second thread; what goes wrong there reaches the caller
    as the one-line input error, not as a traceback from the thread."""
    from stabilitycli.ingest import limits as limits_module

    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(400)]
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    size = log.stat().st_size
    # past the size check at open (the file as it was), hit while the pieces are read, as
    # when the job still writes the log
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 500)
    real = limits_module.limits_in_force()
    monkeypatch.setattr(
        "stabilitycli.ingest.jsonl.pieces.bounded.refuse_oversize", lambda *args: None
    )
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", str(size // 2))
    assert real.max_input_bytes > size
    with pytest.raises(StabInputError, match="grew past the limit while read"):
        read(log)


def _pieces_joined(monkeypatch) -> list[pl.DataFrame]:
    """Record the pieces as they reach the join (clones: the join empties each piece as it
    copies it)."""
    seen: list[pl.DataFrame] = []
    join = jsonl_pieces._joined

    def spy(pieces, options, spilled=False):
        seen.extend(p.clone() for p in pieces)
        return join(pieces, options, spilled)

    monkeypatch.setattr(jsonl_pieces, "_joined", spy)
    return seen


def test_the_pieces_carry_no_clock_column_and_narrow_line_numbers(tmp_path, monkeypatch) -> None:
    # epoch and the timestamps are never a metric: finalize skips them, so the pieces
    # drop them before the join instead of holding a column of the whole log each
    lines = [
        f'{{"step": {i}, "epoch": {i / 100}, "_timestamp": {1.7e9 + i}, "loss": 2.0}}'
        for i in range(300)
    ]
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    seen = _pieces_joined(monkeypatch)
    whole, pieces = _whole_and_pieces(log, monkeypatch, 400)
    _same(whole, pieces)
    assert len(seen) > 5
    assert all(set(p.columns) == {"step", "loss", "_row"} for p in seen)
    assert {p.schema["_row"] for p in seen} == {pl.Int32}
    assert pieces.frame.columns == ["step", "loss"]


def test_a_clock_key_named_as_the_step_is_kept(tmp_path, monkeypatch) -> None:
    lines = [f'{{"epoch": {i}, "loss": {2.0 + i % 3}}}' for i in range(300)]
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    options = ReadOptions(step_key="epoch")
    with monkeypatch.context() as patch:
        patch.setattr(jsonl, "PIECE_BYTES", 1 << 40)
        whole = read(log, options)
    seen = _pieces_joined(monkeypatch)
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 400)
    pieces = read(log, options)
    _same(whole, pieces)
    assert len(seen) > 5 and all("epoch" in p.columns for p in seen)
    assert pieces.frame["step"].to_list() == list(range(300))


def _hf_log_with_text(path, rows: int = 3_000) -> None:
    """A Trainer-style log written by `json.dumps`, with what the pieces drop or cast early:
    a run name and a phase (text), a config object on each line, clock keys, a metric that
    is whole numbers in early pieces and fractional later, NaN and Infinity tokens, an eval
    key that first appears in a later piece, a malformed line and a cut-off last line."""
    rng = np.random.default_rng(40)
    lines = []
    for step in range(rows):
        record = {
            "step": step,
            "epoch": step / rows,
            "run": "llama-7b-sft",
            "phase": "warmup" if step < 200 else "train",
            "config": {"lr": 3e-4, "batch": 512},
            "loss": 2.0 + 8.0 * (1 + step / 400) ** -0.75 + 0.02 * float(rng.standard_normal()),
            "grad_norm": 0.4 + 0.01 * float(rng.standard_normal()),
            "learning_rate": 3e-4 * min(1.0, (step + 1) / 100),
            "tokens": 4096 if step < rows // 2 else 4096.5,
        }
        if step == 1_700:
            record["loss"] = 9.5  # a spike
        if step in (2_100, 2_101):
            record["grad_norm"] = math.inf if step == 2_100 else math.nan
        if step > 2_000 and step % 100 == 0:
            record["eval_loss"] = 2.5 + 0.01 * float(rng.standard_normal())
        lines.append(json.dumps(record))
        if step == 1_234:
            lines.append('{"step": 1234.5, "loss": ')  # the job wrote half a line
    _write(path, lines, end='\n{"step": 99999, "lo')


def test_a_log_read_in_pieces_gives_the_document_of_the_log_read_whole(
    cli, tmp_path, monkeypatch
) -> None:
    log = tmp_path / "trainer.jsonl"
    _hf_log_with_text(log)
    size = log.stat().st_size
    documents = []
    for piece_bytes in (1 << 40, 4_096, 65_536):
        monkeypatch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
        result = cli("analyze", log, "--format", "json")
        assert result.exception is None or isinstance(result.exception, SystemExit)
        documents.append(result.stdout)
        assert piece_bytes > size or size // piece_bytes >= 10  # many pieces, or one read
    assert documents[1] == documents[0]
    assert documents[2] == documents[0]
    document = json.loads(documents[0])
    assert document["source"]["rows_rejected"] == 2  # the half line and the cut-off one
    assert {"loss", "grad_norm", "lr", "eval_loss"} <= set(document["source"]["metrics"])
    assert "run" not in document["source"]["metrics"]
