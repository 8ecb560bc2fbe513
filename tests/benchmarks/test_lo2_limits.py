"""The LO2 oracle's ramp fit (benchmarks/_lo2_limits.py, issue #36).

Its prefix-sum scoring of every (onset, end) pair is checked against the same
least-squares fit built point by point, prewhitened and plain."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def lo2():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_lo2_limits")
    finally:
        sys.path.remove(str(BENCH))


def _direct_onset(y, phi, starts, ends):
    """The best onset of y ~ b * g (b > 0) with g built in full for every pair."""
    i = np.arange(y.size)
    best_score, best_start = -np.inf, None
    for start in starts:
        for end in ends[ends > start]:
            g = np.clip((i - start) / (end - start), 0.0, 1.0) ** 2
            gw, yw = g[1:] - phi * g[:-1], y[1:] - phi * y[:-1]
            gy = gw @ yw
            if gy > 0 and gy * gy / (gw @ gw) > best_score:
                best_score, best_start = gy * gy / (gw @ gw), int(start)
    return best_start


@pytest.mark.parametrize("phi", [0.0, 0.6])
def test_prefix_sum_fit_matches_the_fit_built_point_by_point(lo2, phi):
    rng = np.random.default_rng(3)
    n = 240
    i = np.arange(n)
    y = 0.03 * rng.standard_normal(n) + 0.1 * np.clip((i - 120) / 90, 0.0, 1.0) ** 2
    starts, ends = np.arange(80, 170), np.arange(100, n)
    assert lo2.quadratic_ramp_onset(y, phi, starts, ends) == _direct_onset(y, phi, starts, ends)
    last = np.array([n - 1])
    assert lo2.quadratic_ramp_onset(y, phi, starts, last) == _direct_onset(y, phi, starts, last)


def test_noise_free_ramp_is_dated_exactly(lo2):
    n, onset = 500, 310
    i = np.arange(n)
    y = 0.25 * np.clip((i - onset) / (n - 1 - onset), 0.0, 1.0) ** 2
    errors = lo2.ramp_errors(y, 0.5, onset)
    assert errors == {name: 0.0 for name in lo2.ORACLES}
