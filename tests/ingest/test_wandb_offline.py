"""W&B offline `.wandb` files written by the real wandb client (fixtures/wandb/README.md)."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.wandb import offline as wandb_offline
from tests.conftest import FIXTURES

WANDB_DIR = FIXTURES / "wandb" / "wandb"
RUN1 = WANDB_DIR / "offline-run-20261130_091434-stabfix1"
FILE1 = RUN1 / "run-stabfix1.wandb"
FILE2 = WANDB_DIR / "offline-run-20261130_092024-stabfix2" / "run-stabfix2.wandb"


def _at(run, step: int, column: str):
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def _chunks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, length, type) of every chunk: the framing as the module doc describes it."""
    out, pos = [], 7
    while pos < len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        out.append((pos, length, kind))
        pos += 7 + length
    return out


def test_nan_inf_and_spike_are_kept_exactly():
    run = wandb_offline.read(FILE1, ReadOptions())
    assert _at(run, 5, "loss") == 9.5
    assert math.isnan(_at(run, 8, "loss"))
    assert _at(run, 9, "grad_norm") == math.inf
    assert _at(run, 10, "loss") == -math.inf
    assert _at(run, 3, "eval_loss") == pytest.approx(1.95)
    assert run.frame.height == 12
    assert run.source.dtype == "fp16" and "precision" in run.source.dtype_origin
    assert run.source.run == "stabfix1"


def test_records_split_across_blocks():
    data = FILE2.read_bytes()
    kinds = {k for _, _, k in _chunks(data)}
    assert {2, 4} <= kinds  # a FIRST/LAST pair crosses the 32 KiB boundary
    run = wandb_offline.read(FILE2, ReadOptions())
    assert run.frame["step"].to_list() == list(range(120))
    assert _at(run, 80, "loss") == 7.5
    assert run.source.rows_rejected == 0 and run.source.dtype == "bf16"


def test_bad_crc_chunk_is_rejected_and_reading_goes_on(tmp_path: Path):
    data = bytearray(FILE1.read_bytes())
    chunks = _chunks(bytes(data))
    offset, length, _ = chunks[len(chunks) // 2]
    data[offset + 7 + length // 2] ^= 0xFF  # damage one payload byte
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    run = wandb_offline.read(path, ReadOptions())
    assert any(f"byte {offset}" in r.reason and "CRC" in r.reason for r in run.source.rejections)
    assert run.frame.height >= 10  # the other records are still read
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_truncated_file_keeps_whole_records(tmp_path: Path):
    data = FILE2.read_bytes()
    path = tmp_path / "run-cut.wandb"
    path.write_bytes(data[:40000])  # inside the second block
    run = wandb_offline.read(path, ReadOptions())
    assert 0 < run.frame.height < 120
    assert run.frame["step"].to_list() == list(range(run.frame.height))
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_crc_is_over_type_byte_and_payload():
    data = FILE1.read_bytes()
    offset, length, kind = _chunks(data)[0]
    crc = struct.unpack_from("<I", data, offset)[0]
    assert zlib.crc32(data[offset + 7 : offset + 7 + length], zlib.crc32(bytes([kind]))) == crc


def test_empty_and_foreign_files(tmp_path: Path):
    empty = tmp_path / "run-a.wandb"
    empty.write_bytes(b"")
    with pytest.raises(StabInputError, match="empty"):
        wandb_offline.read(empty, ReadOptions())
    foreign = tmp_path / "run-b.wandb"
    foreign.write_bytes(b"not a wandb file at all")
    with pytest.raises(StabInputError, match="header"):
        wandb_offline.read(foreign, ReadOptions())
    header_only = tmp_path / "run-c.wandb"
    header_only.write_bytes(FILE1.read_bytes()[:7])
    with pytest.raises(StabInputError, match="no history"):
        wandb_offline.read(header_only, ReadOptions())


def test_folders_and_run_selection():
    assert wandb_offline.read(RUN1, ReadOptions()).source.run == "stabfix1"
    with pytest.raises(StabInputError, match=r"2 W&B runs.*--run"):
        wandb_offline.read(WANDB_DIR, ReadOptions())
    assert wandb_offline.read(WANDB_DIR, ReadOptions(run="stabfix2")).frame.height == 120
    assert detect_format(WANDB_DIR) == "wandb_offline"
    assert detect_format(FILE1) == "wandb_offline"
