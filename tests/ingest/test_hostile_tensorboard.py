"""Damaged and hostile TensorBoard event files (issue #12): bounded memory, counted damage."""

from __future__ import annotations

import math
import struct
import tracemalloc
from pathlib import Path

import numpy as np

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tensorboard import _tfrecord
from stabilitycli.ingest.tensorboard import reader as tensorboard
from stabilitycli.ingest.tensorboard._tfrecord import masked_crc

MiB = 1 << 20
LOSS = [2.5, 2.4, 2.3, math.nan, math.inf, -math.inf, 2.0, 1.9, 1.8, 1.7]


def _frame(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return (
        length
        + struct.pack("<I", masked_crc(length))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )


def _scalars(steps: range) -> bytes:
    from stabilitycli.ingest.tensorboard import _proto as tbp

    event_cls = tbp.messages()["Event"]
    out = []
    for step in steps:
        event = event_cls(wall_time=1.7e9 + step, step=step)
        event.summary.value.add(tag="loss", simple_value=LOSS[step % len(LOSS)])
        out.append(_frame(event.SerializeToString()))
    return b"".join(out)


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc(raw))


def _check_loss(run, steps: list[int]) -> None:
    frame = run.frame
    assert frame["step"].to_list() == steps
    for step, value in zip(steps, frame["loss"].to_list(), strict=True):
        expected = np.float32(LOSS[step % len(LOSS)]).item()
        assert (math.isnan(value) and math.isnan(expected)) or value == expected
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten


def test_a_100_mb_record_is_stepped_over_unread(tmp_path: Path):
    # the record claims 100 MB and the file really holds them (sparse: no disk, no time)
    path = tmp_path / "events.out.tfevents.1700000000.host"
    huge = 100 * MiB
    with open(path, "wb") as handle:
        handle.write(_scalars(range(10)))
        handle.write(_header(huge))
        handle.seek(huge, 1)
        handle.write(b"\x00\x00\x00\x00")  # its data CRC: never looked at
        handle.write(_scalars(range(10, 20)))
    tracemalloc.start()
    try:
        run = tensorboard.read(path, ReadOptions())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB, f"peak {peak / MiB:.1f} MiB: the big record was loaded"
    _check_loss(run, list(range(20)))
    assert run.source.rows_rejected == 0
    warned = [w for w in run.source.warnings if "over max_record_bytes" in w]
    assert len(warned) == 1 and "1 record(s)" in warned[0] and "skipped unread" in warned[0]


def test_a_damaged_length_with_nothing_valid_near_stops_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(_tfrecord, "RESYNC_WINDOW", 1 << 16)
    head = _scalars(range(10))
    junk = np.random.default_rng(0).integers(0, 256, size=1 << 17, dtype=np.uint8).tobytes()
    damaged = bytearray(_scalars(range(10, 11)))
    damaged[1] ^= 0xFF  # the length of step 10's record: its CRC fails
    path = tmp_path / "events.out.tfevents.1700000000.host"
    path.write_bytes(head + bytes(damaged) + junk + _scalars(range(12, 20)))
    run = tensorboard.read(path, ReadOptions())
    _check_loss(run, list(range(10)))
    offset = len(head)
    after = path.stat().st_size - offset
    assert run.source.rows_rejected == 1
    reason = run.source.rejections[0].reason
    assert f"damaged at byte {offset}" in reason and f"{after} bytes after it not read" in reason
    assert any(f"damaged at byte {offset}" in w for w in run.source.warnings)


def test_a_damaged_length_then_an_oversize_record_reads_on(tmp_path: Path):
    # a length CRC failure just before a record over the limit: the resync never takes the
    # oversize record's payload for CRC-checking, and the records after it are read
    from stabilitycli.ingest.limits import InputLimits

    damaged = bytearray(_scalars(range(5)))
    damaged[1] ^= 0xFF
    big = _header(4096) + bytes(4096) + b"\x00\x00\x00\x00"
    path = tmp_path / "events.out.tfevents.1700000000.host"
    path.write_bytes(bytes(damaged) + big + _scalars(range(5, 15)))
    run = tensorboard.read(path, ReadOptions(limits=InputLimits(max_record_bytes=1024)))
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert run.frame["step"].to_list()[-10:] == list(range(5, 15))
    assert src.rejections[0].line == 1 and "length CRC mismatch" in src.rejections[0].reason


def test_a_resync_through_a_run_of_zero_bytes_checks_few_crcs(tmp_path, monkeypatch):
    # every offset in zeros reads as a record of length 0: a CRC per offset took ~40 s / 8 MiB
    calls = []
    real = _tfrecord.masked_crc

    def counting(data: bytes) -> int:
        calls.append(len(data))
        return real(data)

    damaged = bytearray(_scalars(range(10, 11)))
    damaged[1] ^= 0xFF
    path = tmp_path / "events.out.tfevents.1700000000.host"
    zeros = bytes(1 << 20)
    path.write_bytes(_scalars(range(10)) + bytes(damaged) + zeros + _scalars(range(12, 20)))
    monkeypatch.setattr(_tfrecord, "masked_crc", counting)
    run = tensorboard.read(path, ReadOptions())
    assert len(calls) < 5_000
    _check_loss(run, [*range(10), *range(12, 20)])
    assert "length CRC mismatch" in run.source.rejections[0].reason


def test_tags_spelled_like_the_readers_own_columns_are_read_under_another_name(tmp_path):
    from stabilitycli.ingest.tensorboard import _proto as tbp

    event_cls = tbp.messages()["Event"]
    tags = ["__step", "_row", "_segment", "_back", "_has_metric", "_n_rows", "_prev_max"]
    out = []
    for step in range(5):
        for tag in ["loss", *tags]:
            event = event_cls(wall_time=1.7e9, step=step)
            event.summary.value.add(tag=tag, simple_value=LOSS[step])
            out.append(_frame(event.SerializeToString()))
    path = tmp_path / "events.out.tfevents.1700000000.host"
    path.write_bytes(b"".join(out))
    run = tensorboard.read(path, ReadOptions())
    _check_loss(run, list(range(5)))
    for tag in tags:
        values = run.frame[f"{tag} (as logged)"].to_list()
        for step, value in enumerate(values):
            expected = np.float32(LOSS[step]).item()
            assert (math.isnan(value) and math.isnan(expected)) or value == expected
