"""Healthy runs across seeds, noise levels and log intervals stay healthy.

Sixty seeded runs from the fixture generator's loss model (heavy-tailed noise at
1%, 3% and 6% of the loss; logged every step or every 10 steps). Measured on
300 such runs: one false spike, a single 1.51x point at 6% gamma noise with a
10-point window, which meets the spec's large-spike bar (c) by the letter.
"""

from __future__ import annotations

import sys

import polars as pl
import pytest

from stabilitycli import analyze
from stabilitycli.model import Severity
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from make_fixtures import base_run

KNOWN_FALSE_SPIKE = pytest.mark.xfail(
    strict=True,
    reason="one point at 1.51x the trailing mean (z = 10) in 6% gamma noise logged every 10 steps: "
    "materiality (c) holds by the letter",
)
SEEDS = [pytest.param(s, marks=KNOWN_FALSE_SPIKE) if s == 35 else s for s in range(60)]


@pytest.mark.parametrize("seed", SEEDS)
def test_healthy_run_is_healthy(seed: int) -> None:
    noise = (0.01, 0.03, 0.06)[seed % 3]
    every = (1, 1, 10)[(seed // 3) % 3]
    run = base_run(1000 + seed, steps=3000 if every == 1 else 20000, noise=noise)
    frame = pl.DataFrame(run)[::every]
    result = analyze(frame)
    assert result.verdict.code == "healthy", result.verdict.summary
    assert not [f.message for f in result.findings if f.severity >= Severity.WARNING]
