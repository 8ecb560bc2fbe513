"""The rank check takes its per-row work a chunk of rows (or of whole ranks) at a time, and
keeps the per-step statistics in the step table instead of on every row (issue 15: a
64-rank log has tens of millions of rows). Shrinking the chunks to a handful of rows must
not change one number of the report, on logs with NaN, +-Inf, -0.0, an outlier, a silent
rank and a straggler."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import SourceInfo
from stabilitycli.detect.ranks import cohort as cohort_module
from stabilitycli.detect.ranks.check import find_rank_outliers
from stabilitycli.detect.ranks.cohort import STEP_STATS, build_cohort, rank_chunks
from stabilitycli.frame import RunData
from stabilitycli.ingest import read
from tests.conftest import FIXTURES

CHUNK_ROWS = (1, 5, 64)


def troubled_run(seed: int, *, ragged: bool = False) -> RunData:
    """Six ranks over 300 steps: rank 2 drifts high from step 120, rank 4 goes NaN once and
    +Inf once, rank 5 stops at step 200 and runs slow; -0.0 where the cohort sits at zero."""
    rng = np.random.default_rng(seed)
    n_ranks, n_steps = 6, 300
    loss = 2.0 + 0.05 * rng.standard_normal((n_ranks, n_steps))
    loss[2, 120:] += 0.6
    loss[4, 77] = np.nan
    loss[4, 150] = np.inf
    loss[:, 250:260] = -0.0
    speed = 1000.0 + 10.0 * rng.standard_normal((n_ranks, n_steps))
    speed[5, 40:] *= 0.5
    frame = pl.DataFrame(
        {
            "step": np.tile(np.arange(n_steps) * 2, n_ranks),
            "rank": np.repeat(np.arange(n_ranks), n_steps),
            "loss": loss.ravel(),
            "tokens_per_s": speed.ravel(),
        }
    ).filter(~((pl.col("rank") == 5) & (pl.col("step") > 400)))
    if ragged:  # ranks that miss steps: the sorted path, not the lockstep grid
        frame = frame.filter(pl.Series(rng.random(frame.height) > 0.05))
    return RunData(frame=frame, source=SourceInfo(path="memory", format="test"))


def report_with_chunks(run: RunData, metric: str, chunk_rows: int, monkeypatch) -> dict:
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
    report = find_rank_outliers(run, metric, Thresholds())
    picture = report.picture
    assert picture is not None
    return {
        "report": report.to_dict(),
        "deviation": picture.deviation.tobytes(),
        "ranks": picture.ranks.tolist(),
    }


@pytest.mark.parametrize("ragged", [False, True], ids=["lockstep", "ragged"])
@pytest.mark.parametrize("metric", ["loss", "tokens_per_s"])
def test_the_report_does_not_depend_on_the_chunk_size(ragged, metric, monkeypatch) -> None:
    run = troubled_run(seed=11, ragged=ragged)
    whole = report_with_chunks(run, metric, 1 << 20, monkeypatch)
    kinds = {o["kind"] for o in whole["report"]["outliers"]}
    # the fixture is not vacuous: the chunked paths have findings to agree on
    assert kinds >= ({"level", "nonfinite", "silent", "straggler"} if metric == "loss" else set())
    for chunk_rows in CHUNK_ROWS:
        assert report_with_chunks(run, metric, chunk_rows, monkeypatch) == whole


def test_a_real_fixture_reports_the_same_with_tiny_chunks(monkeypatch) -> None:
    run = read(FIXTURES / "ranks" / "two_outliers.jsonl.gz")
    whole = report_with_chunks(run, "loss", 1 << 20, monkeypatch)
    assert whole["report"]["outliers"]
    assert report_with_chunks(run, "loss", 7, monkeypatch) == whole


@pytest.mark.parametrize("ragged", [False, True], ids=["lockstep", "ragged"])
def test_the_cohort_does_not_depend_on_the_chunk_size(ragged, monkeypatch) -> None:
    frame = troubled_run(seed=3, ragged=ragged).frame
    whole = build_cohort(frame, "loss", 0.01, [], pool_points=5)
    for chunk_rows in CHUNK_ROWS:
        monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
        chunked = build_cohort(frame, "loss", 0.01, [], pool_points=5)
        assert chunked.steps.equals(whole.steps)
        assert chunked.whole().equals(whole.whole())


def test_a_row_gets_the_statistics_of_its_own_step() -> None:
    """`with_stats` by position is the join on t it replaces."""
    cohort = build_cohort(troubled_run(seed=5, ragged=True).frame, "loss", 0.01, [], pool_points=5)
    by_position = cohort.with_stats(cohort.whole(), *STEP_STATS)
    by_join = cohort.rows.join(
        cohort.steps.select("t", *STEP_STATS), on="t", how="left"
    ).with_columns(
        pl.col(name).fill_nan(None) for name in STEP_STATS if cohort.steps[name].dtype.is_float()
    )
    for name in STEP_STATS:
        got = by_position[name]
        want = by_join[name]
        if got.dtype.is_float():
            got = got.fill_nan(None)
        assert got.equals(want), name


@pytest.mark.parametrize("max_rows", [1, 3, 50, 10_000])
def test_rank_chunks_hold_whole_ranks_and_cover_every_row(max_rows) -> None:
    cohort = build_cohort(troubled_run(seed=1, ragged=True).frame, "loss", 0.01, [], pool_points=5)
    rank = cohort.rows["rank"].to_numpy()
    chunks = rank_chunks(cohort.rows, max_rows)
    assert chunks[0][0] == 0 and chunks[-1][1] == rank.size
    for (_, stop), (start, _) in pairwise(chunks):
        assert stop == start
        assert rank[start - 1] != rank[start]  # a cut falls between two ranks
    for start, stop in chunks:
        assert stop - start <= max_rows or np.unique(rank[start:stop]).size == 1


@pytest.mark.parametrize("chunk_rows", [1, 5, 64, 1 << 20])
def test_step_totals_of_lockstep_ranks_are_the_sums_over_every_row(chunk_rows, monkeypatch) -> None:
    """Taken a block of steps at a time, each step's sum keeps its bits: the same values in
    the same (rank) order, grouped the same way."""
    cohort = build_cohort(troubled_run(seed=9).frame, "loss", 0.01, [], pool_points=5)
    whole = cohort_module._totals(cohort.rows)
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
    blocked = cohort_module.step_totals(cohort.rows)
    assert blocked["t"].equals(whole["t"])
    assert np.array_equal(
        blocked["total"].to_numpy().view(np.int64), whole["total"].to_numpy().view(np.int64)
    )


@pytest.mark.parametrize("ragged", [False, True], ids=["lockstep", "ragged"])
def test_z_is_worked_out_for_the_rows_asked_for_and_not_held(ragged, monkeypatch) -> None:
    """Issue 40: the cohort keeps no z column (and, in lockstep, no pos column); a chunk's
    or a few rows' z and pos are those of the whole log, bit for bit."""
    frame = troubled_run(seed=4, ragged=ragged).frame
    if not ragged:  # rank 5 stops early: without it every rank logs every step
        frame = frame.filter(pl.col("rank") < 5)
    cohort = build_cohort(frame, "loss", 0.01, [], pool_points=5)
    assert "z" not in cohort.rows.columns
    assert ("pos" in cohort.rows.columns) is ragged
    whole = cohort.whole()
    t = cohort.steps["t"].to_numpy()
    assert np.array_equal(t[whole["pos"].to_numpy()], whole["t"].to_numpy())
    z = whole["z"].to_numpy()
    x, med, sigma = (
        whole["x"].to_numpy(),
        cohort.per_step("med")[whole["pos"].to_numpy()],
        cohort.per_step("sigma")[whole["pos"].to_numpy()],
    )
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        assert np.array_equal((x - med) / sigma, z, equal_nan=True)
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", 7)
    pieces = pl.concat(cohort.part(start, stop) for start, stop in rank_chunks(cohort.rows, 7))
    assert pieces.equals(whole)
    picked = np.array([0, 3, 299, 1000, cohort.rows.height - 1])
    assert cohort.take(picked).equals(whole[picked])
