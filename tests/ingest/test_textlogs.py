"""Trainer stdout in every recognised format: sniffed, read whole, NaN kept, the cut line named.

The samples in fixtures/textlogs/ are written by make_textlog_fixtures.py from
each trainer's own format strings; all of them hold the same loss curve, NaN
from step 50 (one epoch in five for Keras), and end in a record cut mid-write.
"""

from __future__ import annotations

import math
import re

import polars as pl
import pytest

from stabilitycli import analyze, read
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from tests.conftest import FIXTURES

TEXTLOGS = FIXTURES / "textlogs"
NAN_FROM = 50

# sample -> (reader, trainer named in the notes, first NaN step)
CASES = {
    "nanogpt/train.log": ("kvlog", "nanoGPT", NAN_FROM),
    "modded_nanogpt/log.txt": ("kvlog", "modded-nanogpt", NAN_FROM),
    "torchtitan/stdout.log": ("kvlog", "torchtitan", NAN_FROM),
    "mlx_lm/train.log": ("kvlog", "MLX-LM", NAN_FROM),
    "litgpt/pretrain.log": ("kvlog", "litgpt", NAN_FROM),
    "keras/fit.log": ("kvlog", "Keras fit", 10),
    "nemo/train.log": ("kvlog", "NeMo", NAN_FROM - 1),  # global_step counts from 0
    "fairseq/simple.log": ("kvlog", "fairseq", NAN_FROM),
    "fairseq/json.log": ("dictlog", "dict lines", NAN_FROM),
    "hf_stdout/train.log": ("dictlog", "progress bar", NAN_FROM),
    "gptneox/train.log": ("megatron", "", NAN_FROM),
    "ms_swift/train.log": ("megatron", "", NAN_FROM),
    "olmo/train.log": ("blocklog", "OLMo", NAN_FROM),
    "composer/train.log": ("blocklog", "Composer", NAN_FROM),
}

# the samples whose cut last line still holds a whole field with a value, and keeps it: in the
# others the cut takes the only value (`loss nan`), or the step key (fairseq's num_updates)
WHOLE_FIELDS_BEFORE_THE_CUT = {
    "keras/fit.log",  # `- loss: nan - accuracy: 0.9248`: the loss is whole
    "litgpt/pretrain.log",
    "modded_nanogpt/log.txt",
    "nemo/train.log",
    "torchtitan/stdout.log",
    "gptneox/train.log",
    "ms_swift/train.log",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sample_is_read_whole_with_nan_kept_and_the_cut_line_named(name: str) -> None:
    reader, trainer, nan_step = CASES[name]
    path = TEXTLOGS / name
    assert detect_format(path) == reader
    run = read(path)
    src = run.source
    assert src.format == reader
    assert trainer in " ".join(src.notes)
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten
    # the job died mid-line: that record is rejected with its line, the rest is read; but a
    # record that keeps whole fields before the cut (something follows them on the line, or
    # Megatron's `|` closes them) keeps those (#39), so a missing `lm loss` still shows
    n_lines = path.read_bytes().count(b"\n") + 1
    cut = [r for r in src.rejections if r.reason.startswith("last")]
    if name in WHOLE_FIELDS_BEFORE_THE_CUT:
        assert cut == [], src.rejections
        kept = f"line {n_lines}: the last record cut off mid-line after its field"
        kept_megatron = f"line {n_lines}: iteration record cut off mid-line after its field"
        assert any(w.startswith((kept, kept_megatron)) for w in src.warnings), src.warnings
    else:
        assert [r.line for r in cut] == [n_lines], src.rejections
        assert any("cut off mid-write" in w for w in src.warnings)
    loss = run.frame.select("step", "loss")
    non_finite = loss.filter(~pl.col("loss").is_finite())
    assert non_finite["step"][0] == nan_step
    assert all(math.isnan(v) for v in non_finite["loss"])
    assert loss.filter(pl.col("step") < nan_step)["loss"].is_finite().all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_sample_gives_the_nan_verdict(name: str) -> None:
    result = analyze(TEXTLOGS / name)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [CASES[name][2]]


def test_lines_that_are_not_records_are_skipped_text_not_rejections() -> None:
    src = read(TEXTLOGS / "modded_nanogpt" / "log.txt").source
    # the printed script, the nvidia-smi table: text, counted apart from the rows
    assert src.lines_skipped == 6
    assert src.rows_rejected == 0  # the cut last record keeps its whole fields (#39)
    assert any("63 of 69 lines are records" in n for n in src.notes)


def test_units_are_read_into_the_name_and_unreadable_ones_skip_the_field() -> None:
    run = read(TEXTLOGS / "torchtitan" / "stdout.log")
    assert {"memory (GiB)", "mfu (%)", "tokens_per_s", "grad_norm"} <= set(run.frame.columns)
    first = run.frame.row(0, named=True)
    assert first["tokens_per_s"] == 7024.0  # `tps: 7,024`: thousands separator read
    neox = read(TEXTLOGS / "gptneox" / "train.log")
    assert any("'approx flops per GPU' skipped" in n for n in neox.source.notes)
    assert neox.frame.height == 60  # the cut last record keeps its whole fields (#39)
    swift = read(TEXTLOGS / "ms_swift" / "train.log")
    assert any("'elapsed time' skipped" in n for n in swift.source.notes)


def test_nanogpt_eval_line_is_not_the_training_loss() -> None:
    run = read(TEXTLOGS / "nanogpt" / "train.log")
    assert run.source.metrics["loss"] == "loss"
    assert run.source.metrics["eval_loss"] == "val_loss"
    assert "eval_train_loss" in run.frame.columns


def test_hf_dict_steps_come_from_the_progress_bar_and_the_summary_is_rejected() -> None:
    run = read(TEXTLOGS / "hf_stdout" / "train.log")
    assert run.frame["step"].to_list()[:3] == [5, 10, 15]
    assert any("tqdm progress bar" in n for n in run.source.notes)
    assert any("final summary" in r.reason for r in run.source.rejections)


def test_fairseq_epoch_summary_is_rejected_and_valid_lines_are_eval() -> None:
    run = read(TEXTLOGS / "fairseq" / "json.log")
    assert any("epoch summary" in r.reason for r in run.source.rejections)
    assert run.source.metrics["eval_loss"] == "valid_loss"
    assert run.frame.filter(pl.col("eval_loss").is_not_null())["step"].to_list() == [20, 40, 60]


def test_keras_steps_are_epochs_and_a_redrawn_bar_keeps_its_final_state() -> None:
    run = read(TEXTLOGS / "keras" / "fit.log")
    assert run.frame["step"].to_list() == list(range(1, 13))  # 12: the cut line's whole loss
    # epoch 2 was pasted with its \b redraws: the epoch's final line wins, not the 32nd batch
    assert run.frame.filter(pl.col("step") == 2)["loss"][0] < 9


def test_line_order_when_no_line_has_a_step(tmp_path) -> None:
    path = tmp_path / "out.log"
    path.write_text("starting\nloss: 2.5\nloss: 2.4\nloss: nan\n")
    run = read(path)
    assert run.frame["step"].to_list() == [0, 1, 2]
    assert any("line order" in n for n in run.source.notes)


def test_pattern_reads_anything_else(tmp_path) -> None:
    path = tmp_path / "custom.log"
    path.write_text("ep=1|it=10|L=2.50\nnoise\nep=1|it=20|L=nan\nep=1|it=30|L=x\n")
    opts = ReadOptions(pattern=r"it=(?P<step>\d+)\|L=(?P<loss>\S+)")
    run = read(path, opts)
    assert run.frame["step"].to_list() == [10, 20]
    assert math.isnan(run.frame["loss"][1])
    assert [r.line for r in run.source.rejections] == [4]
    assert run.source.lines_skipped == 1


def test_a_record_without_a_readable_number_is_rejected_by_line(tmp_path) -> None:
    path = tmp_path / "train.log"
    path.write_text("step: 1 loss: 2.5\nstep: 2 loss: ???\nstep: 3 loss: 2.4\n")
    src = read(path).source
    assert [r.line for r in src.rejections] == [2]
    assert src.rows_read == 3 and src.rows_used == 2


@pytest.mark.parametrize(
    "other",
    ["llmc/main.log", "megatron/gpt_fp16.log", "deepspeed"],
)
def test_sniff_leaves_the_other_text_formats_alone(other: str) -> None:
    path = FIXTURES / other
    if path.is_dir():
        path = sorted(p for p in path.rglob("*.log"))[0]
    assert detect_format(path) not in ("kvlog", "dictlog")


def test_inf_and_nan_are_kept_exactly(tmp_path) -> None:
    kv = tmp_path / "kv.log"
    kv.write_text("step: 1 loss: 2.5\nstep: 2 loss: inf\nstep: 3 loss: -inf\nstep: 4 loss: nan\n")
    assert read(kv).frame["loss"].to_list()[1:3] == [math.inf, -math.inf]
    hf = tmp_path / "hf.log"
    hf.write_text(
        " 1%| | 1/9 [00:01<00:09]\n{'loss': inf, 'grad_norm': nan}\n"
        " 2%| | 2/9 [00:02<00:08]\n{'loss': -inf, 'grad_norm': 1.0}\n"
    )
    frame = read(hf).frame
    assert frame["loss"].to_list() == [math.inf, -math.inf]
    assert math.isnan(frame["grad_norm"][0])


def test_launcher_tags_of_several_ranks_make_a_per_rank_run(tmp_path) -> None:
    path = tmp_path / "all_ranks.log"
    lines = [
        f"[rank{r}]:step: {s:2}  loss: {3 + 1 / s + (2 if r == 2 and s >= 30 else 0):7.4f}"
        for s in range(1, 41)
        for r in range(4)
    ]
    path.write_text("\n".join(lines) + "\n")
    run = read(path)
    assert run.source.ranks == 4 and run.has_ranks
    assert run.frame.filter((pl.col("rank") == 2) & (pl.col("step") == 30))["loss"][0] > 5
    one = tmp_path / "rank0.log"
    one.write_text("\n".join(line for line in lines if line.startswith("[rank0]")) + "\n")
    assert not read(one).has_ranks


@pytest.mark.parametrize("width", [80, 100])
def test_records_a_terminal_hard_wrapped_are_joined_back(width: int, tmp_path) -> None:
    # a copy out of a terminal: every line cut at the width, inside numbers too (`tps: 7,0`)
    lines = []
    for line in (TEXTLOGS / "torchtitan" / "stdout.log").read_text().split("\n"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        lines += [line[i : i + width] for i in range(0, len(line), width)] or [""]
    path = tmp_path / "wrapped.log"
    path.write_text("\n".join(lines))
    wrapped = read(path)
    whole = read(TEXTLOGS / "torchtitan" / "stdout.log")
    # the cut last record (`step: 60  loss: nan  grad_norm: nan` with no newline) keeps its
    # whole fields (#39), on one line (100 columns) and wrapped over two (80): the NaN loss
    assert wrapped.frame.equals(whole.frame)
    assert math.isnan(wrapped.frame.filter(pl.col("step") == 60)["loss"][0])
    assert any("hard-wrapped" in n for n in wrapped.source.notes)
    assert wrapped.source.rejections == []
    assert any("after its field `loss`" in w for w in wrapped.source.warnings)


def test_a_line_after_a_record_is_not_joined_to_it_when_nothing_was_wrapped() -> None:
    run = read(TEXTLOGS / "nanogpt" / "train.log")
    assert not any("hard-wrapped" in n for n in run.source.notes)


@pytest.mark.parametrize(
    ("data", "reader"),
    [
        (b"step,loss\n1,2.5\n2,2.4\n3,nan\n", "tabular"),
        (
            b'{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.4}\n{"step": 3, "loss": NaN}\n',
            "jsonl",
        ),
        ((TEXTLOGS / "torchtitan" / "stdout.log").read_bytes(), "kvlog"),
        ((TEXTLOGS / "hf_stdout" / "train.log").read_bytes(), "dictlog"),
    ],
)
def test_standard_input_is_sniffed_like_a_file(data: bytes, reader: str) -> None:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    result = CliRunner().invoke(app, ["analyze", "-", "-f", "json"], input=data)
    assert result.exit_code == 1, result.output  # every one has a NaN loss
    assert f'"format": "{reader}"' in result.output and '"path": "<stdin>"' in result.output
