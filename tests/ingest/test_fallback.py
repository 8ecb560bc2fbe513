"""Sniffing falls back (issue 39, item 3): when the text family that claimed a log reads no
row or no loss, the other text families read it; the first that finds the loss wins, and
a family that reads rows but no loss never wins over one that finds it. When none reads
anything, the error names every family tried and the closest one.

The mixed log is a faithful copy of two print statements that meet in one stdout: a
nanoGPT-style loop's `print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms,
mfu {running_mfu * 100:.2f}%")` (karpathy/nanoGPT `train.py`) with its model wrapped in a
DeepSpeed engine, whose `log_dist(f"step={self.global_steps}, skipped={self.skipped_steps},
lr={lr}, mom={mom}", ranks=[0])` (deepspeed/runtime/engine.py) prints every
`steps_per_print` through DeepSpeed's logger (`[%(asctime)s] [%(levelname)s]
[%(filename)s:%(lineno)d:%(funcName)s] %(message)s`, as in ../shared/pasted-logs'
GPT-NeoX excerpt). The DeepSpeed lines make the deepspeed reader claim the log, and it
finds no loss in them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze, read
from stabilitycli.cli import app
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import detect_format
from stabilitycli.ingest.options import ReadOptions
from tests.conftest import REAL_LOGS

NAN_AT = 180


def _nanogpt_under_deepspeed(steps: int = 300, print_every: int = 10) -> str:
    out = []
    for it in range(0, steps, print_every):
        loss = float("nan") if it >= NAN_AT else 10.5 - 3.0 * it / steps
        out.append(f"iter {it}: loss {loss:.4f}, time {101.35 + it % 7:.2f}ms, mfu 31.20%")
        if it and it % 50 == 0:
            out.append(
                f"[2024-03-02 11:{it // 60:02d}:{it % 60:02d},117] [INFO] "
                f"[logging.py:96:log_dist] [Rank 0] step={it}, skipped=0, "
                "lr=[0.0006], mom=[(0.9, 0.95)]"
            )
    return "\n".join(out) + "\n"


def _json_of(args: list[str], data: bytes | None = None) -> dict:
    result = CliRunner().invoke(app, [*args, "-f", "json"], input=data)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.output)


def test_the_family_that_finds_the_loss_wins_over_the_claimer(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(_nanogpt_under_deepspeed())
    assert detect_format(path) == "deepspeed"  # its `step=N, skipped=K` lines claim it
    run = read(path)
    assert run.source.format == "kvlog"
    note = run.source.notes[0]
    assert note.startswith("read as kvlog: deepspeed claimed the log first")
    assert "no loss" in note and "kvlog found the loss" in note
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [NAN_AT]


def test_the_same_on_stdin(tmp_path: Path) -> None:
    out = _json_of(["analyze", "-"], _nanogpt_under_deepspeed().encode())
    assert out["source"]["format"] == "kvlog" and out["verdict"]["code"] == "nan"
    assert [f["step"] for f in out["findings"] if f["code"] == "nan"] == [NAN_AT]


def test_a_claimer_that_finds_the_loss_keeps_the_log(tmp_path: Path) -> None:
    # kvlog reads Megatron's lines too (and finds `lm loss`), but megatron claimed the log
    # and found its loss: no other family is asked
    log = REAL_LOGS / "bigscience-perf-runs" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
    if not log.is_file():
        pytest.skip("no shared real logs beside the checkout")
    run = read(log)
    assert run.source.format == "megatron" and run.source.tried == []
    assert not any(n.startswith("read as ") for n in run.source.notes)


def test_no_family_finds_a_loss_the_claimer_keeps_its_rows_and_the_error_names_the_others() -> None:
    # DeepSpeed-Chat's SFT log prints no training loss at all (only `ppl:` evaluations)
    log = (
        REAL_LOGS
        / "deepspeed-chat-opt"
        / "step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log"
    )
    if not log.is_file():
        pytest.skip("no shared real logs beside the checkout")
    run = read(log)
    assert run.source.format == "deepspeed"  # kvlog read more lines, but no loss either
    assert "kvlog (751 row(s), no loss)" in run.source.tried
    result = CliRunner().invoke(app, ["analyze", str(log)])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2
    assert "no loss series found" in result.output
    assert "the other text formats tried found none either: llmc (none)" in result.output


def test_nothing_read_names_every_family_tried_and_the_closest(tmp_path: Path) -> None:
    # one Megatron record damaged in its only line, and chatter: megatron rejected a record
    # (so it is the closest); every other family found nothing
    path = tmp_path / "slurm-1234.out"
    path.write_text("using world size: 8\n iteration        1/     100 | lm loss: abc |\ndone\n")
    with pytest.raises(StabInputError) as err:
        read(path)
    reason = err.value.reason
    assert "closest of the text formats tried" in reason and "read as megatron" in reason
    for family in ("llmc", "megatron", "blocklog", "dictlog", "deepspeed", "jsonl", "kvlog"):
        assert family in reason
    assert err.value.line == 2  # the closest family's rejected record


def test_a_forced_format_is_never_second_guessed(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(_nanogpt_under_deepspeed())
    run = read(path, ReadOptions(format_in="deepspeed"))
    assert run.source.format == "deepspeed" and "loss" not in run.frame.columns
