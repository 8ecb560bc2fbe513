"""Logs as users paste them (shared/pasted-logs/), read as they are, held to their PROVENANCE truth.

Read in place, never copied into the repository. Also: `stab analyze -` gives
the verdict of the file from a pipe.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.ingest.options import ReadOptions
from tests.conftest import ROOT

PASTED = ROOT.parent / "shared" / "pasted-logs"
FP16 = ReadOptions(dtype="fp16")
pytestmark = pytest.mark.skipif(not PASTED.is_dir(), reason=f"pasted logs not at {PASTED}")


def codes(result) -> list[str]:
    return [f.code for f in result.findings]


def test_gptneox_bf16_two_points_is_insufficient_data_that_states_the_jump() -> None:
    result = analyze(PASTED / "gptneox-issue947-bf16-jump" / "issue_excerpt_bf16.log")
    assert result.verdict.code == "insufficient-data"
    assert "4.9x" in result.verdict.summary and "step 2" in result.verdict.summary
    src = result.source
    assert src.rows_used == 2 and src.rows_rejected == 0
    assert any("approx flops per GPU" in n for n in src.notes)


def test_gptneox_fp16_is_read_and_insufficient_data() -> None:
    result = analyze(PASTED / "gptneox-issue947-bf16-jump" / "issue_excerpt_fp16.log")
    assert result.verdict.code == "insufficient-data"
    assert result.source.rows_used == 2 and "loss-jump" not in codes(result)


def test_nanogpt_issue_paste_is_nan_from_3010() -> None:
    result = analyze(PASTED / "nanogpt-issue215-fp16-nan" / "issue_excerpt.log")
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [3010]
    src = result.source
    # `iter 3070: loss nan` is cut in the issue text: named, not read
    assert [r.line for r in src.rejections] == [35]
    assert src.rows_read == src.rows_used + src.rows_rejected
    # the run was fp16 (`--dtype=float16` in the issue): given that, the cause is named
    fp16 = analyze(PASTED / "nanogpt-issue215-fp16-nan" / "issue_excerpt.log", options=FP16)
    assert fp16.verdict.cause == "activation-overflow"


def test_hf_deepspeed_paste_takes_steps_from_the_bars() -> None:
    result = analyze(PASTED / "chinese-llama-issue534-scale-halving" / "issue_excerpt.log")
    # overflow on every step, the scale halving to 2 and never regrowing: a failing scaler
    assert result.verdict.code == "fp16-overflow"
    src = result.source
    assert (src.first_step, src.last_step) == (378, 382)
    assert src.dtype == "fp16"
    failing = next(f for f in result.findings if f.code == "fp16-overflow")
    assert (failing.evidence["scale_from"], failing.evidence["scale_to"]) == (64.0, 2.0)


def test_modded_nanogpt_spikes_are_one_recurring_finding() -> None:
    log = PASTED / "mnano-scaleup1b-1p5b" / "ad8d7ae5-7b2d-4ee9-bc52-f912e9174d7a.cut.txt"
    result = analyze(log)
    assert result.verdict.code == "spike-recoverable"
    assert codes(result).count("recurring-spikes") == 1
    recurring = next(f for f in result.findings if f.code == "recurring-spikes")
    assert 25 <= recurring.evidence["count"] <= 40
    assert result.source.first_step == 0 and result.source.last_step == 20344


def test_keras_tensorboard_file_is_insufficient_data() -> None:
    result = analyze(PASTED / "swahili-stt-keras-tb" / "tb")
    assert result.verdict.code == "insufficient-data"
    assert result.source.metrics["loss"] == "epoch_loss"


def test_stdin_gives_the_verdict_of_the_file() -> None:
    log = PASTED / "nanogpt-issue215-fp16-nan" / "issue_excerpt.log"
    result = CliRunner().invoke(app, ["analyze", "-", "--format", "json"], input=log.read_bytes())
    assert result.exit_code == 1, result.output
    assert '"code": "nan"' in result.output and '"path": "<stdin>"' in result.output


def test_a_real_pipe_reads_like_the_file() -> None:
    log = PASTED / "gptneox-issue947-bf16-jump" / "issue_excerpt_bf16.log"
    proc = subprocess.run(
        [sys.executable, "-m", "stabilitycli", "analyze", "-", "-f", "json"],
        input=log.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b'"insufficient-data"' in proc.stdout and b"4.9x" in proc.stdout
