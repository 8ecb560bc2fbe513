"""A shift during a fast fall is a persistent spike at its first step; a bump of the same
size there is recoverable (#36).

Q2.2 asks whether the loss came back to mu + 0.5 sigma within 50 steps. On an LM curve's
fast early fall a frozen mu is left above the curve within a few dozen steps: a +5% shift
(5 sigma, AR(1) noise with phi 0.6) was "back" where the fall had taken 5% off the loss,
and called recoverable. Back is judged along the curve the run was on, fitted through the
points either side of the flag with the shift taken out.
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
from stabilitycli.detect.carried_curve import fitted_curve
from tests.detect._lm_noise_curves import frame, lm_run

NOISE = 0.01
SHIFT = 0.05  # 5 sigma and 5% of the level


def _near(findings, onset: int, every: int) -> list:
    return [
        f
        for f in findings
        if f.code == "spike" and int(f.severity) >= 1 and abs(f.step - onset) <= 2 * every
    ]


def _at_the_bar(loss, level, onset: int, points: int) -> bool:
    """The logged mean excess over the noise-free curve, over the event's first points,
    is at least 5% (the spec's bar): at exactly 5 sigma the noise leaves some under it."""
    return float(np.mean(loss[onset : onset + points] / level[onset : onset + points])) >= 1.05


def test_a_shift_on_a_fast_fall_is_persistent_at_its_first_step_every_step() -> None:
    """Steps 150-330 of a 4,000-step run, where the curve falls 0.3-0.1% a step: before the
    fitted curve, most of these were "recovered in 20-40 steps" (warning)."""
    judged = persistent = 0
    for seed in range(12):
        steps, level, loss = lm_run(seed, 4000, phi=0.6, noise=NOISE, ar_share=0.5)
        onset = 150 + 15 * seed
        loss[onset:] += SHIFT * level[onset:]
        if not _at_the_bar(loss, level, onset, 100):
            continue
        judged += 1
        hits = _near(analyze(frame(steps, loss)).findings, onset, 1)
        persistent += bool(hits) and hits[0].evidence["recovered"] is False
        if hits and hits[0].evidence["recovered"] is False:
            assert int(hits[0].severity) == 2
    assert judged >= 5
    assert persistent >= judged - 1, (persistent, judged)


def test_a_shift_on_a_fast_fall_read_from_a_csv_says_what_it_was_judged_against(
    tmp_path,
) -> None:
    """The log written by pandas; the evidence names the stretch the curve was fitted over."""
    steps, level, loss = lm_run(3, 4000, phi=0.6, noise=NOISE, ar_share=0.5)
    onset = 200
    loss[onset:] += 0.08 * level[onset:]
    path = tmp_path / "run.csv"
    pd.DataFrame({"step": steps, "train/loss": loss}).to_csv(path, index=False)
    result = CliRunner().invoke(app, ["analyze", str(path), "--format", "json"])
    assert type(result.exception) is SystemExit and result.exit_code == 1, result.output
    spikes = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "spike"]
    hit = next(f for f in spikes if abs(f["step"] - onset) <= 2)
    assert hit["severity"] == "error" and hit["evidence"]["recovered"] is False
    first = hit["evidence"]["recovery_curve_first_step"]
    last = hit["evidence"]["recovery_curve_last_step"]
    assert first < onset < last
    # Q2.2's sentence names the stretch actually fitted, not the baseline window's start
    document = json.loads(result.stdout)
    recovery = next(q for q in document["verdict"]["path"] if q["question"] == "Q2.2")
    assert f"fitted through the points of steps {first}-{last}" in recovery["evidence"]


def test_a_mid_run_shift_logged_every_100_steps_is_persistent_at_its_first_step() -> None:
    judged = persistent = 0
    for seed in range(10):
        steps, level, loss = lm_run(seed, 4000, phi=0.6, noise=NOISE, ar_share=0.5, every=100)
        onset = 1800 + 20 * seed
        loss[onset:] += SHIFT * level[onset:]
        if not _at_the_bar(loss, level, onset, 20):
            continue
        judged += 1
        hits = _near(analyze(frame(steps, loss)).findings, int(steps[onset]), 100)
        persistent += bool(hits) and hits[0].evidence["recovered"] is False
    assert judged >= 4
    assert persistent >= judged - 1, (persistent, judged)


def test_a_bump_of_the_same_size_on_a_fast_fall_stays_recoverable() -> None:
    """+5% for 20 steps, then back on the curve: recovered within the 50 steps."""
    recovered = found = 0
    for seed in range(12):
        steps, level, loss = lm_run(seed, 4000, phi=0.6, noise=NOISE, ar_share=0.5)
        onset = 150 + 15 * seed
        loss[onset : onset + 20] += SHIFT * level[onset : onset + 20]
        hits = _near(analyze(frame(steps, loss)).findings, onset, 1)
        found += bool(hits)
        recovered += bool(hits) and hits[0].evidence["recovered"] is True
    assert found >= 6
    assert recovered >= found - 1, (recovered, found)


def test_a_short_bump_on_a_fast_fall_is_back_on_the_carried_curve_as_it_ends() -> None:
    """+6% for 5 steps: back on the curve at the first point after it, and the finding
    says what "back" was measured by. (The 20-step bump's end reads as a level change,
    which leaves too few points after the flag to fit: it is judged as before.)"""
    for seed in range(4):
        steps, level, loss = lm_run(seed, 4000, phi=0.6, noise=NOISE, ar_share=0.5)
        onset = 150 + 15 * seed
        loss[onset : onset + 5] += 0.06 * level[onset : onset + 5]
        hit = _near(analyze(frame(steps, loss)).findings, onset, 1)[0]
        assert hit.evidence["recovered"] is True and int(hit.severity) == 1
        assert hit.evidence["recovery_steps"] <= 8
        assert "falling with the curve fitted through the points of steps" in hit.message


def test_the_fitted_curve_follows_a_fast_fall_across_a_step() -> None:
    """Noise-free: the curve at the flag and its fall after it, with a +5% step at the
    flag taken out, within 0.2% of the curve itself."""
    steps = np.arange(4000, dtype=np.int64)
    _, level, _ = lm_run(0, 4000, phi=0.6, noise=0.0)
    loss = level.copy()
    row = 200
    loss[row:] *= 1.05
    span = np.array([100])
    curve, ratio = fitted_curve(
        np.array([row]), steps, loss, np.zeros(0, np.int64), span, Thresholds()
    )
    assert abs(curve[0] / level[row] - 1.0) < 0.002
    assert np.allclose(curve[0] * ratio[0], level[row : row + 100], rtol=0.002)
    # a level change just before the flag leaves too few points to fit: no curve
    cut, _ = fitted_curve(np.array([row]), steps, loss, np.array([row - 5]), span, Thresholds())
    assert np.isnan(cut[0])


@pytest.mark.parametrize("lines", [740, 790, 838])
def test_a_log_cut_inside_a_fast_fall_points_settle_span_is_judged(tmp_path, lines):
    """`fixtures/rules/loss-rise/fires` cut after 740-838 lines (as `stab watch` sees it while
    the run writes): the flagged points' settle spans are cut by the end of the log, a fast
    fall's shorter than the others' in one block of candidates. Every such prefix crashed
    the settled reading (a shape mismatch) before the fitted ratios were put in their rows."""
    import gzip

    from tests.conftest import FIXTURES

    with gzip.open(FIXTURES / "rules" / "loss-rise" / "fires" / "run.jsonl.gz", "rt") as handle:
        text = handle.read().splitlines()[:lines]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(text) + "\n")
    result = analyze(str(path))
    assert result.source.rows_read == lines and result.source.rows_rejected == 0
    assert result.coverage is not None and "spike" in result.coverage.checked


def test_the_fitted_stretch_is_named_where_the_logging_interval_changes_at_the_shift() -> None:
    """Logged every step up to 300 and every 5 from there (a resumed job's new interval):
    the curve is fitted over the 20 points before the flag (steps 280-299 and, after it,
    a spike window's worth), not over the baseline window's 100 steps; the evidence says
    which steps it used."""
    for seed in range(3):
        steps, level, loss = lm_run(seed, 4000, phi=0.6, noise=NOISE, ar_share=0.5)
        keep = (steps < 300) | (steps % 5 == 0)
        steps, level, loss = steps[keep], level[keep], loss[keep].copy()
        onset = int(np.searchsorted(steps, 300))
        loss[onset:] += 0.08 * level[onset:]
        result = analyze(frame(steps, loss))
        hit = next(f for f in result.findings if f.code == "spike" and f.step == 300)
        assert hit.evidence["baseline_first_step"] == 200
        assert hit.evidence["recovery_curve_first_step"] == 280
        recovery = next(p for p in result.verdict.path if p.question == "Q2.2")
        last = hit.evidence["recovery_curve_last_step"]
        assert f"fitted through the points of steps 280-{last}" in recovery.evidence
