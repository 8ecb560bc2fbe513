"""Events in a warmup whose fall quickens, judged with the LR's plan (issue 36).

While the LR climbs, the loss falls with the LR-weighted step count, faster as the LR
grows. A trailing window inside the warmup (or ending just after its peak) then sees its
later half fall faster than the whole, the shape the spike rule otherwise refuses as a
fall to read a level from (a memorised batch served again and again quickens a fall too).
Where the LR series shows a warmup (`lr_plan`), the quickening is the LR's doing: the
point is judged against the local level of the fall, not the trailing mean that lags it.

The runs are the LM benchmark's own (benchmarks/_dq_lm_synth.py: power-law fall in the
LR-weighted steps, AR(1) plus skewed batch noise), written by pandas as CSV into tmp_path.
Each event case was missed before (a blip at the onset, or nothing).
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from stabilitycli.detect.level import planned_fall_rows
from stabilitycli.detect.lr_plan import LrPlan
from tests.detect._lm_benchmark_runs import alarms, write_csv

POINTS = 4000
SIGMA = 0.01


def test_rows_planned_are_the_warmup_and_a_window_after_its_peak():
    steps = np.array([0, 50, 100, 150, 200, 250])
    warmup = LrPlan(warmup_end_step=100, warmup_peak=3e-4)
    assert planned_fall_rows(steps, warmup, 100).tolist() == [True] * 5 + [False]
    assert planned_fall_rows(steps, LrPlan(), 100) is None
    assert planned_fall_rows(steps, None, 100) is None


@pytest.mark.parametrize(
    ("kind", "place", "every", "seed"),
    [
        # an 8 sigma shift half-way through a 17,500-step warmup logged every 100 steps
        ("shift", "warmup", 100, 1340),
        ("shift", "warmup", 10, 1505),
        # a 3-point 8 sigma bump late in the warmup, logged every 100
        ("bump3pt", "warmup", 100, 7356),
        # a shift 4 points after the LR's peak, logged every 10
        ("shift", "schedule", 10, 11975),
        # logged every 100 the window's last quarter is five points: their mean lags a
        # fall that quickens by 2-3 points' worth, the trend read at t does not
        ("bump3pt", "schedule", 100, 10108),
        ("bump10pt", "warmup", 100, 6111),
        ("shift", "schedule", 100, 5636),
    ],
)
def test_an_event_where_the_warmup_fall_quickens_is_a_spike(
    tmp_path, synth, kind, place, every, seed
):
    run = synth.event_lm(kind, 8 * SIGMA, place, POINTS, every, SIGMA, np.random.default_rng(seed))
    result = analyze(write_csv(tmp_path / "run.csv", run.frame))
    onset = run.truth.onset
    found = [f for f in alarms(result) if f.code == "spike" and abs(f.step - onset) <= 2 * every]
    assert found, [f.message for f in result.findings]
    assert found[0].evidence["baseline_basis"] == "local-level"


@pytest.mark.parametrize("every", [10, 100])
@pytest.mark.parametrize("shape", ["cosine", "wsd", "epochs"])
def test_a_healthy_warmup_with_epoch_drops_stays_quiet(tmp_path, synth, shape, every):
    for seed in range(3):
        rng = np.random.default_rng(1000 * seed + every)
        run = synth.healthy_lm(shape, POINTS, every, SIGMA, rng)
        result = analyze(write_csv(tmp_path / f"run{seed}.csv", run.frame))
        assert not alarms(result), [f.message for f in alarms(result)]
