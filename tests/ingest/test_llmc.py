"""llm.c main.log: vectorised regex parse, NaN/Inf exact, bad lines by number."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import llmc
from tests.conftest import FIXTURES

LOG = FIXTURES / "llmc" / "main.log"


def _at(run, step: int, column: str):
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def test_nan_and_inf_are_kept_exactly():
    run = llmc.read(LOG, ReadOptions())
    assert math.isnan(_at(run, 2, "loss"))
    assert _at(run, 2, "grad_norm") == math.inf
    assert _at(run, 3, "loss") == math.inf
    assert _at(run, 3, "grad_norm") == -math.inf
    assert _at(run, 5, "eval_loss") == -math.inf
    assert _at(run, 0, "loss") == pytest.approx(11.0116)


def test_keys_map_to_canonical_names():
    run = llmc.read(LOG, ReadOptions())
    assert run.source.metrics == {
        "loss": "trl",
        "lr": "lr",
        "grad_norm": "norm",
        "eval_loss": "tel",
    }
    assert _at(run, 5, "hellaswag_acc") == pytest.approx(0.2437)  # accuracy is not a loss
    assert _at(run, 0, "eval_loss") == pytest.approx(11.01)  # train and val lines of step 0 merge


def test_bad_lines_are_counted_with_line_numbers():
    run = llmc.read(LOG, ReadOptions())
    src = run.source
    assert sorted(r.line for r in src.rejections) == [6, 8]
    assert src.rows_read == src.rows_used + src.rows_rejected == 11
    assert _at(run, 5, "loss") is None  # the `norm:oops` record is dropped whole


def test_truncated_last_line(tmp_path: Path):
    path = tmp_path / "main.log"
    path.write_bytes(LOG.read_bytes() + b"s:7 trl:10.2")  # cut: could be 10.2xxx
    run = llmc.read(path, ReadOptions())
    assert 7 not in run.frame["step"].to_list()
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_empty_and_foreign_files(tmp_path: Path):
    empty = tmp_path / "main.log"
    empty.write_text("\n")
    with pytest.raises(StabInputError, match="empty"):
        llmc.read(empty, ReadOptions())
    other = tmp_path / "other.log"
    other.write_text("step 1 loss 2.0\n")
    with pytest.raises(StabInputError, match=r"llm\.c"):
        llmc.read(other, ReadOptions())


def test_detection():
    assert detect_format(LOG) == "llmc"
