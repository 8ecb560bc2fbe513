"""The onset of an accelerating divergence on a falling training curve (#36): dated by a fit
of the rise's whole shape, within 5% of the rise's length, and said how it was dated."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from tests.detect._ramp_curves import mixed_ar_noise, rise_from

POINTS = 4000


def falling_run(
    seed: int,
    interval: int = 1,
    rise: float = 0.0,
    length_frac: float = 0.5,
    sigma: float = 0.01,
    power: float = 2.0,
) -> tuple[pl.DataFrame, int, int]:
    """A power-law training curve with AR(1) noise (lag-1 0.5) and, when `rise` > 0, a
    rise of `rise` of the level growing as x^power (x the fraction of the rise's length) from
    its onset to the end of the log. Returns the frame, the onset step and the length."""
    rng = np.random.default_rng(seed)
    steps = np.arange(POINTS, dtype=np.int64) * interval
    t = steps / interval
    level = 2.0 + 3.0 * (1.0 + t / 300.0) ** -0.5
    noise = mixed_ar_noise(rng, POINTS, phi=0.5)
    onset, length, x = rise_from(steps, int((1 - length_frac) * POINTS))
    loss = level * (1.0 + sigma * noise) + rise * level * x**power
    return pl.DataFrame({"step": steps, "loss": loss}), onset, length


def divergences(frame: pl.DataFrame) -> list:
    result = analyze(frame)
    return [f for f in result.findings if f.code in ("divergence", "plateau")]


@pytest.mark.parametrize(
    ("rise", "length_frac", "interval", "seed"),
    [
        (0.25, 0.5, 1, 1),
        (0.5, 0.5, 10, 2),
        (0.25, 0.2, 1, 3),
        (0.5, 0.15, 100, 4),
    ],
)
def test_accelerating_ramp_onset_within_five_percent_of_its_length(
    rise: float, length_frac: float, interval: int, seed: int
) -> None:
    frame, onset, length = falling_run(seed, interval, rise, length_frac)
    found = divergences(frame)
    assert found, "the ramp was not found"
    f = found[0]
    assert f.code == "divergence"
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


def test_the_finding_says_how_the_onset_was_dated() -> None:
    frame, _, _ = falling_run(5, 1, 0.5, 0.5)
    f = divergences(frame)[0]
    evidence = f.to_dict()["evidence"]
    assert evidence["onset_fit"].startswith("onset fitted: the loss rises")
    assert evidence["onset_power"] in (1, 2, 3)
    first, last = evidence["onset_fit_steps"]
    assert first < f.step <= last == int(frame["step"][-1])
    assert evidence["onset_fit"] in f.message
    assert f"over steps {first}-{last}" in f.message


def test_a_cubic_ramp_is_dated_too() -> None:
    frame, onset, length = falling_run(6, 10, 0.5, 0.4, power=3.0)
    f = divergences(frame)[0]
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


def test_a_straight_ramp_keeps_the_straight_ramp_fit() -> None:
    """The power fit dates only a rise that accelerates: a straight one is the ramp fit's."""
    frame, onset, length = falling_run(7, 1, 0.25, 0.5, power=1.0)
    f = divergences(frame)[0]
    assert "onset_fit" not in f.to_dict()["evidence"]
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


@pytest.mark.parametrize(("interval", "seed"), [(1, 11), (10, 12), (100, 13)])
def test_a_healthy_falling_curve_has_no_divergence(interval: int, seed: int) -> None:
    frame, _, _ = falling_run(seed, interval, rise=0.0)
    assert divergences(frame) == []
    assert analyze(frame).verdict.code == "healthy"
