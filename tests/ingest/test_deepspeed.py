"""DeepSpeed stdout: overflow messages as events, rank copies folded, DeepSpeed-Chat lines."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import deepspeed
from tests.conftest import FIXTURES

FUSED = FIXTURES / "deepspeed" / "fused_4ranks.log"
CHAT = FIXTURES / "deepspeed" / "chat_two_engines.log"


def _at(run, step: int, column: str):
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def test_rank_copies_are_one_event_each():
    run = deepspeed.read(FUSED, ReadOptions())
    overflow = run.frame.filter(pl.col("overflow").is_not_null())
    # `Grad overflow on iteration 0/1` (0-based) are steps 1 and 2 of `step=`
    assert overflow["step"].to_list() == [1, 2]
    assert overflow["overflow"].to_list() == [1.0, 1.0]
    assert overflow["loss_scale"].to_list() == [32768.0, 16384.0]
    assert "rank" not in run.frame.columns
    note = next(n for n in run.source.notes if "overflow" in n and "events" in n)
    assert note.startswith("2 fp16 overflow") and "16 repeated copies" in note


def test_scale_growth_placed_by_timestamp_and_counter_made_per_interval():
    run = deepspeed.read(FUSED, ReadOptions())
    assert _at(run, 15, "loss_scale") == 32768.0  # 10:00:07 between step 10 (:05) and 20 (:09)
    assert _at(run, 15, "overflow") is None
    assert _at(run, 10, "skipped_steps") == 2.0  # cumulative 2 ...
    assert _at(run, 20, "skipped_steps") == 0.0  # ... then no new skip
    assert run.source.dtype == "fp16" and "fp16_enabled" in run.source.dtype_origin


def test_nan_and_inf_are_kept_exactly():
    chat = deepspeed.read(CHAT, ReadOptions())
    assert math.isnan(_at(chat, 1, "loss"))  # act_loss, found by its name, at `step: 1`
    assert _at(chat, 1, "cri_loss") == math.inf
    assert _at(chat, 1, "unsuper_loss") == -math.inf
    assert math.isnan(_at(chat, 1, "reward_score"))
    fused = deepspeed.read(FUSED, ReadOptions())
    assert math.isnan(_at(fused, 20, "loss"))
    assert _at(fused, 20, "eval_chosen_score") == math.inf


def test_two_engines_same_rank_messages_are_two_events():
    run = deepspeed.read(CHAT, ReadOptions())
    assert _at(run, 0, "overflow") == 2.0  # actor and critic both skipped PPO step 0
    assert _at(run, 0, "loss_scale") == 65536.0  # hysteresis keeps the scale
    assert _at(run, 1, "overflow") == 1.0
    # the engines' `step=4` (counted from 1) is PPO step 3 (counted from 0); the note says so
    assert _at(run, 3, "lr") == pytest.approx(5e-7)
    assert _at(run, 3, "engine2/lr") == pytest.approx(3e-7)
    notes = run.source.notes
    assert any("2 `step=` / `global_step=` line(s) are placed at N-1" in n for n in notes)
    # PPO has no LM loss; the actor loss stands in, found by its name, and the note says so
    assert run.source.metrics["loss"] == "act_loss"
    assert run.source.metric_origin["loss"] == "name"
    assert any("'cri_loss'" in n and "--metric loss=" in n for n in run.source.notes)


def test_bad_lines_are_counted_with_line_numbers():
    run = deepspeed.read(CHAT, ReadOptions())
    src = run.source
    assert [(r.line, "oops" in r.reason) for r in src.rejections] == [(11, True)]
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert _at(run, 3, "loss") is None  # `step: 3|...|act_loss: oops`
    assert _at(run, 4, "loss") == pytest.approx(0.19)


def test_truncated_last_line(tmp_path: Path):
    data = FUSED.read_bytes()
    path = tmp_path / "cut.log"
    path.write_bytes(data[:-10])
    run = deepspeed.read(path, ReadOptions())
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected
    assert "eval_reward_acc" not in run.frame.columns


def test_empty_and_unrelated_files(tmp_path: Path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(StabInputError, match="empty"):
        deepspeed.read(empty, ReadOptions())
    other = tmp_path / "other.log"
    other.write_text("hello\nworld\n")
    with pytest.raises(StabInputError, match="no DeepSpeed"):
        deepspeed.read(other, ReadOptions())


def test_detection():
    assert detect_format(FUSED) == "deepspeed"
    assert detect_format(CHAT) == "deepspeed"
