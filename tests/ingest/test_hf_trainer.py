"""Hugging Face trainer_state.json: train/eval/summary entries, bare NaN/Infinity."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import hf_trainer
from tests.conftest import FIXTURES

STATE = FIXTURES / "hf_trainer" / "trainer_state.json"
OUTPUT = FIXTURES / "hf_trainer" / "output"


def _at(run, step: int, column: str):
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def test_nan_and_inf_are_kept_exactly():
    run = hf_trainer.read(STATE, ReadOptions())
    assert math.isnan(_at(run, 2, "grad_norm"))
    assert _at(run, 3, "grad_norm") == math.inf
    assert _at(run, 3, "loss") == -math.inf
    assert math.isnan(_at(run, 4, "loss"))
    assert _at(run, 1, "loss") == pytest.approx(1.314)


def test_summary_and_stepless_entries_are_rejected_not_losses():
    run = hf_trainer.read(STATE, ReadOptions())
    src = run.source
    reasons = {r.line: r.reason for r in src.rejections}
    assert set(reasons) == {6, 8}
    assert "summary" in reasons[8] and "without a step" in reasons[6]
    assert _at(run, 6, "loss") == pytest.approx(1.05)  # not the summary's train_loss 1.67
    assert "train_loss" not in run.frame.columns
    assert src.rows_read == src.rows_used + src.rows_rejected == 8


def test_eval_entries_and_notes():
    run = hf_trainer.read(STATE, ReadOptions())
    assert _at(run, 3, "eval_loss") == pytest.approx(1.35)
    assert run.source.metrics["lr"] == "learning_rate"
    assert run.source.metrics["tokens"] == "num_tokens"
    note = next(n for n in run.source.notes if "logging_steps" in n)
    assert "logging_steps=1" in note and "logging_nan_inf_filter" in note


def test_output_dir_reads_the_latest_checkpoint():
    run = hf_trainer.read(OUTPUT, ReadOptions())
    assert run.source.path.endswith("checkpoint-6/trainer_state.json")
    assert run.source.last_step == 6
    assert any("checkpoint-6" in n for n in run.source.notes)


def test_truncated_file_keeps_whole_entries(tmp_path: Path):
    text = STATE.read_text()
    path = tmp_path / "trainer_state.json"
    path.write_text(text[: text.index('"loss": NaN') + 5])  # cut inside entry 5
    run = hf_trainer.read(path, ReadOptions())
    assert run.frame["step"].to_list() == [1, 2, 3]
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected


def test_empty_and_invalid_files(tmp_path: Path):
    empty = tmp_path / "trainer_state.json"
    empty.write_text("")
    with pytest.raises(StabInputError, match="empty"):
        hf_trainer.read(empty, ReadOptions())
    broken = tmp_path / "broken.json"
    broken.write_text('{"global_step": 3,\n "oops"')
    with pytest.raises(StabInputError, match="not valid JSON"):
        hf_trainer.read(broken, ReadOptions())


def test_detection():
    assert detect_format(STATE) == "hf_trainer"
    assert detect_format(OUTPUT) == "hf_trainer"
