"""LO2's oracles not told the curve (benchmarks/_lo2_family.py, issue #36).

The family oracle, given a run without noise, dates its onset exactly (the product
form, its anneal's gain fitted on a grid, within the tolerance); the scan
over every (onset, end) pair with a basis projected out agrees with the same fit
built point by point."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_lo2_family"), importlib.import_module("_dq_lm_synth")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("place", ["mid", "decay"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_family_oracle_dates_a_noise_free_ramp_exactly(bench, place, seed):
    family, synth = bench
    run = synth.event_lm("ramp", 0.25, place, 800, 10, 0.0, np.random.default_rng(seed))
    steps = run.frame["step"].to_numpy()
    onset = int(np.searchsorted(steps, run.truth.onset))
    errors = family.family_errors(run, onset)
    assert {k: v for k, v in errors.items() if k.startswith("family")} == {
        f"family_{length}_{fit}": 0.0 for length in ("told", "free") for fit in ("gls", "ols")
    }
    assert errors["gain_free_gls"] == 0.0
    # the product form's gain is fitted to a grid's golden-section precision: near, on time
    assert abs(errors["anneal_told_gls"]) <= 0.05 and abs(errors["anneal_free_gls"]) <= 0.05


def _direct_pair(y, basis, phi, starts, ends):
    """The best (start, end) of y ~ basis c + b g (b > 0), each fit built in full."""
    i = np.arange(y.size)
    yw = y[1:] - phi * y[:-1]
    best_sse, best = np.inf, None
    for start in starts:
        for end in ends[ends > start]:
            g = np.clip((i - start) / (end - start), 0.0, 1.0) ** 2
            design = np.column_stack([basis, g])
            design = design[1:] - phi * design[:-1]
            coef = np.linalg.lstsq(design, yw, rcond=None)[0]
            sse = float(np.sum((yw - design @ coef) ** 2))
            if coef[-1] > 0 and sse < best_sse - 1e-12:
                best_sse, best = sse, (int(start), int(end))
    return best


@pytest.mark.parametrize("phi", [0.0, 0.6])
def test_pair_scan_with_a_basis_matches_the_fit_built_point_by_point(bench, phi):
    family, _ = bench
    rng = np.random.default_rng(5)
    n = 160
    i = np.arange(n, dtype=float)
    basis = np.column_stack([np.ones(n), i / n, (1 + i / 20) ** -0.5])
    y = basis @ [1.0, -0.2, 0.5] + 0.02 * rng.standard_normal(n)
    y += 0.1 * np.clip((i - 90) / 60, 0.0, 1.0) ** 2
    starts, ends = np.arange(60, 120), np.arange(70, n, 3)
    level = np.ones(n)
    found = family._scan(y, basis, level, phi, starts, ends)
    assert found == _direct_pair(y, basis, phi, starts, ends)
