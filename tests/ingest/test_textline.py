"""What surrounds a record on a pasted line is taken away; vectorised reads as line by line."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from stabilitycli import read
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.text import _kvfields as kf
from stabilitycli.ingest.text import _kvscan as ks
from stabilitycli.ingest.text import _textline as tx
from tests.conftest import FIXTURES


@pytest.mark.parametrize(
    "line",
    [
        "iter 5: loss 2.5000",
        "> iter 5: loss 2.5000",
        ">> 2023-03-22 09:30:39 iter 5: loss 2.5000",
        "[rank3]:iter 5: loss 2.5000",
        "[default7]: iter 5: loss 2.5000",
        "0: iter 5: loss 2.5000",
        "[1,0]<stdout>:iter 5: loss 2.5000",
        "[2023-04-18 01:46:52,554] iter 5: loss 2.5000",
        "2024-05-01T10:00:00.123Z iter 5: loss 2.5000",
        "\x1b[31miter 5: \x1b[32mloss 2.5000\x1b[39m",
    ],
)
def test_wrappers_are_taken_away(line: str) -> None:
    (text,) = tx.logical_lines(line)
    assert text == "iter 5: loss 2.5000"


def test_a_redrawn_bar_is_several_lines_and_blank_redraws_are_dropped() -> None:
    line = " 10%|#   | 1/10 [00:01<00:09]\r 20%|##  | 2/10 [00:02<00:08]\r          \r"
    assert len(tx.logical_lines(line)) == 2
    assert tx.logical_lines("a\b\b\bb") == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "metrics", "skipped"),
    [
        ("iter 3010: loss nan, time 330.12ms, mfu 31.2%", {"loss", "time (ms)", "mfu (%)"}, []),
        ("step:3/9 train_loss:inf train_time:5ms", {"train_loss", "train_time (ms)"}, []),
        (
            "| approx flops per GPU: 5.7TFLOPS | lm_loss: 2.2E+00 |",
            {"lm_loss"},
            ["approx flops per GPU"],
        ),
        ("elapsed time: 1d 6h 54m 11s | remaining time: 0:01:00", set(), ["elapsed time"]),
        ("tps: 7,023  memory: 61.32GiB(64.56%)", {"tps", "memory (GiB)"}, []),
    ],
)
def test_fields_numbers_units_and_skipped_values(text, metrics, skipped) -> None:
    found = kf.fields(text)
    assert set(found.metrics) == metrics
    assert found.skipped == skipped


@pytest.mark.parametrize(
    ("text", "step", "metrics"),
    [
        ("[2024-01-01 10:00:00] INFO train.py:123 - step 100 loss=2.3", 100, {"loss": 2.3}),
        ("Step 100/1000 | loss: 2.34 | lr: 1e-4", 100, {"loss": 2.34, "lr": 1e-4}),
        ("Epoch 1/10, Step 100, Loss: 2.3", 100, {"Loss": 2.3}),
        ("INFO:root:iter 100 loss 2.3", 100, {"loss": 2.3}),
        (
            "Epoch 0: 12%| | 120/1000 [00:10, reduced_train_loss=2.35, global_step=119.0]",
            119,
            {"reduced_train_loss": 2.35},
        ),
    ],
)
def test_hand_rolled_prints_give_their_step_and_fields(text, step, metrics) -> None:
    found = kf.fields(text)
    assert found.step() == step
    assert found.metrics == metrics


@pytest.mark.parametrize(
    "name",
    [
        "nanogpt/train.log",
        "modded_nanogpt/log.txt",
        "torchtitan/stdout.log",
        "mlx_lm/train.log",
        "litgpt/pretrain.log",
        "keras/fit.log",
        "nemo/train.log",
        "fairseq/simple.log",
    ],
)
def test_vectorised_scan_reads_as_line_by_line(name: str) -> None:
    lines = (FIXTURES / "textlogs" / name).read_text().split("\n")
    fast = ks.scan(lines)
    slow = ks.scan(lines, vectorised=False)
    cols = sorted(fast.frame.columns)
    # numbers on a line with no step, epoch or loss word are text either way; records agree
    records = [f.frame.filter(pl.col(ks.KIND) == "record").select(cols) for f in (fast, slow)]
    assert_frame_equal(*records, check_dtypes=False)
    assert fast.rejected == slow.rejected
    assert fast.skipped_fields == slow.skipped_fields


def test_keys_that_differ_by_a_digit_are_other_fields(tmp_path) -> None:
    path = tmp_path / "train.log"
    path.write_text(
        "step 1 layer_1 2.5 loss 3.0\nstep 1 layer_2 2.7 loss 3.0\nstep 2 layer_1 2.6 loss 2.9\n"
    )
    frame = read(path).frame
    assert frame.columns == ["step", "layer_1", "loss", "layer_2"]
    assert frame["layer_2"].to_list() == [2.7, None]


@pytest.mark.parametrize("name", ["hf_stdout/train.log", "fairseq/json.log"])
def test_dict_lines_read_by_shape_equal_one_by_one(name: str, monkeypatch) -> None:
    from stabilitycli.ingest.text import _dictline as dl

    path = FIXTURES / "textlogs" / name
    fast = read(path)
    monkeypatch.setattr(
        dl, "vectorised", lambda f: (None, f.select("_line", "text", "_bar").rows(), [])
    )
    slow = read(path)
    assert_frame_equal(fast.frame, slow.frame)
    assert fast.source.rejections == slow.source.rejections
    assert fast.source.lines_skipped == slow.source.lines_skipped


@pytest.mark.parametrize("missing", ["n/a", "N/A", "None", "null"])
def test_a_missing_value_is_not_swallowed_into_the_next_key(missing: str, tmp_path) -> None:
    """`loss n/a lr 0.1` has no loss: it must not read as a key "loss n/a lr" = 0.1, which
    the metric names would then take for the loss (the LR analysed as the loss)."""
    found = kf.fields(f"step 1 loss {missing} lr 0.1")
    assert found.metrics == {"lr": 0.1}
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} loss {missing} lr 0.1\n" for i in range(1, 40)))
    with pytest.raises(StabInputError, match="no loss series found"):
        read(log).require_loss()
