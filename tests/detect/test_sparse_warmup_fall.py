"""Events during a warmup and right after its peak in a log written every 10 steps (#36).

A 100-step window of a log written every 10 steps holds ten points: on a warmup's fall
its mean lags the curve by half a window (2-3 sigma at 1% noise), and the noise pooled
from the plain differences of the windows before counts their higher level's wider noise
(1.2-1.5x the noise at the row). A 5-sigma bump then read as 2-3 sigma over its frozen
baseline and went by as a blip. Inside the LR's planned warmup the spike rule now reads
the level from the line through the window and the one before it, carries that line on
over the event's points, and pools the noise relative to the loss.

The runs are the LM benchmark's own (benchmarks/_dq_lm_synth.py: a power-law fall in the
LR-weighted steps, AR(1) plus skewed batch noise), written by pandas as CSV into
tmp_path; each event case was a blip (or nothing) before.
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.detect.autocorr import noise_memory_of
from stabilitycli.detect.fall_curve import FallReading, sparse_fall
from stabilitycli.detect.pooled_noise import pooled_sigma
from tests.detect._lm_benchmark_runs import alarms, write_csv

POINTS = 4000
SIGMA = 0.01
EVERY = 10


@pytest.mark.parametrize(
    ("kind", "place", "seed"),
    [
        # 5 sigma (5%) events half-way down a warmup logged every 10 steps
        ("bump3pt", "warmup", 13),
        ("bump3pt", "warmup", 21),
        ("bump10pt", "warmup", 17),
        ("shift", "warmup", 4),
        # ... and within 100 steps after the LR's peak, where the fall is fastest
        ("bump3pt", "schedule", 3),
        ("bump10pt", "schedule", 9),
        ("shift", "schedule", 18),
    ],
)
def test_a_5_sigma_event_in_a_sparse_warmup_is_a_spike(tmp_path, synth, kind, place, seed):
    rng = np.random.default_rng(seed)
    run = synth.event_lm(kind, 5 * SIGMA, place, POINTS, EVERY, SIGMA, rng)
    result = analyze(write_csv(tmp_path / "run.csv", run.frame))
    onset = run.truth.onset
    found = [f for f in alarms(result) if f.code == "spike" and abs(f.step - onset) <= 2 * EVERY]
    assert found, [f.message for f in result.findings]


@pytest.mark.parametrize("every", [10, 100])
@pytest.mark.parametrize("sigma", [0.01, 0.03])
def test_a_healthy_sparse_warmup_stays_quiet(tmp_path, synth, every, sigma):
    for seed in range(4):
        rng = np.random.default_rng(500 + seed)
        run = synth.healthy_lm(("cosine", "linear", "wsd")[seed % 3], POINTS, every, sigma, rng)
        result = analyze(write_csv(tmp_path / f"run{seed}.csv", run.frame))
        assert not alarms(result), [f.message for f in alarms(result)]


def _reading() -> FallReading:
    return FallReading(None, None, 0.0, 1.0)


def test_the_sparse_line_is_read_only_in_the_planned_warmup():
    # the window before sits 0.5 above this one's mean (ten points each, noise 0.1): a
    # fall of 11 standard errors; its line, read half a window on, is 0.25 under the mean
    # (no recent points to bound it here)
    windows = (np.array([10.5, 10.5]), np.array([10.0, 10.0]), np.full(2, 10.0), np.full(2, 10.0))
    line = (np.full(2, -0.005), np.full(2, 50.0))
    pooled = np.full(2, 0.1)
    thresholds = Thresholds()
    slope, level = sparse_fall(
        windows, line, pooled, _reading(), np.array([True, False]), thresholds
    )
    assert slope.tolist() == [-0.005, 0.0]
    assert level.tolist() == pytest.approx([9.75, 10.0])
    # no LR plan: the mean, no fall read
    slope, level = sparse_fall(windows, line, pooled, _reading(), None, thresholds)
    assert slope.tolist() == [0.0, 0.0] and level.tolist() == [10.0, 10.0]


def test_the_sparse_line_is_never_under_where_the_loss_just_was():
    # the last points' mean 9.9, its standard error half a point's noise of 0.1: the line
    # (9.75) is read no lower than 9.9 - 2 * 0.5 * 0.1 = 9.8 (a dip of AR(1) noise
    # steepens the line as it lowers the mean)
    windows = (np.array([10.5]), np.array([10.0]), np.full(1, 10.0), np.full(1, 10.0))
    reading = FallReading(None, np.array([9.9]), 0.5, 1.0)
    slope, level = sparse_fall(
        windows,
        (np.array([-0.005]), np.array([50.0])),
        np.array([0.1]),
        reading,
        np.array([True]),
        Thresholds(),
    )
    assert slope.tolist() == [-0.005]
    assert level.tolist() == pytest.approx([9.8])


def test_a_fall_within_the_noise_is_not_read():
    # 0.1 between two ten-point means of noise 0.1: 2.2 standard errors, under the bar
    windows = (np.array([10.1]), np.array([10.0]), np.full(1, 10.0), np.full(1, 10.0))
    slope, level = sparse_fall(
        windows,
        (np.array([-0.001]), np.array([50.0])),
        np.array([0.1]),
        _reading(),
        np.array([True]),
        Thresholds(),
    )
    assert slope.tolist() == [0.0] and level.tolist() == [10.0]


def test_the_warmup_noise_is_pooled_at_the_level_of_the_row():
    # a loss falling from 10 to 5 over 400 points with 1% noise: plain differences over
    # the last 100 points count the earlier, wider noise; relative ones do not
    rng = np.random.default_rng(3)
    level = np.linspace(10.0, 5.0, 400)
    loss = level * (1.0 + 0.01 * rng.standard_normal(400))
    memory = noise_memory_of(loss, Thresholds())
    plain = pooled_sigma(loss, 100, memory)
    relative = pooled_sigma(loss, 100, memory, None, (10, 30))
    truth = 0.01 * level
    assert np.nanmedian(plain[300:] / truth[300:]) > 1.05
    assert np.nanmedian(relative[300:] / truth[300:]) == pytest.approx(1.0, abs=0.08)
    # the relative reading needs 30 changes, not half the pool's hundred
    assert np.isnan(relative[29]) and np.isfinite(relative[32]) and np.isnan(plain[45])
