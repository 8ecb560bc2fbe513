"""A +25% accelerating rise in the middle of a WSD-shaped LM run at 3% noise (#36, LO2).

The first round of the power fit carries on a decay fitted up to the straight ramp's
start, which on an accelerating rise is late (two fifths of the rise's length and
more): that decay has taken the rise's first part in, so a straight rise fits best
and the fit used to give up, leaving the late ramp start as the onset. The next
round refits the decay before the best accelerating start, and dates the rise
within 5% of its length."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from tests.detect._ramp_curves import lr_power_level, mixed_ar_noise, rise_from

POINTS = 4000
PEAK_LR = 3e-4
SIGMA = 0.03


def wsd_run(
    seed: int, interval: int, rise: float, onset_frac: float
) -> tuple[pl.DataFrame, int, int]:
    """Warmup over 3% of the run, a constant LR, then a linear cooldown to 0 over the last
    17%; the loss falls as a power law in the LR-weighted step count and anneals down by up
    to 6% of its level in the cooldown; noise of 3% of the level, half AR(1) (lag-1 0.55),
    half independent; a rise of `rise` of the level growing as x^2 from `onset_frac` of the
    run to its end. Returns the frame, the onset step and the rise's length in steps."""
    rng = np.random.default_rng(seed)
    steps = np.arange(POINTS, dtype=np.int64) * interval
    total = POINTS * interval
    warmup, cooldown = int(0.03 * total), int(0.83 * total)
    into = np.clip((steps - cooldown) / (total - cooldown), 0.0, 1.0)
    lr = PEAK_LR * np.minimum(1.0, (steps + 1) / warmup) * (1.0 - into)
    level = lr_power_level(steps, lr, PEAK_LR, warmup, PEAK_LR)
    noise = mixed_ar_noise(rng, POINTS, phi=0.55)
    onset, length, x = rise_from(steps, int(onset_frac * POINTS))
    loss = level * (1.0 + SIGMA * noise) + rise * level * x**2
    return pl.DataFrame({"step": steps, "loss": loss, "lr": lr}), onset, length


def divergences(frame: pl.DataFrame) -> list:
    return [f for f in analyze(frame).findings if f.code in ("divergence", "plateau")]


@pytest.mark.parametrize(("seed", "onset_frac"), [(5, 0.4), (11, 0.4), (0, 0.5), (7, 0.4)])
def test_a_mid_run_quarter_rise_at_three_percent_noise_is_dated_within_five_percent(
    seed: int, onset_frac: float
) -> None:
    # seeds 5 and 11 were dated at the straight ramp's start, 40% and 34% of the rise late
    frame, onset, length = wsd_run(seed, 10, 0.25, onset_frac)
    found = divergences(frame)
    assert found, "the rise was not found"
    assert abs(found[0].step - onset) <= 0.05 * length, (found[0].step, onset, length)
    assert found[0].evidence["onset_power"] == 2


@pytest.mark.parametrize("seed", [40, 41])
def test_a_healthy_wsd_lm_curve_at_three_percent_noise_has_no_divergence(seed: int) -> None:
    frame, _, _ = wsd_run(seed, 10, 0.0, 0.5)
    assert not divergences(frame)
