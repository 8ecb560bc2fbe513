"""Divergence onset on a run still improving when the rise begins (issue 11, target O2).

The loss decays toward a floor, as training curves do, and a ramp of +10% of
the level starts while it still falls, under multiplicative gamma noise of 3%
of the level (skewness 1, like the llm.c GPT-2 residual). The onset fit models
the decay before the rise by the run's own curve, fitted to what was logged
before, rather than a straight fall over a short stretch.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from stabilitycli.detect.divergence_decay import decay_before

POINTS = 3000


def _decaying_run(seed: int, every: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, the noise-free level (2 + 8 exp(-t / tau), tau 5% of the run) and the noisy
    loss."""
    rng = np.random.default_rng(seed)
    steps = np.arange(POINTS, dtype=np.int64) * every
    level = 2.0 + 8.0 * np.exp(-steps / (0.05 * POINTS * every))
    unit = (rng.standard_gamma(4.0, POINTS) - 4.0) / 2.0
    return steps, level, level * (1.0 + 0.03 * unit)


def test_small_ramps_on_a_decaying_curve_start_within_5_percent_of_their_length():
    """+10% ramps over 300 logged points (then level) and to the end of the log, starting at
    35-50% of the run as the benchmark's do, logged every 10 steps: the onset is within 5% of
    the ramp's length in at least 50 of 60 runs (measured: 52; the straight-fall fit: 44)."""
    runs = 30
    on_time = []
    for seed in range(runs):
        steps, level, noisy = _decaying_run(100 + seed, 10)
        start = 1050 + (450 * seed) // runs
        for length in (3000, int(steps[-1] - steps[start])):
            rise = np.clip((steps - steps[start]) / length, 0.0, 1.0)
            result = analyze(pl.DataFrame({"step": steps, "loss": noisy + 0.10 * level * rise}))
            found = [f for f in result.findings if f.code == "divergence"]
            assert found, (seed, length, [(f.code, f.step) for f in result.findings])
            on_time.append(abs(found[0].step - steps[start]) <= 0.05 * length)
    assert sum(on_time) >= 50, on_time


def test_the_decay_is_fitted_only_where_it_beats_a_straight_line():
    steps, _, loss = _decaying_run(7, 10)
    # over the first 40% of the run the curve is clear, and its time constant is found
    decay = decay_before(steps, loss, 0, int(0.4 * POINTS))
    assert decay is not None and math.isinf(decay.power)
    assert decay.width == pytest.approx(0.05 * POINTS * 10, rel=0.15)
    # far down the curve (10 time constants on) it is a level under noise: no shape
    assert decay_before(steps, loss, int(0.5 * POINTS), int(0.6 * POINTS)) is None
