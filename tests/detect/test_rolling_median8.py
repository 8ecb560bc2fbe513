"""The sorting network's trailing median of 8 points is polars' rolling median, bit for bit."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.detect.rolling_median8 import medians_ending_8, networked


@pytest.mark.parametrize("seed", range(8))
def test_network_median_is_polars_bits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(8, 100_000))
    values = rng.normal(size=size) * 10 ** rng.uniform(-5, 5, size) + rng.uniform(-3, 3)
    if seed % 2:  # ties: many windows hold equal values
        values = np.round(values, 1) + 0.05
    assert networked(values)
    least = int(rng.integers(1, 9))
    want = pl.Series(values).rolling_median(8, min_samples=least).fill_null(np.nan).to_numpy()
    assert medians_ending_8(values, least).tobytes() == want.tobytes()


def test_network_leaves_non_finite_and_zero_to_polars() -> None:
    values = np.linspace(1.0, 2.0, 50)
    assert networked(values)
    for odd in (np.nan, np.inf, 0.0, -0.0):
        changed = values.copy()
        changed[20] = odd
        assert not networked(changed)
