"""A run's columns in mapped files (`STAB_SPILL=1`, issue 40): the same frame, the same
document, bit for bit, as the columns held in memory; nothing left on disk."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from stabilitycli import read
from stabilitycli.cli import app
from stabilitycli.frame.spill import SPILL_ENV, ColumnFiles, mapped_buffer, settled
from stabilitycli.ingest.jsonl import reader as jsonl_reader
from tests.conftest import mapped_spill_columns


def _same_bits(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.schema == b.schema
    for name in a.columns:
        assert a[name].is_null().to_list() == b[name].is_null().to_list(), name
        x, y = a[name].drop_nulls().to_numpy(), b[name].drop_nulls().to_numpy()
        if x.dtype.kind == "f":
            x, y = x.view(np.int64), y.view(np.int64)
        assert np.array_equal(x, y), name


def test_columns_appended_to_files_come_back_mapped_and_the_files_go(own_tmp) -> None:
    files = ColumnFiles()
    values = np.array([math.nan, -0.0, math.inf, 1e-300])
    for _ in range(3):
        files.append("x", values)
    files.append("n", np.arange(5, dtype=np.int32))
    x, n = files.series("x", pl.Float64), files.series("n", pl.Int32)
    files.close()
    assert list(own_tmp.iterdir()) == []
    assert np.array_equal(x.to_numpy().view(np.int64), np.tile(values, 3).view(np.int64))
    assert n.to_list() == [0, 1, 2, 3, 4] and n.dtype == pl.Int32
    assert mapped_spill_columns() >= 2
    buffer = mapped_buffer(4, np.dtype(np.float64))
    buffer[:] = values
    settled(buffer)
    assert list(own_tmp.iterdir()) == []


def _parquet(path: Path, groups: int = 5, rows: int = 400) -> None:
    rng = np.random.default_rng(3)
    writer = None
    for g in range(groups):
        step = np.arange(g * rows, (g + 1) * rows, dtype=np.int64)
        loss = rng.choice([math.nan, math.inf, -0.0, 2.5, 3.25], size=rows)
        grad = pa.array(rng.random(rows), mask=(np.arange(rows) % 7 == 0) if g == 2 else None)
        table = pa.table(
            {
                "step": step,
                "epoch": step / 1000.0,
                "loss": loss,
                "grad_norm": grad,
                "tokens": rng.integers(1000, 2000, size=rows),
            }
        )
        writer = writer or pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def _jsonl(path: Path, ranks: int = 4, steps: int = 300) -> None:
    rng = np.random.default_rng(5)
    with open(path, "w") as out:
        for step in range(steps):
            for rank in (2, 0, 3, 1)[:ranks]:
                loss = float(rng.choice([math.nan, 2.5, -0.0, 3.0 + step * 1e-3]))
                out.write(json.dumps({"step": step, "rank": rank, "loss": loss}) + "\n")


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_a_spilled_read_is_the_read_in_memory(tmp_path, own_tmp, monkeypatch, kind) -> None:
    log = tmp_path / f"train.{kind}"
    _parquet(log) if kind == "parquet" else _jsonl(log)
    monkeypatch.setattr(jsonl_reader, "PIECE_BYTES", 4096)
    held = read(log)
    before = mapped_spill_columns()
    monkeypatch.setenv(SPILL_ENV, "1")
    spilled = read(log)
    assert mapped_spill_columns() > before  # the columns are the files' pages
    assert list(own_tmp.iterdir()) == []
    _same_bits(spilled.frame, held.frame)
    assert spilled.source.to_dict() == held.source.to_dict()
    assert (spilled.lines is None) == (held.lines is None)
    if held.lines is not None:
        assert spilled.lines is not None and spilled.lines.equals(held.lines)


def test_a_spilled_run_gives_the_same_document(tmp_path, own_tmp, monkeypatch) -> None:
    log = tmp_path / "train.parquet"
    _parquet(log, groups=8, rows=2_000)
    runner = CliRunner()
    held = runner.invoke(app, ["analyze", str(log), "--format", "json"])
    monkeypatch.setenv(SPILL_ENV, "1")
    spilled = runner.invoke(app, ["analyze", str(log), "--format", "json"])
    for done in (held, spilled):  # exit 1 is the verdict (the log's NaNs), not a crash
        assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert spilled.exit_code == held.exit_code
    assert json.loads(held.stdout)["verdict"]
    assert spilled.stdout == held.stdout
    assert list(own_tmp.iterdir()) == []


def test_a_damaged_table_is_read_as_without_the_spill(tmp_path, monkeypatch) -> None:
    log = tmp_path / "train.parquet"
    _parquet(log)
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2] + bytes(64) + data[len(data) // 2 + 64 :])
    runner = CliRunner()
    held = runner.invoke(app, ["analyze", str(log), "--format", "json"])
    monkeypatch.setenv(SPILL_ENV, "1")
    spilled = runner.invoke(app, ["analyze", str(log), "--format", "json"])
    assert (held.exit_code, held.stdout) == (spilled.exit_code, spilled.stdout)
    assert os.environ[SPILL_ENV] == "1"


def test_the_spill_is_chosen_where_a_limit_leaves_under_twice_the_columns(monkeypatch) -> None:
    import stabilitycli.core.memory_cap as memory_cap
    from stabilitycli.frame.spill import spill_wanted

    monkeypatch.delenv(SPILL_ENV, raising=False)
    asked: list[int] = []

    def columns() -> int:
        asked.append(1)
        return 600 << 20

    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: None)
    assert not spill_wanted(columns)
    assert asked == []  # without a limit the columns are not worked out
    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: 1 << 30)
    assert spill_wanted(columns)  # 1.2 GB wanted, 1 GiB of room
    assert not spill_wanted(400 << 20)  # 800 MB wanted
    assert not spill_wanted()  # nothing said of the columns: held as they are
    # said outright, either way, whatever the room
    monkeypatch.setenv(SPILL_ENV, "0")
    assert not spill_wanted(columns)
    monkeypatch.setattr(memory_cap, "room_beside_files", lambda: None)
    monkeypatch.setenv(SPILL_ENV, "1")
    assert spill_wanted(columns) and spill_wanted()
