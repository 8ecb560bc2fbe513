"""Lightning CSVLogger: sparse rows, versions read as one run, hparams precision."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tabular import lightning
from tests.conftest import FIXTURES

LOGS = FIXTURES / "lightning" / "lightning_logs"
V0 = LOGS / "version_0" / "metrics.csv"


def _at(run, step: int, column: str):
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def test_nan_and_inf_are_kept_exactly():
    run = lightning.read(V0, ReadOptions())
    assert math.isnan(_at(run, 1, "loss"))
    assert _at(run, 3, "loss") == math.inf
    assert _at(run, 4, "loss") == -math.inf
    assert _at(run, 0, "loss") == pytest.approx(2.1334786415100098)


def test_sparse_rows_merge_and_keys_map():
    run = lightning.read(V0, ReadOptions())
    assert _at(run, 2, "eval_loss") == pytest.approx(1.4648983478546143)
    assert _at(run, 2, "train/loss_epoch") == pytest.approx(1.4756006002426147)
    assert run.source.metrics["loss"] == "train/loss_step"
    assert run.source.metrics["lr"] == "lr-AdamW"
    assert run.source.dtype == "bf16" and "hparams.yaml" in run.source.dtype_origin


def test_versions_are_one_run_and_the_resume_wins():
    run = lightning.read(LOGS, ReadOptions())
    src = run.source
    assert [(r.resumed_from_step, r.last_step_before) for r in src.restarts] == [(4, 5)]
    assert _at(run, 4, "loss") == pytest.approx(1.2)  # version_1 replaced version_0's -inf
    assert _at(run, 7, "loss") == pytest.approx(1.0)
    assert 6 not in run.frame["step"].to_list()  # its only cell was `oops`
    assert run.abandoned["loss"].to_list()[-1] == pytest.approx(1.25)
    assert any("2 versions" in n for n in src.notes)


def test_bad_cells_counted_with_line_numbers():
    run = lightning.read(LOGS, ReadOptions())
    src = run.source
    assert [(r.line, "oops" in r.reason and "version_1" in r.reason) for r in src.rejections] == [
        (4, True)
    ]
    assert src.rows_rejected == 1 and src.rows_rewritten == 2  # version_0's steps 4-5
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten


def test_truncated_file(tmp_path: Path):
    folder = tmp_path / "version_0"
    folder.mkdir()
    (folder / "metrics.csv").write_bytes(V0.read_bytes()[:-3])  # `1.25\n` cut to `1.`
    run = lightning.read(folder, ReadOptions())
    assert 5 not in run.frame["step"].to_list()
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_empty_file(tmp_path: Path):
    path = tmp_path / "metrics.csv"
    path.write_text("")
    with pytest.raises(StabInputError, match="empty"):
        lightning.read(path, ReadOptions())
    path.write_text("epoch,step,train_loss_step\n")
    with pytest.raises(StabInputError, match="no rows"):
        lightning.read(path, ReadOptions())


def test_detection():
    assert detect_format(LOGS) == "lightning"
    assert detect_format(LOGS.parent) == "lightning"
    assert detect_format(V0) == "lightning"
