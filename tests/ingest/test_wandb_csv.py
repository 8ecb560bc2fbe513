"""W&B chart CSV export: main columns, run selection, downsampling warning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.wandb import csv_export as wandb_csv
from tests.conftest import FIXTURES

EXPORT = FIXTURES / "wandb_csv" / "export.csv"


def test_one_run_read_with_nan_and_inf():
    run = wandb_csv.read(EXPORT, ReadOptions(run="lr-sweep-3"))
    assert run.frame["step"].to_list() == [0, 10, 20, 30]
    loss = run.frame["loss"].to_list()
    assert loss[0] == 2.5 and math.isnan(loss[1]) and loss[2] == math.inf
    assert run.source.metrics == {"loss": "train/loss"}
    assert any("downsampled" in w for w in run.source.warnings)
    assert any("__MIN/__MAX" in n for n in run.source.notes)


def test_several_runs_need_a_choice():
    with pytest.raises(StabInputError, match=r"2 runs.*lr-sweep-3.*--run"):
        wandb_csv.read(EXPORT, ReadOptions())


def test_bad_and_truncated_lines(tmp_path: Path):
    path = tmp_path / "export.csv"
    path.write_bytes(b'"Step","r - loss"\n0,2.5\n1,x\n2,Infinity\n3,2.')
    run = wandb_csv.read(path, ReadOptions())
    assert [(r.line, "x" in r.reason or "cut" in r.reason) for r in run.source.rejections] == [
        (5, True),
        (3, True),
    ]
    assert run.frame["loss"].to_list() == [2.5, math.inf]
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_empty_file(tmp_path: Path):
    path = tmp_path / "export.csv"
    path.write_text("")
    with pytest.raises(StabInputError, match="empty"):
        wandb_csv.read(path, ReadOptions())


def test_detection():
    assert detect_format(EXPORT) == "wandb_csv"
