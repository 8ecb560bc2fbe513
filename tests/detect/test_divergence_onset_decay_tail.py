"""Quadratic ramps that start mid-decay on a cosine LM curve with AR(1) noise (#36): dated
within 5% of their length, logged every step and every 100, and the finding says the
range of starts that fit as well."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy.signal import lfilter

from stabilitycli import analyze

POINTS = 4000


def cosine_lm_run(seed: int, interval: int, rise: float, onset_frac: float, sigma: float = 0.01):
    """A warmup then a cosine LR decay to 10% of its peak; the loss a power law in the
    LR-weighted step count that anneals a further 6% as the LR decays; noise half AR(1)
    (lag-1 0.6), half independent; a rise of `rise` of the level growing as x^2 from
    `onset_frac` of the run to its end. Returns the frame (with the LR), onset and length."""
    rng = np.random.default_rng(seed)
    steps = np.arange(POINTS, dtype=np.int64) * interval
    total = POINTS * interval
    warmup = int(0.02 * total)
    after = np.clip((steps - warmup) / (total - warmup), 0.0, 1.0)
    lr = np.minimum(1.0, (steps + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + np.cos(math.pi * after)))
    seen = np.cumsum(lr) * interval
    level = 2.0 + 8.0 * (1.0 + seen / (0.01 * total)) ** -0.5
    level *= 1.0 - 0.06 * np.where(steps >= warmup, 1.0 - lr, 0.0)
    phi = 0.6
    ar = lfilter([1.0], [1.0, -phi], rng.standard_normal(POINTS) * math.sqrt(1 - phi * phi))
    noise = math.sqrt(0.5) * ar + math.sqrt(0.5) * rng.standard_normal(POINTS)
    first = int(onset_frac * POINTS)
    onset, length = int(steps[first]), int(steps[-1] - steps[first])
    x = np.clip((steps - onset) / length, 0.0, 1.0)
    loss = level * (1.0 + sigma * noise) + rise * level * x**2
    frame = pl.DataFrame({"step": steps, "loss": loss, "lr": 3e-4 * lr})
    return frame, onset, length


def divergence(frame: pl.DataFrame):
    found = [f for f in analyze(frame).findings if f.code == "divergence"]
    assert found, "the ramp was not found"
    return found[0]


@pytest.mark.parametrize("interval", [1, 100])
@pytest.mark.parametrize("rise", [0.25, 0.5])
def test_a_ramp_starting_mid_decay_is_dated_within_five_percent(interval: int, rise: float):
    frame, onset, length = cosine_lm_run(30 + interval + int(100 * rise), interval, rise, 0.85)
    f = divergence(frame)
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


def test_the_finding_says_which_starts_fit_as_well() -> None:
    frame, _, _ = cosine_lm_run(41, 1, 0.5, 0.8)
    f = divergence(frame)
    evidence = f.to_dict()["evidence"]
    lo, hi = evidence["onset_range_steps"]
    first, last = evidence["onset_fit_steps"]
    assert first <= lo <= f.step <= hi <= last
    if lo < hi:
        assert f"a rise from any step in {lo}-{hi} fits as well" in f.message
