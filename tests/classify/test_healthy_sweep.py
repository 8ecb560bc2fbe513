"""Healthy runs across seeds, noise levels and log intervals stay healthy.

Sixty seeded runs from the fixture generator's loss model (heavy-tailed noise at
1%, 3% and 6% of the loss; logged every step or every 10 steps), judged as a
false-alarm rate rather than run by run (see MAX_FALSE_RUNS).
"""

from __future__ import annotations

import sys

import polars as pl

from stabilitycli import analyze
from stabilitycli.core.model import Severity
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from make_fixtures import base_run

SEEDS = range(60)
# The spike rule is a statistical test: on healthy heavy-tailed noise it has a false-alarm
# rate, and the target is at most 1 warning-level spike per 10^5 logged steps. Measured on
# 300 runs of this sweep (801,000 logged points): 5 runs with one recoverable spike each
# (0.62 per 10^5), all noise triples at 3.5-5 sigma in a row (gamma(2) noise, skewness 1.4).
# These 60 runs hold 162,000 logged points: about 1 false run expected at that rate, and
# more than 3 has a chance under 2% (Poisson), so 4 or more means the rate broke.
MAX_FALSE_RUNS = 3


def _sweep_run(seed: int) -> pl.DataFrame:
    noise = (0.01, 0.03, 0.06)[seed % 3]
    every = (1, 1, 10)[(seed // 3) % 3]
    run = base_run(1000 + seed, steps=3000 if every == 1 else 20000, noise=noise)
    return pl.DataFrame(run)[::every]


def test_healthy_runs_stay_healthy_within_the_false_alarm_rate() -> None:
    false_runs = []
    for seed in SEEDS:
        result = analyze(_sweep_run(seed))
        loud = [f for f in result.findings if f.severity >= Severity.WARNING]
        if result.verdict.code != "healthy" or loud:
            false_runs.append((seed, result.verdict.code, [f.message for f in loud]))
            # a false alarm on noise may be a recovered spike (a warning), never an error
            assert all(f.severity == Severity.WARNING for f in loud), false_runs[-1]
            assert result.verdict.code == "spike-recoverable", false_runs[-1]
    assert len(false_runs) <= MAX_FALSE_RUNS, false_runs
