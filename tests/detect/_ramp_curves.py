"""The pieces the divergence-onset tests build their runs from (#36): LM-shaped levels,
the noise of real runs (AR(1) mixed with independent), and a rise from a given row."""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter


def mixed_ar_noise(rng: np.random.Generator, points: int, phi: float) -> np.ndarray:
    """Unit-variance noise, half AR(1) with lag-1 correlation `phi`, half independent."""
    ar = lfilter([1.0], [1.0, -phi], rng.standard_normal(points) * math.sqrt(1 - phi * phi))
    return math.sqrt(0.5) * ar + math.sqrt(0.5) * rng.standard_normal(points)


def lr_power_level(
    steps: np.ndarray, lr: np.ndarray, peak_lr: float, warmup_steps: int, anneal_peak: float
) -> np.ndarray:
    """A level falling as a power law in the LR-weighted step count, annealed down by up to
    6% of itself after warmup as the LR falls below `anneal_peak`."""
    interval = int(steps[1] - steps[0])
    weighted = np.cumsum(lr / peak_lr) * interval
    level = 2.0 + 8.0 * (1.0 + weighted / (0.01 * steps.size * interval)) ** -0.5
    level *= 1.0 - 0.06 * np.where(steps >= warmup_steps, 1.0 - lr / anneal_peak, 0.0)
    return level


def rise_from(steps: np.ndarray, first_row: int) -> tuple[int, int, np.ndarray]:
    """A rise from row `first_row` to the end of the log: its onset step, its length in
    steps, and each row's fraction of that length (0 before the onset)."""
    onset, length = int(steps[first_row]), int(steps[-1] - steps[first_row])
    return onset, length, np.clip((steps - onset) / max(length, 1), 0.0, 1.0)
