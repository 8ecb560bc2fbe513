"""The spike rule's noise in a sparse log: pooled from successive differences over many
windows' worth of points (issue 36: a window of ten points holds no std worth the name)."""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.detect.autocorr import NoiseMemory


def pooled_sigma(
    loss: np.ndarray,
    points: int,
    memory: NoiseMemory,
    cut: np.ndarray | None = None,
) -> np.ndarray:
    """The loss noise before each point, from successive differences over `points` points.

    A 100-step window of a log written every 10 steps holds 10 points: its std
    is off by about 25% either way, and a high draw hides a real bump (a +5%
    three-point bump at 5 sigma was missed one time in five). Pooling many
    windows makes the estimate steady; taking it from differences
    (Var[x[i] - x[i-1]] = 2 sigma^2 (1 - rho_1), rho_1 the noise's lag-1
    autocorrelation) keeps the curve's own slope out of it (the variance leaves out
    the mean change, the fall), which a std over that many steps would count as noise.
    Neighbours that move together differ less than the noise is wide: without the
    (1 - rho_1) the sigma of AR(1)-like noise came out up to a quarter too small, and
    its wanders passed for bumps. A level change's own step (`cut`: the changes' first
    rows) is no noise. Only points before t count, as for the window's mean.

    NaN under `points` // 2 differences.
    """
    finite = np.where(np.isfinite(loss), loss, np.nan)
    step_change = np.concatenate(([np.nan], np.diff(finite)))
    if cut is not None:
        step_change[cut[(cut >= 0) & (cut < step_change.size)]] = np.nan
    change = pl.Series(step_change).fill_nan(None).shift(1)
    least = max(2, points // 2)
    variance = change.rolling_var(points, min_samples=least).fill_null(np.nan).to_numpy()
    return np.sqrt(variance / (2.0 * memory.difference_share))
