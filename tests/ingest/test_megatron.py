"""Megatron stdout: real-log quirks on a synthetic log whose every line is documented."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format, read
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import megatron
from tests.conftest import FIXTURES

LOG = FIXTURES / "megatron" / "gpt_fp16.log"


def _at(run, step: int, column: str) -> float | None:
    values = run.frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def test_nan_and_inf_are_kept_exactly():
    run = megatron.read(LOG, ReadOptions())
    assert _at(run, 3, "grad_norm") == math.inf
    assert _at(run, 4, "loss") == math.inf
    assert math.isnan(_at(run, 4, "grad_norm"))
    assert _at(run, 2, "z loss") == -math.inf
    assert math.isnan(_at(run, 9, "eval_loss"))
    assert _at(run, 1, "loss") == 11.0  # and finite values stay finite


def test_missing_lm_loss_is_nan_with_a_note():
    run = megatron.read(LOG, ReadOptions())
    assert math.isnan(_at(run, 5, "loss"))
    assert any(
        n.startswith("iteration 5: no `lm loss` field") and "NaN" in n for n in run.source.notes
    )
    # the iterations that have the field are not touched
    assert not any(n.startswith("iteration 7") for n in run.source.notes)


def test_all_skipped_interval_leaves_the_loss_empty(tmp_path: Path):
    text = (
        "  log_interval .................................... 10\n"
        " iteration       10/    1000 | consumed samples:           40 | loss scale: 8388608.0 |"
        " number of skipped iterations:  10 | number of nan iterations:   0 |\n"
        " iteration       20/    1000 | consumed samples:           80 | lm loss: 1.210588E+01 |"
        " loss scale: 32768.0 | number of skipped iterations:   8 |"
        " number of nan iterations:   0 |\n"
    )
    path = tmp_path / "run.out"
    path.write_text(text)
    run = megatron.read(path, ReadOptions())
    assert _at(run, 10, "loss") is None  # no mean exists, which is not NaN
    assert _at(run, 20, "loss") == pytest.approx(12.10588)
    assert any("iteration 10" in n and "skipped" in n for n in run.source.notes)


def test_prefixes_wrapping_fields_and_units():
    run = megatron.read(LOG, ReadOptions())
    # iteration 7 is hard-wrapped over three lines and read whole
    assert _at(run, 7, "loss") == pytest.approx(9.6)
    assert _at(run, 7, "nan_steps") == 0.0
    assert _at(run, 7, "lr") == pytest.approx(7e-5)
    assert run.source.metrics["skipped_steps"] == "number of skipped iterations"
    assert run.source.metrics["samples"] == "consumed samples"
    assert run.source.metrics["step_time_ms"] == "elapsed time per iteration (ms)"
    # tokens from consumed samples x seq_length of the argument dump
    assert _at(run, 2, "tokens") == 16 * 2048
    assert run.source.dtype == "fp16" and "argument dump" in run.source.dtype_origin
    assert any("interval" in n and "lm loss" in n for n in run.source.notes)


def test_deepspeed_overflow_line_becomes_an_event_at_the_next_iteration():
    run = megatron.read(LOG, ReadOptions())
    overflow = run.frame.filter(pl.col("overflow").is_not_null())
    assert overflow["step"].to_list() == [4]
    assert _at(run, 4, "loss_scale") == 32768.0


def test_bad_records_are_counted_with_line_numbers():
    run = megatron.read(LOG, ReadOptions())
    src = run.source
    lines = {r.line: r.reason for r in src.rejections}
    assert set(lines) == {21}
    assert "abc" in lines[21]
    assert src.rows_rejected == 1
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert 8 not in run.frame["step"].to_list()
    # iteration 6 stops inside its `lm loss` value (no closing `|`): the fields before it are
    # whole and kept (#39); its loss is unknown, not NaN, since the cut comes before it
    assert _at(run, 6, "lr") == pytest.approx(6e-5)
    assert _at(run, 6, "loss") is None
    assert any("line 17: iteration record cut off mid-line" in w for w in src.warnings)
    assert any("iteration 6:" in n and "unknown (left empty, not NaN)" in n for n in src.notes)
    # memory and timer lines are not rows at all
    assert any("memory (MB)" in n for n in src.notes)


def test_truncated_last_record(tmp_path: Path):
    data = LOG.read_bytes()
    path = tmp_path / "cut.log"
    path.write_bytes(data[: data.rfind(b"lm loss: 9.3")])  # the job died mid-line
    run = megatron.read(path, ReadOptions())
    assert _at(run, 10, "loss") is None and _at(run, 10, "lr") == pytest.approx(1e-4)
    assert any("cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected
    assert _at(run, 9, "loss") == pytest.approx(9.4)


def test_empty_and_recordless_files_are_clear_errors(tmp_path: Path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(StabInputError, match="empty"):
        megatron.read(empty, ReadOptions())
    chatter = tmp_path / "chatter.log"
    chatter.write_text(
        "> building GPT2BPETokenizer tokenizer ...\n> initializing torch distributed ...\n"
    )
    with pytest.raises(StabInputError, match="iteration"):
        megatron.read(chatter, ReadOptions())


def test_detected_by_content_and_overridable(tmp_path: Path):
    assert detect_format(LOG) == "megatron"
    # a banner longer than the 8 KiB head does not hide the iteration lines
    long = tmp_path / "slurm-1234.out"
    long.write_text("x" * 20000 + "\n" + LOG.read_text())
    assert detect_format(long) == "megatron"
    assert read(LOG, ReadOptions(format_in="megatron")).source.format == "megatron"


@pytest.mark.parametrize("garbage", ["1" * 400, "2048²"])
def test_a_damaged_seq_length_derives_no_tokens_and_says_so(tmp_path: Path, garbage: str):
    """A fuzzed argument dump with a 400-digit seq_length made `consumed samples x seq_length`
    an OverflowError that rejected the whole log; a superscript digit passes str.isdigit()
    and fails int(). The log is read, without tokens, with a note."""
    text = LOG.read_text().replace(" 2048\n", f" {garbage}\n", 1)
    assert garbage in text
    path = tmp_path / "gpt.log"
    path.write_text(text)
    run = megatron.read(path, ReadOptions())
    assert _at(run, 7, "loss") == pytest.approx(9.6)
    assert "tokens" not in run.frame.columns or run.frame["tokens"].is_null().all()
    assert any("not a sequence length" in n for n in run.source.notes)
