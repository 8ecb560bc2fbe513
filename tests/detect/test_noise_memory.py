"""Noise as it is (#36, item 3): AR(1)-like loss noise on LM-shaped runs.

Healthy runs (warmup's fast fall, cosine or WSD decay) with AR(1) noise (phi 0.3-0.8)
mixed with skewed batch noise: clusters of correlated points are not spikes, and the
end of the log is not a plateau or a divergence; a real multi-point bump and a real
late rise are still found. Each of the healthy cases failed before the change (spike
warnings at 3.6-4.9 sigma clusters, plateau/divergence in the last 1% of the run).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.core.config import Thresholds
from stabilitycli.detect.autocorr import excess_bar_sigma, noise_memory_of
from tests.detect._lm_noise_curves import ar1, frame, lm_run


def _warnings(result, code: str) -> list:
    return [f for f in result.findings if f.code == code and int(f.severity) >= 1]


@pytest.mark.parametrize("phi", [0.3, 0.5, 0.8])
def test_the_memory_of_ar1_noise_is_measured_on_the_curve(phi: float) -> None:
    _, _, loss = lm_run(3, 20000, phi=phi, ar_share=1.0, noise=0.02)
    memory = noise_memory_of(loss, Thresholds())
    assert memory.lag1 == pytest.approx(phi, abs=0.08)
    assert memory.decay == pytest.approx(phi, abs=0.1)
    # a sum of 3 points spreads sqrt(F(3)) wider; the bar follows, up to its cap
    bar = excess_bar_sigma(memory, Thresholds())
    assert Thresholds().spike_excess_sigma < bar <= Thresholds().spike_excess_max_sigma


def test_independent_noise_and_a_steep_ramp_have_no_memory() -> None:
    rng = np.random.default_rng(5)
    steps = np.arange(3000)
    level = 2.0 + 8.0 * np.exp(-steps / 150.0)
    for unit in (
        (rng.standard_gamma(4.0, 3000) - 4.0) / 2.0,
        rng.standard_t(3, 3000) / np.sqrt(3.0),
    ):
        loss = level * (1.0 + 0.01 * unit) + 0.5 * level * np.clip((steps - 1300) / 300, 0, 1)
        memory = noise_memory_of(loss, Thresholds())
        assert memory.independent, memory
        assert excess_bar_sigma(memory, Thresholds()) == Thresholds().spike_excess_sigma


def _healthy_runs():
    for schedule in ("cosine", "wsd"):
        for phi in (0.7, 0.8):
            for seed in (0, 1):
                yield schedule, phi, seed, lm_run(seed, 20000, phi=phi, noise=0.03, ar_share=1.0)


def test_ar1_clusters_on_healthy_lm_runs_are_not_spikes_and_the_end_is_not_a_trend() -> None:
    """Measured before the change, on these 8 runs: 12 recoverable spike warnings (three
    correlated points, peaks 4.0-4.9 sigma) and 4 plateau or divergence findings, all in
    the last 1% of the run; verdicts spike-recoverable 6, divergence 2."""
    for schedule, phi, seed, (steps, _, loss) in _healthy_runs():
        result = analyze(frame(steps, loss))
        assert not _warnings(result, "spike"), (schedule, phi, seed)
        assert not _warnings(result, "plateau") and not _warnings(result, "divergence")
        assert result.verdict.code == "healthy", (schedule, phi, seed, result.verdict.code)


def test_a_rise_in_the_last_window_is_said_as_not_judged(tmp_path) -> None:
    """The end of a healthy run whose last window rose by chance (written by pandas as a
    CSV): healthy, and the Q4.1 evidence says what could not be judged there."""
    steps, _, loss = lm_run(0, 20000, phi=0.7, noise=0.03, ar_share=1.0)
    path = tmp_path / "run.csv"
    pd.DataFrame({"step": steps, "train/loss": loss}).to_csv(path, index=False)
    result = CliRunner().invoke(app, ["analyze", str(path), "--format", "json"])
    assert result.exception is None
    out = json.loads(result.stdout)
    assert out["verdict"]["code"] == "healthy"
    (q41,) = [p for p in out["verdict"]["path"] if p["question"] == "Q4.1"]
    assert q41["answer"] == "no"
    assert "not judged" in q41["evidence"] and "cannot be told" in q41["evidence"]


@pytest.mark.parametrize("points", [3, 10])
def test_a_real_bump_on_ar1_noise_is_still_a_spike(points: int) -> None:
    """>= 5 sigma and >= 5% over >= 3 logged points: material by the spec, whatever the
    noise's memory (the widened bar stops at the spec's 5 sigma a point)."""
    found = 0
    for seed in range(4):
        steps, level, loss = lm_run(seed, 12000, phi=0.8, noise=0.01, ar_share=1.0)
        onset = 7000 + 137 * seed
        bump = loss.copy()
        bump[onset : onset + points] += 0.07 * level[onset : onset + points]  # 7%, 7 sigma
        result = analyze(frame(steps, bump))
        found += any(abs(f.step - onset) <= 2 for f in _warnings(result, "spike"))
    assert found == 4


def test_a_late_rise_with_points_after_it_is_still_divergence() -> None:
    """+15% from 85% of the run to its end, on AR(1) noise: the windows that rose early in
    the ramp have points after them, so the divergence is found, its z corrected."""
    steps, level, loss = lm_run(2, 20000, phi=0.8, noise=0.02, ar_share=0.7)
    start = 17000
    loss = loss + 0.15 * level * np.clip((steps - start) / (steps[-1] - start), 0, 1)
    result = analyze(frame(steps, loss))
    (finding,) = _warnings(result, "divergence")
    assert abs(finding.step - start) <= 300
    ev = finding.evidence
    assert ev["noise_lag1"] > 0.05 and ev["z_uncorrected"] > ev["z"] >= 3.0
    assert "corrected for the bin medians' lag-1 autocorrelation" in finding.message


def test_ar1_helper_is_ar1() -> None:
    x = ar1(np.random.default_rng(1), 50000, 0.6)
    assert np.corrcoef(x[1:], x[:-1])[0, 1] == pytest.approx(0.6, abs=0.02)


# ---------------------------------------------------------------- item 4: the short-log jump


def test_the_warmup_of_a_long_run_has_no_loss_jump() -> None:
    """A 20,000-step run whose warmup has one mini-batch at 1.6x its neighbours (step 40):
    before the change a `loss-jump` warning ("before the spike baseline exists"); the
    first 100 steps are 0.5% of this log, its warmup, not a short log."""
    steps, _, loss = lm_run(4, 20000, phi=0.5, noise=0.02)
    loss[40] = 1.6 * loss[39]
    result = analyze(frame(steps, loss))
    assert not [f for f in result.findings if f.code in ("loss-jump", "grad-norm-jump")]


def test_a_log_mostly_without_a_baseline_still_shows_its_jump() -> None:
    """150 steps: the first 100 have no spike baseline, two thirds of the log."""
    steps, _, loss = lm_run(4, 150, phi=0.5, noise=0.02)
    loss[30] = 2.0 * loss[29]
    result = analyze(frame(steps, loss))
    (jump,) = [f for f in result.findings if f.code == "loss-jump"]
    assert jump.step == 30 and "before the spike baseline exists" in jump.message


def test_one_step_one_jump_finding(tmp_path) -> None:
    """A log too short for any baseline (written as JSONL), whose loss and grad norm jump
    at the same step: one `loss-jump` naming both, not a second `grad-norm-jump`."""
    rng = np.random.default_rng(2)
    steps = np.arange(0, 60)
    loss = 3.0 + 0.03 * rng.standard_normal(60)
    grad = 0.5 + 0.02 * rng.standard_normal(60)
    loss[41], grad[41] = 2.5 * loss[40], 6.0 * grad[40]
    path = tmp_path / "run.jsonl"
    rows = [
        {"step": int(s), "loss": float(v), "grad_norm": float(g)}
        for s, v, g in zip(steps, loss, grad, strict=True)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = CliRunner().invoke(app, ["analyze", str(path), "--format", "json"])
    assert result.exception is None
    jumps = [f for f in json.loads(result.stdout)["findings"] if f["code"].endswith("-jump")]
    assert [(f["code"], f["step"]) for f in jumps] == [("loss-jump", 41)]
    assert jumps[0]["evidence"]["grad_norm_ratio"] == pytest.approx(grad[41] / grad[40])
    assert "the grad norm jumping" in jumps[0]["message"]


# ---------------------------------------------------------------- item 4: a step is no trend


def test_a_small_persistent_step_is_not_a_plateau_or_divergence() -> None:
    """+3% at 90-94% of a cosine run (a curriculum switch, under the spec's 5% bar): before
    the change a `plateau` warning from the step on (in these 3 runs); it is a level shift,
    §2's question, and the Q4.1 evidence says it is a step. (With 0.5% noise the guard does
    not yet tell every such step from a fast ramp: not done, see #36's report.)"""
    for at, seed in ((0.94, 0), (0.94, 1), (0.9, 1)):
        steps, level, loss = lm_run(seed, 10000, phi=0.5, noise=0.01, ar_share=0.7)
        shifted = loss + 0.03 * level * (steps >= int(at * 10000))
        result = analyze(frame(steps, shifted))
        assert not _warnings(result, "plateau") and not _warnings(result, "divergence")
        (q41,) = [p for p in result.verdict.path if p.question == "Q4.1"]
        assert "is a step" in q41.evidence, (at, seed, q41.evidence)
