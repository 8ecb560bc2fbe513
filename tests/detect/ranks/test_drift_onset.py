"""#36 item 5: a rank drifting away linearly gets its onset where the drift began, and the
finding names the test that decided it, with that test's own statistic and bar."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import SourceInfo
from stabilitycli.detect.ranks.check import find_rank_outliers
from stabilitycli.detect.ranks.decision import CUSUM, ONSET_CHANGE_POINT, ONSET_RAMP, PERSISTENCE
from stabilitycli.detect.ranks.drift import ramp_onset
from stabilitycli.frame import RunData

SPREAD = 0.05  # per-step spread across ranks, as a fraction of the level


def cohort(
    seed: int,
    *,
    ranks: int = 8,
    steps: int = 4000,
    every: int = 1,
    bad: int = 3,
    start: int = 2500,
    length: int = 1500,
    size: float = 4.0,
    shape: str = "ramp",
) -> pd.DataFrame:
    """A loss falling toward 2.0, each rank its own Gaussian draw; rank `bad` climbs by `size`
    per-step spreads over `length` steps from `start` (a ramp) or all at once (a step), and
    holds there."""
    rng = np.random.default_rng(seed)
    step = np.arange(0, steps, every)
    level = 2.0 + 3.0 * np.exp(-step / (0.05 * steps))
    values = level * (1.0 + SPREAD * rng.standard_normal((ranks, step.size)))
    if shape == "ramp":
        climb = np.clip((step - start) / length, 0.0, 1.0)
    else:
        climb = (step >= start).astype(float)
    values[bad] += size * SPREAD * level * climb
    return pd.DataFrame(
        {
            "step": np.tile(step, ranks),
            "rank": np.repeat(np.arange(ranks), step.size),
            "loss": values.ravel(),
        }
    )


def report(frame: pd.DataFrame):
    run = RunData(frame=pl.from_pandas(frame), source=SourceInfo(path="memory", format="test"))
    return find_rank_outliers(run, "loss", Thresholds())


def only_level(rep):
    level = [o for o in rep.outliers if o.kind == "level"]
    assert len(level) == 1, [o.message for o in rep.outliers]
    return level[0]


@pytest.mark.parametrize("seed", range(4))
def test_the_issue_drift_has_its_onset_at_the_change_point_not_halfway_up(seed) -> None:
    # #36: one of eight ranks drifting up linearly from step 2,500 (4 sigma by 3,999) was
    # reported from step 3,001; the target is within 10% of the drift's length (150 steps)
    o = only_level(report(cohort(seed)))
    assert o.rank == 3
    assert abs(o.onset_step - 2500) <= 150, o.onset_step
    assert o.onset_by == ONSET_RAMP


@pytest.mark.parametrize(
    ("ranks", "every", "start", "length", "size"),
    [(8, 1, 1200, 600, 6.0), (64, 1, 3000, 2000, 3.0), (64, 10, 2000, 3000, 6.0)],
)
def test_drifts_of_other_lengths_sizes_and_logging_intervals(
    ranks, every, start, length, size
) -> None:
    frame = cohort(
        5, ranks=ranks, every=every, start=start, length=length, size=size, steps=start + 2 * length
    )
    o = only_level(report(frame))
    assert o.rank == 3
    assert abs(o.onset_step - start) <= 0.1 * length, (o.onset_step, start)


def test_a_drift_downward_has_its_onset_where_it_began_too() -> None:
    o = only_level(report(cohort(2, size=-5.0, start=1500, length=1000, steps=3500)))
    assert o.value is not None and o.cohort_median is not None and o.value < o.cohort_median
    assert abs(o.onset_step - 1500) <= 100


def test_a_level_shift_keeps_its_cusum_onset_at_the_first_shifted_step() -> None:
    o = only_level(report(cohort(1, shape="step", start=1200, size=9.0, steps=2000)))
    assert o.onset_step == 1200
    assert o.onset_by == ONSET_CHANGE_POINT


def test_the_cusum_decided_drift_names_its_test_statistic_and_bar() -> None:
    # the issue's message said "robust z 2.164": a median that reads as under any bar
    o = only_level(report(cohort(0)))
    thresholds = Thresholds()
    assert o.robust_z is not None and o.robust_z < thresholds.rank_z
    assert o.test == CUSUM
    assert o.test_bar == thresholds.rank_cusum_decide
    assert o.test_statistic is not None and o.test_statistic >= o.test_bar
    assert o.test_step is not None and o.onset_step < o.test_step <= 3999
    evidence = o.finding().evidence
    assert evidence["test"] == "cusum" and evidence["test_bar"] == 40.0
    assert "found by the CUSUM test" in o.message
    assert f"reached {o.test_statistic:.4g}" in o.message
    assert "(bar: 40)" in o.message


def test_a_persistent_shift_names_the_persistence_test_and_its_run() -> None:
    o = only_level(report(cohort(1, shape="step", start=1200, size=9.0, steps=2000)))
    assert o.test == PERSISTENCE
    assert o.test_bar == Thresholds().rank_persist_steps
    # its first run over the bar (one step back in line tolerated): at least the bar's 10
    # steps, the bar met at its 10th
    assert o.test_statistic is not None and o.test_statistic >= 10
    assert o.test_step is not None and 1209 <= o.test_step <= 1230
    assert "found by the persistence test: |robust z| >= 6 on a run of" in o.message


def test_ramp_onset_on_clean_shapes() -> None:
    steps = np.arange(400)
    ramp = np.clip((steps - 150) / 200.0, 0.0, None) * 4.0
    assert ramp_onset(ramp, steps, 399, 1.0, clip=6.0) == 151  # the first row above the level
    jump = np.where(steps >= 150, 4.0, 0.0)
    assert ramp_onset(jump, steps, 399, 1.0, clip=6.0) is None  # a level shift is no ramp
    assert ramp_onset(-ramp, steps, 399, 1.0, clip=6.0) is None  # climbing the other way


def test_stab_ranks_and_analyze_agree_on_a_drift_and_name_the_test(cli, tmp_path) -> None:
    path = tmp_path / "drift.csv"
    cohort(0).to_csv(path, index=False)  # pandas wrote it, as a user's script would
    ranks = cli("ranks", path, "--format", "json")
    assert ranks.exception is None or isinstance(ranks.exception, SystemExit)
    outlier = json.loads(ranks.stdout)["outliers"][0]
    analyzed = cli("analyze", path, "--format", "json")
    assert analyzed.exception is None or isinstance(analyzed.exception, SystemExit)
    finding = next(
        f for f in json.loads(analyzed.stdout)["findings"] if f["code"] == "rank-outlier"
    )
    assert finding["step"] == outlier["onset_step"]
    assert abs(outlier["onset_step"] - 2500) <= 150
    assert outlier["test"] == finding["evidence"]["test"] == "cusum"
    assert outlier["test_bar"] == finding["evidence"]["test_bar"] == 40
    assert outlier["onset_by"] == "ramp-fit"
    terminal = cli("ranks", path).stdout
    assert "CUSUM" in terminal and "≥40" in terminal
    markdown = cli("analyze", path, "--format", "markdown").stdout
    assert "found by the CUSUM test" in markdown


@pytest.mark.parametrize("seed", range(4))
def test_ramp_fit_is_the_same_a_block_of_rows_at_a_time(seed, monkeypatch) -> None:
    """The fit's candidate rows go a block at a time: no block size moves the best one."""
    from stabilitycli.detect.ranks import drift

    rng = np.random.default_rng(seed)
    # 1,000 rows: a block of one row walks them one Python pass each (3,000 took ~25 s)
    steps = np.arange(1000)
    z = rng.standard_normal(steps.size)
    z[600:] += np.linspace(0.0, 4.0, steps.size - 600)
    found = {}
    for rows in (1, 7, 256, 1 << 20):
        monkeypatch.setattr(drift, "_BLOCK_ROWS", rows)
        t = steps / steps[-1]
        fit = drift._best_ramp(np.clip(z, -6.0, 6.0), t)
        found[rows] = (fit.row, fit.rss, fit.climb, ramp_onset(z, steps, 999, 1.0, clip=6.0))
    assert len(set(found.values())) == 1, found
    assert abs(next(iter(found.values()))[0] - 600) <= 30  # the ramp's start, not any row
