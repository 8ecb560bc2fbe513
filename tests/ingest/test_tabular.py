"""CSV / Parquet / Arrow tables with a step column."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tabular import tables as tabular
from tests.conftest import FIXTURES

CSV = FIXTURES / "tabular" / "metrics.csv"
PARQUET = FIXTURES / "tabular" / "metrics.parquet"
ARROW = FIXTURES / "tabular" / "metrics.arrow"


def _col(run, column: str) -> list:
    return run.frame.sort("step")[column].to_list()


def test_csv_nan_and_inf_are_kept_exactly():
    run = tabular.read(CSV, ReadOptions())
    loss = dict(zip(_col(run, "step"), _col(run, "loss"), strict=True))
    grad = dict(zip(_col(run, "step"), _col(run, "grad_norm"), strict=True))
    assert math.isnan(loss[1]) and grad[1] == math.inf
    assert loss[2] == -math.inf and grad[2] == -math.inf
    assert loss[0] == 2.5


@pytest.mark.parametrize("path", [PARQUET, ARROW])
def test_binary_tables_keep_nan_and_inf(path: Path):
    run = tabular.read(path, ReadOptions())
    loss = _col(run, "loss")
    assert loss[0] == 2.5 and math.isnan(loss[1]) and loss[2] == math.inf and loss[3] == -math.inf
    assert math.isnan(_col(run, "grad_norm")[2])
    assert run.source.rows_read == run.source.rows_used == 5


def test_csv_bad_lines_counted_with_line_numbers():
    run = tabular.read(CSV, ReadOptions())
    src = run.source
    lines = {r.line: r.reason for r in src.rejections}
    assert set(lines) == {5, 6}
    assert "fields" in lines[5] and "bad" in lines[6]
    assert _col(run, "step") == [0, 1, 2, 5]
    assert src.rows_read == src.rows_used + src.rows_rejected == 6


def test_truncated_files(tmp_path: Path):
    cut_csv = tmp_path / "cut.csv"
    cut_csv.write_bytes(b"step,loss\n0,2.5\n1,2.4\n2,2.3")
    run = tabular.read(cut_csv, ReadOptions())
    assert _col(run, "step") == [0, 1]
    assert any("cut off" in w for w in run.source.warnings)
    cut_parquet = tmp_path / "cut.parquet"
    cut_parquet.write_bytes(PARQUET.read_bytes()[:-40])
    with pytest.raises(StabInputError, match="truncated or corrupt"):
        tabular.read(cut_parquet, ReadOptions())


def test_a_table_too_large_for_the_memory_left_is_not_called_corrupt(monkeypatch):
    import pyarrow as pa

    def no_memory(path, limits, *unread):
        raise pa.ArrowMemoryError("malloc of size 800000 failed")

    monkeypatch.setattr(tabular, "_read_parquet", no_memory)
    with pytest.raises(StabInputError, match="out of memory") as raised:
        tabular.read(PARQUET, ReadOptions())
    assert "corrupt" not in str(raised.value)


def test_empty_files(tmp_path: Path):
    for name in ("empty.csv", "empty.parquet", "empty.arrow"):
        path = tmp_path / name
        path.write_bytes(b"")
        with pytest.raises(StabInputError, match="empty"):
            tabular.read(path, ReadOptions())


def test_step_key_option_and_detection(tmp_path: Path):
    path = tmp_path / "custom.csv"
    pl.DataFrame({"it": [10, 20], "train_loss": [1.0, float("nan")]}).write_csv(path)
    run = tabular.read(path, ReadOptions(step_key="it"))
    assert _col(run, "step") == [10, 20] and math.isnan(_col(run, "loss")[1])
    with pytest.raises(StabInputError, match="step-key"):
        tabular.read(path, ReadOptions(step_key="nope"))
    assert detect_format(CSV) == "tabular"
    assert detect_format(PARQUET) == "tabular"
    assert detect_format(ARROW) == "tabular"
