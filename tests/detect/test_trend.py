"""The vectorised Mann-Kendall scan equals the textbook double loop."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli.detect.trend import bin_medians, mann_kendall_windows


def naive_z(values: np.ndarray, m: int) -> np.ndarray:
    out = []
    for start in range(values.size - m + 1):
        w = values[start : start + m]
        s = sum(np.sign(w[q] - w[p]) for p in range(m) for q in range(p + 1, m))
        var = m * (m - 1) * (2 * m + 5) / 18.0
        out.append((s - np.sign(s)) / np.sqrt(var))
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=3, max_size=40), st.integers(3, 12))
def test_vectorised_matches_naive(values, m) -> None:
    x = np.array(values)
    if x.size < m:
        return
    np.testing.assert_allclose(mann_kendall_windows(x, m), naive_z(x, m), atol=1e-9)


def test_rising_series_is_significant_and_noise_is_not() -> None:
    rng = np.random.default_rng(0)
    assert mann_kendall_windows(np.arange(30.0), 30)[0] > 5
    noise = rng.standard_gamma(2.0, 2000)
    assert np.abs(mann_kendall_windows(noise, 50)).max() < 4.5


def test_bins_keep_a_short_tail() -> None:
    binned = bin_medians(np.arange(10), np.arange(10.0), 4)
    assert binned.values.tolist() == [1.5, 5.5, 8.5]
    assert binned.steps.tolist() == [0, 4, 8] and binned.end_steps.tolist() == [3, 7, 9]
