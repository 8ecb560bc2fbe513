"""Accelerating divergences on an LM-shaped curve with its LR logged (#36): the decay under
the rise runs on the LR-weighted step count and the anneal scales with the level, so the
onset is dated within 5% of the rise's length at every 1 and every 100 steps."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from stabilitycli.detect.divergence_decay import lr_clock
from tests.detect._ramp_curves import lr_power_level, mixed_ar_noise, rise_from

POINTS = 4000
PEAK_LR = 3e-4


def lm_run(
    seed: int, interval: int, rise: float, onset_frac: float, sigma: float = 0.01
) -> tuple[pl.DataFrame, int, int]:
    """Warmup over 2% of the run, cosine to 10% of the peak; the loss falls as a power law in
    the LR-weighted step count and anneals down by up to 6% of its level as the LR decays;
    AR(1) noise (lag-1 0.6) mixed with independent noise; a rise of `rise` of the level
    growing as x^2 from `onset_frac` of the run to its end. Returns the frame, the onset
    step and the rise's length in steps."""
    rng = np.random.default_rng(seed)
    steps = np.arange(POINTS, dtype=np.int64) * interval
    total = POINTS * interval
    warmup = int(0.02 * total)
    after = np.clip((steps - warmup) / (total - warmup), 0.0, 1.0)
    lr = (
        PEAK_LR * np.minimum(1.0, (steps + 1) / warmup) * (0.1 + 0.45 * (1 + np.cos(np.pi * after)))
    )
    level = lr_power_level(steps, lr, PEAK_LR, warmup, lr.max())
    noise = mixed_ar_noise(rng, POINTS, phi=0.6)
    onset, length, x = rise_from(steps, int(onset_frac * POINTS))
    loss = level * (1.0 + sigma * noise) * (1.0 + rise * x**2)
    return pl.DataFrame({"step": steps, "loss": loss, "lr": lr}), onset, length


def divergence(frame: pl.DataFrame):
    found = [f for f in analyze(frame).findings if f.code == "divergence"]
    assert found, "the rise was not found"
    return found[0]


@pytest.mark.parametrize(
    ("rise", "onset_frac", "interval", "seed"),
    [
        (0.25, 0.4, 1, 22),
        (0.5, 0.5, 1, 22),
        (0.25, 0.4, 100, 23),
        (0.5, 0.6, 100, 24),
    ],
)
def test_an_accelerating_rise_on_a_cosine_lm_curve_is_dated_within_five_percent(
    rise: float, onset_frac: float, interval: int, seed: int
) -> None:
    frame, onset, length = lm_run(seed, interval, rise, onset_frac)
    f = divergence(frame)
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


def test_the_finding_names_the_trend_carried_under_the_rise() -> None:
    frame, _, _ = lm_run(22, 1, 0.5, 0.5)
    f = divergence(frame)
    fit = f.to_dict()["evidence"]["onset_fit"]
    assert "(a line, the decay fitted before it in LR-weighted steps, the LR" in fit
    assert fit in f.message


def test_a_healthy_lm_curve_with_its_lr_has_no_divergence() -> None:
    for interval, seed in ((1, 31), (100, 32)):
        frame, _, _ = lm_run(seed, interval, 0.0, 0.5)
        result = analyze(frame)
        assert not [f for f in result.findings if f.code in ("divergence", "plateau")]


def test_the_lr_clock_counts_steps_at_the_peak_lr_and_fewer_below_it() -> None:
    steps = np.array([0, 10, 20, 30, 40])
    lr = np.array([0.0, 1.0, 2.0, 2.0, 1.0])
    # each point adds its LR over the peak times the gap since the point before
    assert lr_clock(steps, lr).tolist() == [0.0, 5.0, 15.0, 25.0, 30.0]
    assert lr_clock(steps, np.zeros(5)).tolist() == steps.tolist()
