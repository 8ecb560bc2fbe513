"""Loss curves shaped like LM training, for the noise tests (#36).

A warmup's fast fall, then a cosine or a warmup-stable-decay (WSD) schedule whose
cooldown falls faster again; the noise is multiplicative, an AR(1) part (memory
`phi`) mixed with independent, right-skewed batch noise (gamma, as mini-batch losses
are), as real LM runs log it.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """Unit-variance AR(1) noise: x[i] = phi * x[i-1] + e[i]."""
    shocks = rng.standard_normal(n) * np.sqrt(1.0 - phi * phi)
    out = np.empty(n)
    out[0] = rng.standard_normal()
    for i in range(1, n):  # a test generator: a few thousand points
        out[i] = phi * out[i - 1] + shocks[i]
    return out


def lm_level(steps: np.ndarray, total: int, schedule: str) -> np.ndarray:
    """The noise-free curve: a power-law fall, then a cosine's slow descent or WSD's
    stable stretch and cooldown over the last 15%."""
    t = steps.astype(float)
    level = 2.3 + 8.5 * (1.0 + t / (0.01 * total)) ** -0.6
    if schedule == "cosine":
        return level - 0.12 * (1.0 - np.cos(np.pi * t / total)) / 2.0
    cooldown = np.clip((t - 0.85 * total) / (0.15 * total), 0.0, 1.0)
    return level - 0.15 * cooldown * cooldown


def lm_run(
    seed: int,
    points: int,
    *,
    phi: float,
    noise: float = 0.02,
    ar_share: float = 0.7,
    schedule: str = "cosine",
    every: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, level, loss): `noise` is the noise's std as a fraction of the level, of
    which `ar_share` of the variance is AR(1) and the rest gamma(4) batch noise."""
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64) * every
    level = lm_level(steps, points * every, schedule)
    skewed = (rng.standard_gamma(4.0, points) - 4.0) / 2.0
    unit = np.sqrt(ar_share) * ar1(rng, points, phi) + np.sqrt(1.0 - ar_share) * skewed
    return steps, level, level * (1.0 + noise * unit)


def frame(steps: np.ndarray, loss: np.ndarray, **columns: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"step": steps, "loss": loss, **columns})
