"""W&B offline logs with damaged chunks, oversized records and odd steps (issue #12).

The logs are framed here exactly as wandb_offline's module doc describes (and as the
real client's fixtures show), so the damage can be placed byte by byte.
"""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from stabilitycli.ingest import read
from tests.ingest.test_hostile_json import check_exact, loss_at

# --- W&B offline ---------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _history_record(step: int, loss: float, *, step_json: bytes | None = None) -> bytes:
    items = [
        _field(1, _field(1, b"_step") + _field(16, step_json or str(step).encode())),
        _field(1, _field(1, b"loss") + _field(16, json.dumps(loss).encode())),
    ]
    return _field(2, b"".join(items))  # Record.history


def _frame_log(records: list[bytes], before: bytes = b":W&B\xe1\xbe\x00") -> bytes:
    """The LevelDB-style framing of wandb_offline's module doc, written record by record
    after `before` (the file header, or a log so far)."""
    out = bytearray(before)
    for record in records:
        rest, first = record, True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += b"\x00" * left
                continue
            room = left - 7
            piece, rest = rest[:room], rest[room:]
            kind = (1 if not rest else 2) if first else (4 if not rest else 3)
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not rest:
                break
    return bytes(out)


def _wandb_rows(n: int = 200) -> list[bytes]:
    # padded so that 200 records fill several 32 KiB blocks
    return [_history_record(s, loss_at(s)) + _field(50, b"p" * 400) for s in range(n)]


def _chunk_offsets(data: bytes) -> list[int]:
    out, pos = [], 7
    while pos < len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        out.append(pos)
        pos += 7 + struct.unpack_from("<H", data, pos + 4)[0]
    return out


@pytest.mark.parametrize("where", ["length", "type", "payload", "crc"])
def test_wandb_damaged_chunk_costs_its_record_not_its_block(tmp_path, where) -> None:
    data = bytearray(_frame_log(_wandb_rows()))
    chunk = _chunk_offsets(bytes(data))[30]
    data[chunk + {"length": 4, "type": 6, "payload": 20, "crc": 1}[where]] ^= 0xFF
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    run = read(path)
    src = run.source
    check_exact(run, {30}, n=200)
    assert src.rows_rejected == 1
    assert f"byte {chunk}" in src.rejections[0].reason


def test_wandb_damage_in_a_record_split_across_blocks(tmp_path) -> None:
    data = bytearray(_frame_log(_wandb_rows()))
    offsets = _chunk_offsets(bytes(data))
    # a FIRST chunk, its LAST in the next block; every record before it is one chunk
    first = next(o for o in offsets if data[o + 6] == 2)
    index = offsets.index(first)
    data[first + 12] ^= 0x55
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    run = read(path)
    check_exact(run, {index}, n=200)
    assert run.source.rows_rejected == 1  # the record, once: not its orphaned last part too


def test_wandb_record_over_max_record_bytes_is_skipped_unread(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_RECORD_BYTES", "20000")
    rows = _wandb_rows(60)
    rows[7] = _history_record(7, 1.0) + _field(50, b"m" * 100_000)  # spans four blocks
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert run.source.rows_rejected == 1
    assert "max_record_bytes" in run.source.rejections[0].reason


@pytest.mark.parametrize(
    ("step_json", "reason"),
    [(b"[7]", "_step is a JSON list"), (b'{"a": 7}', "a JSON object"), (b"true", "a bool")],
)
def test_wandb_step_of_the_wrong_type_rejects_its_row(tmp_path, step_json, reason) -> None:
    rows = _wandb_rows(60)
    rows[7] = _history_record(7, 1.0, step_json=step_json)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert run.source.rows_rejected == 1 and reason in run.source.rejections[0].reason


def test_wandb_binary_step_rejects_its_row(tmp_path) -> None:
    rows = _wandb_rows(60)
    loss = _field(1, _field(1, b"loss") + _field(16, b"1.0"))
    rows[7] = _field(2, loss + _field(2, _field(1, b"\x07\x00")))  # StepRecord.num as bytes
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert "binary" in run.source.rejections[0].reason


def test_wandb_deep_history_value_rejects_its_row(tmp_path) -> None:
    rows = _wandb_rows(60)
    deep = _field(1, _field(1, b"media") + _field(16, b"[" * 20_000 + b"]" * 20_000))
    rows[7] = _field(2, _field(1, _field(1, b"_step") + _field(16, b"7")) + deep)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert "max_json_depth" in run.source.rejections[0].reason


def test_wandb_garbage_between_records_is_crossed_to_the_next_valid_chunk(tmp_path) -> None:
    import random

    rows = _wandb_rows(60)
    noise = random.Random(12).randbytes(3 << 20)  # 96 blocks of garbage, not block-aligned
    data = _frame_log(rows[30:], _frame_log(rows[:30]) + noise)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(data)
    run = read(path)
    check_exact(run, set(), n=60)
    assert run.source.rows_rejected >= 1  # the garbage, counted where it begins
    assert any("damaged" in r.reason for r in run.source.rejections)


def test_wandb_step_past_int64_rejects_its_row(tmp_path) -> None:
    rows = _wandb_rows(60)
    rows[7] = _history_record(7, 1.0, step_json=b"1" + b"0" * 30)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert run.source.rows_rejected == 1


def test_wandb_history_field_of_the_wrong_wire_type_is_skipped(tmp_path) -> None:
    rows = _wandb_rows(60)
    rows[7] = bytes([2 << 3 | 0]) + bytes([7])  # Record.history as a varint: damage
    path = tmp_path / "run-x.wandb"
    path.write_bytes(_frame_log(rows))
    run = read(path)
    check_exact(run, {7}, n=60)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_wandb_length_running_past_the_end_mid_file_is_damage_not_a_cut(tmp_path) -> None:
    data = bytearray(_frame_log(_wandb_rows(60)))
    chunk = _chunk_offsets(bytes(data))[20]
    data[chunk + 5] = 0x4C  # length ~19 KiB: fits the block, runs past the end of the file
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    run = read(path)
    check_exact(run, {20}, n=60)
    assert run.source.rows_rejected == 1
    assert not any("cut off" in w for w in run.source.warnings)


def test_wandb_damaged_header_over_whole_chunks_is_read(tmp_path) -> None:
    data = bytearray(_frame_log(_wandb_rows(60)))
    data[2] ^= 0x20  # ":W&B" -> ":W\x06B"
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    run = read(path)
    check_exact(run, set(), n=60)
    assert any("header is damaged" in w for w in run.source.warnings)
