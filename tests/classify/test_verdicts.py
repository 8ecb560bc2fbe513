"""Every synthetic run gives the verdict, cause and key steps its expected.json states."""

from __future__ import annotations

import pytest

from stabilitycli import analyze
from stabilitycli.core.model import Severity
from tests.conftest import all_runs, expected, run_fixture


@pytest.mark.parametrize("name", all_runs())
def test_fixture_verdict(name: str) -> None:
    want = expected(name)
    result = analyze(run_fixture(name))
    assert result.verdict.code == want["verdict"], result.verdict.summary
    if "cause" in want:
        assert result.verdict.cause == want["cause"]
    tolerance = want.get("step_tolerance", 5)
    for code, steps in want.get("findings", {}).items():
        found = [f.step for f in result.findings if f.code == code]
        for step in steps:
            assert any(s is not None and abs(s - step) <= tolerance for s in found), (
                code,
                step,
                found,
            )
    if "origin" in want:
        nan = next(f for f in result.findings if f.code == "nan")
        assert nan.evidence["origin"] == want["origin"]
    for restart, got in zip(want.get("restarts", []), result.source.restarts, strict=True):
        assert got.resumed_from_step == restart["resumed_from_step"]
        assert got.last_step_before == restart["last_step_before"]


@pytest.mark.parametrize("name", [n for n in all_runs() if expected(n)["verdict"] == "healthy"])
def test_healthy_runs_have_no_error_or_spike(name: str) -> None:
    result = analyze(run_fixture(name))
    assert not [f for f in result.findings if f.severity >= Severity.ERROR]
    assert not [f for f in result.findings if f.code in ("spike", "divergence", "plateau")]


def test_every_verdict_and_cause_of_the_contract_has_a_fixture() -> None:
    verdicts = {expected(n)["verdict"] for n in all_runs()}
    causes = {expected(n).get("cause") for n in all_runs()}
    # rank-outlier lives in the per-rank fixtures (tests/detect/test_ranks.py,
    # tests/pipeline/test_ranks_in_analyze.py)
    assert verdicts >= {
        "healthy",
        "insufficient-data",
        "nan",
        "spike-recoverable",
        "spike-persistent",
        "fp16-overflow",
        "loss-scale-static",
        "loss-scale-collapsed",
        "divergence",
        "plateau",
    }
    assert causes >= {
        "long-tail-token",
        "lr-discontinuity",
        "duplicate-batch",
        "optimizer-reset",
        "lr-increasing",
        "weight-norm",
        "grad-norm-rising",
        "log-of-zero",
        "activation-overflow",
    }


def test_spike_evidence_can_fill_a_postmortem() -> None:
    result = analyze(run_fixture("spike-long-tail"))
    spike = next(f for f in result.findings if f.code == "spike")
    ev = spike.evidence
    assert ev["onset_step"] == 900 and ev["recovered"] is True and ev["spike_type"] == 1
    assert ev["peak"] > ev["mu"] + 3 * ev["sigma"]
    cause = ev["causes"][0]
    assert cause["cause"] == "long-tail-token" and cause["grad_norm_step"] == 899
    assert cause["grad_norm"] > 30 * cause["grad_norm_baseline"]


def test_library_accepts_a_polars_frame() -> None:
    import numpy as np
    import polars as pl

    steps = np.arange(600)
    loss = 3.0 + 0.01 * np.sin(steps)
    loss[400:] = np.nan
    result = analyze(pl.DataFrame({"step": steps, "loss": loss}))
    assert result.verdict.code == "nan"
    assert result.findings[0].evidence["first_step"] == 400


def test_spike_is_also_read_as_a_probability(tmp_path) -> None:
    import json

    source = run_fixture("spike-long-tail")
    (tmp_path / "run.jsonl").write_bytes(source.read_bytes())
    (tmp_path / "manifest.json").write_text(json.dumps({"dtype": "bf16", "vocab_size": 248320}))
    result = analyze(tmp_path / "run.jsonl")
    assert result.source.dtype == "bf16" and result.source.vocab_size == 248320
    assert "geometric-mean p(correct token)" in result.verdict.summary
    assert "12.42 nats" in result.verdict.summary  # ln 248,320 (seed 000)


def test_a_nan_the_loss_hides_is_not_told_as_a_nan_loss() -> None:
    """HF's default NaN filter logs the loss as a number while the grad norm is NaN: the
    verdict names the series that shows it and says the loss hides it."""
    result = analyze(run_fixture("nan-hidden-hf"))
    nan = next(f for f in result.findings if f.code == "nan")
    assert nan.evidence["series"] == "grad_norm"
    assert "loss went non-finite" not in result.verdict.summary.lower()
    assert "grad_norm shows it" in result.verdict.summary
    assert "the logged loss hides it" in result.verdict.summary
