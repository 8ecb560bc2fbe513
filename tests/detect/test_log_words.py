"""Issue 35 part 3: every sentence rests on the log or says it is a prior.

Each case is read from a real log in place or from a log written by a real writer
(pandas CSV, tensorboardX, JSONL) in tmp_path, and asserts the sentence the user reads.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stabilitycli import analyze
from stabilitycli.classify.remedies import ENABLE_DYNAMIC_SCALING
from stabilitycli.detect.log_words import loss_is_token_ce, read_log_words
from stabilitycli.detect.series import build_view
from stabilitycli.ingest import read
from tests.conftest import REAL_LOGS, ROOT, run_fixture

SHARED = ROOT.parent / "shared"
NANOGPT_PASTE = SHARED / "pasted-logs" / "nanogpt-issue215-fp16-nan" / "issue_excerpt.log"
MEGATRON_N16 = REAL_LOGS / "bigscience-perf-runs" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"


def _every_text(result) -> str:
    """The verdict's summary, path evidence and remedies, and every finding's message."""
    v = result.verdict
    parts = [v.summary, *(p.evidence for p in v.path), *v.remediation]
    return "\n".join(parts + [f.message for f in result.findings])


def _spiky(steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A loss that learns (so the run is not `not-learning`) with a grad-norm-led spike at
    step 900 that recovers, and its grad norm."""
    loss = 0.8 + 1.2 * np.exp(-np.arange(steps) / 150) + 0.01 * rng.standard_normal(steps)
    loss[900:903] += np.array([1.6, 0.8, 0.3])
    grad = 0.5 + 0.02 * rng.standard_normal(steps)
    grad[899] = 25.0
    return loss, grad


# ---------------------------------------------------------------- token cross-entropy


def test_an_mse_regression_loss_gets_no_token_words(tmp_path) -> None:
    """A pandas CSV of a regression run (`loss` is an MSE): no p(correct token), no rare
    tokens, no pre-clip (a user's own grad_norm column)."""
    rng = np.random.default_rng(3)
    loss, grad = _spiky(1400, rng)
    path = tmp_path / "regression.csv"
    pd.DataFrame({"step": np.arange(1400), "loss": loss, "grad_norm": grad}).to_csv(
        path, index=False
    )
    result = analyze(path)
    assert result.verdict.code == "spike-recoverable" and result.verdict.cause == "long-tail-token"
    text = _every_text(result)
    for claim in ("p(correct token)", "rare-token", "rare or long-tail tokens", "pre-clip"):
        assert claim not in text, claim
    assert "one batch's gradient dominated the update (a long-tail batch)" in text
    view = build_view(read(path))
    reading = loss_is_token_ce(view)
    assert not reading.holds and "'loss'" in reading.reason


def test_a_cross_entropy_key_gets_the_token_words(tmp_path) -> None:
    """The same run logged under `train/CrossEntropyLoss` (JSONL): the probability and the
    rare-token reading are said, with the key as the reason."""
    rng = np.random.default_rng(3)
    loss, grad = _spiky(1400, rng)
    path = tmp_path / "run.jsonl"
    with path.open("w") as out:
        for step in range(1400):
            row = {"step": step, "train/CrossEntropyLoss": loss[step], "grad_norm": grad[step]}
            out.write(json.dumps(row) + "\n")
    result = analyze(path)
    spike = next(f for f in result.findings if f.code == "spike").evidence
    assert (
        f"geometric-mean p(correct token) {math.exp(-spike['mu']):.3g} -> "
        f"{math.exp(-spike['peak']):.3g}"
    ) in result.verdict.summary
    assert "long-tail / rare-token batch" in _every_text(result)
    assert any("rare or long-tail tokens" in r for r in result.verdict.remediation)
    reading = read_log_words(build_view(read(path))).loss_is_token_ce
    assert reading.holds and "CrossEntropyLoss" in reading.reason


def test_a_perplexity_equal_to_exp_loss_makes_it_a_token_loss(tmp_path) -> None:
    """tensorboardX: a plain `train/loss` beside `train/perplexity` = exp(loss)."""
    from tensorboardX import SummaryWriter

    rng = np.random.default_rng(5)
    loss = 3.0 + 0.02 * rng.standard_normal(300)
    writer = SummaryWriter(str(tmp_path / "tb"))
    for step, value in enumerate(loss):
        writer.add_scalar("train/loss", float(value), step)
        writer.add_scalar("train/perplexity", math.exp(float(value)), step)
    writer.close()
    reading = loss_is_token_ce(build_view(read(tmp_path / "tb")))
    assert reading.holds and "exp(loss)" in reading.reason
    # and without the perplexity, nothing says so
    plain = tmp_path / "plain"
    writer = SummaryWriter(str(plain))
    for step, value in enumerate(loss):
        writer.add_scalar("train/loss", float(value), step)
    writer.close()
    assert not loss_is_token_ce(build_view(read(plain))).holds


def test_megatron_lm_loss_is_a_token_loss_and_its_grad_norm_pre_clip() -> None:
    if not MEGATRON_N16.exists():
        pytest.skip("shared real logs not beside the checkout")
    said = read_log_words(build_view(read(MEGATRON_N16)))
    assert said.loss_is_token_ce.holds
    assert said.grad_norm_is_preclip.holds and "Megatron" in said.grad_norm_is_preclip.reason
    assert said.grad_norm == "pre-clip grad norm"


def test_the_hf_trainer_grad_norm_is_pre_clip_and_a_jsonl_one_is_not() -> None:
    hf = read_log_words(build_view(read(ROOT / "fixtures" / "hf_trainer")))
    assert hf.grad_norm_is_preclip.holds and "clip_grad_norm_" in hf.grad_norm_is_preclip.reason
    plain = read_log_words(build_view(read(run_fixture("spike-long-tail"))))
    assert not plain.grad_norm_is_preclip.holds and plain.grad_norm == "grad norm"


# ---------------------------------------------------------------- the clip remedy


def test_the_clip_remedy_comes_from_the_runs_own_grad_norm() -> None:
    """The bundled spike run: 54% of its steps are above 0.5, so a fixed 0.5 is no advice;
    the remedy names the 90th percentile of its grad norm before the spike, and says so."""
    path = run_fixture("spike-long-tail")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    before = np.array(
        [r["train/grad_norm"] for r in rows if r["step"] < 900 and "train/grad_norm" in r],
        dtype=float,
    )
    before = before[np.isfinite(before)]
    result = analyze(path)
    clip = [r for r in result.verdict.remediation if r.startswith("clip the global grad norm")]
    assert clip == [
        f"clip the global grad norm at about {np.percentile(before, 90):.3g}, the 90th "
        f"percentile of the grad norm over steps 0-899 ({before.size} points)"
    ]
    assert "at 0.5" not in "\n".join(result.verdict.remediation)


# ---------------------------------------------------------------- causes from the dtype


def test_nanogpt_fp16_is_not_told_to_enable_dynamic_loss_scaling(cli) -> None:
    """nanoGPT's --dtype float16 already runs torch's GradScaler; the fp16 cause is the
    dtype's usual one, marked as inferred."""
    if not NANOGPT_PASTE.exists():
        pytest.skip("shared pasted logs not beside the checkout")
    result = cli("analyze", NANOGPT_PASTE, "--dtype", "fp16", "--format", "json")
    assert result.exit_code == 1  # an error-level verdict, not a crash
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["code"] == "nan" and verdict["cause"] == "activation-overflow"
    assert ENABLE_DYNAMIC_SCALING not in verdict["remediation"]
    assert not any("enable dynamic loss scaling" in r for r in verdict["remediation"])
    assert (
        "the usual cause is an activation past 65504; inferred from the dtype"
        in (verdict["summary"])
    )
    assert "exceeded 65504" not in verdict["summary"]


def test_an_fp32_nan_names_log_zero_as_the_usual_cause_not_a_fact() -> None:
    verdict = analyze(run_fixture("nan-fp32-log-zero")).verdict
    assert verdict.cause == "log-of-zero"
    assert "fp32 NaN: the usual cause is log(0)" in verdict.summary
    assert "inferred from the dtype, not seen in the log" in verdict.summary
    assert "almost always" not in verdict.summary


# ---------------------------------------------------------------- a grad-norm NaN, a finite loss


def test_a_grad_norm_nan_on_some_steps_beside_a_falling_loss(tmp_path) -> None:
    """Loss finite and falling at every step; grad norm NaN on about 30% of the steps from
    step 1000 (JSONL as json.dumps writes NaN)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "run.jsonl"
    nan_steps = []
    with path.open("w") as out:
        for step in range(2000):
            grad = 1.0 + 0.1 * rng.standard_normal()
            if step >= 1000 and rng.random() < 0.3:
                grad = float("nan")
                nan_steps.append(step)
            out.write(
                json.dumps({"step": step, "loss": 5 * math.exp(-step / 800) + 2, "grad_norm": grad})
                + "\n"
            )
    result = analyze(path)
    v = result.verdict
    first, after = nan_steps[0], 2000 - nan_steps[0]
    assert (
        f"The grad norm is non-finite on {len(nan_steps)} of {after} logged points from step "
        f"{first} while the loss stays finite (it falls:"
    ) in v.summary
    assert "inferred, not seen in the log" in v.summary and "skipped" in v.summary
    for wrong in ("hides it", "hidden in the loss", "loss non-finite"):
        assert wrong not in _every_text(result), wrong
    assert v.remediation[0].startswith("check whether the steps with a non-finite grad norm")
    assert not any(
        r == f"resume from the last checkpoint before step {first}" for r in v.remediation
    )
    nan = next(f for f in result.findings if f.code == "nan")
    assert nan.evidence["points_from_first"] == after and nan.evidence["loss_falls"] is True


def test_a_grad_norm_nan_at_every_step_after_the_first_is_a_broken_run() -> None:
    """HF's NaN filter: the grad norm NaN at every step from 1500 while the loss is logged."""
    result = analyze(run_fixture("nan-hidden-hf"))
    assert "grad_norm shows it (non-finite at every logged point from there" in (
        result.verdict.summary
    )
    assert result.verdict.remediation[0] == "resume from the last checkpoint before step 1500"


# ---------------------------------------------------------------- a cut last line


def test_a_paste_cut_by_the_issue_text_is_not_a_job_that_died() -> None:
    if not NANOGPT_PASTE.exists():
        pytest.skip("shared pasted logs not beside the checkout")
    source = read(NANOGPT_PASTE).source
    said = "\n".join([*source.warnings, *source.notes, *(r.reason for r in source.rejections)])
    assert "job died" not in said and "mid-write" not in said
    assert "a paste (its lines carry Markdown quote markers) cut where the copied text ends" in said


def test_a_cut_line_on_stdin_says_standard_input_ended(tmp_path) -> None:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    text = (ROOT / "fixtures" / "textlogs" / "nanogpt" / "train.log").read_text()
    assert not text.endswith("\n")
    result = CliRunner().invoke(app, ["analyze", "-", "--format", "json"], input=text)
    assert result.exit_code == 1, result.output  # the nan verdict, not a crash
    source = json.loads(result.stdout)["source"]
    said = json.dumps(source)
    assert "job died" not in said and "standard input ends there" in said
    # the same file read from disk: a job was writing it
    on_disk = read(ROOT / "fixtures" / "textlogs" / "nanogpt" / "train.log").source
    assert any("the job died while writing" in w for w in on_disk.warnings)
