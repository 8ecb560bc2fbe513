"""The rank cohort's per-step statistics are taken over the rows in step order (issue 15:
grouping rows already in order is several times faster than hashing the step); they must
be the numbers a plain group-by over the rows gives, on lockstep ranks and ragged ones."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.detect.ranks.cohort import _step_stats, build_cohort, step_major, step_totals


def rank_rows(steps_of_rank: dict[int, list[int]], seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ranks, steps = [], []
    for rank, steps_here in sorted(steps_of_rank.items()):
        ranks += [rank] * len(steps_here)
        steps += steps_here
    x = rng.normal(2.0, 0.1, size=len(steps))
    x[rng.random(x.size) < 0.1] = np.nan  # a cohort keeps NaN out of its statistics
    x[rng.random(x.size) < 0.05] = np.inf
    return pl.DataFrame({"rank": ranks, "step": steps, "t": steps, "x": x})


SHAPES = {
    "lockstep": {r: list(range(0, 40, 2)) for r in range(5)},
    "a rank misses a step": {r: [s for s in range(20) if (r, s) != (2, 7)] for r in range(4)},
    "same counts, other steps": {0: [0, 1, 2, 3], 1: [0, 1, 2, 4], 2: [1, 2, 3, 4]},
    "one rank": {0: list(range(10))},
}


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_step_major_holds_the_same_rows_in_step_order(shape) -> None:
    rows = rank_rows(SHAPES[shape])
    by_step = step_major(rows, with_rank=True)
    assert by_step["t"].is_sorted()
    assert step_major(rows).columns == ["t", "x"]
    key = ["t", "rank"]
    assert by_step.sort(key).equals(rows.select("rank", "t", "x").sort(key))


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_step_stats_in_step_order_are_the_hashed_group_by(shape) -> None:
    rows = rank_rows(SHAPES[shape], seed=3)
    fin = pl.col("x").is_finite()
    hashed = (
        rows.group_by("t")
        .agg(
            pl.col("x").filter(fin).median().alias("med"),
            pl.col("x").filter(fin).max().alias("hi"),
            pl.len().cast(pl.Int64).alias("n"),
            fin.sum().cast(pl.Int64).alias("n_fin"),
        )
        .sort("t")
    )
    assert _step_stats(step_major(rows), distinct_ranks=False).equals(hashed)
    ranks_per_step = rows.group_by("t").agg(pl.col("rank").n_unique().cast(pl.Int64)).sort("t")
    by_ranks = _step_stats(step_major(rows, with_rank=True), distinct_ranks=True)
    assert by_ranks["n"].equals(ranks_per_step["rank"].alias("n"))


def test_a_cohort_on_lockstep_ranks_is_the_cohort_the_sorting_path_gives(monkeypatch) -> None:
    """Lockstep ranks take the ranks x steps grid; sorting the same rows must give the same
    cohort."""
    from stabilitycli.detect.ranks import cohort

    frame = rank_rows({r: list(range(60)) for r in range(6)}, seed=5).drop("t")
    frame = frame.rename({"x": "loss"})
    fast = build_cohort(frame, "loss", 0.01, [], pool_points=5)
    monkeypatch.setattr(cohort, "lockstep_grid", lambda rows: None)
    sorted_path = build_cohort(frame, "loss", 0.01, [], pool_points=5)
    assert fast.steps.equals(sorted_path.steps)
    assert fast.whole().equals(sorted_path.whole())


def test_step_totals_sum_the_finite_values_of_each_step() -> None:
    rows = rank_rows({r: [0, 1, 2] for r in range(3)}, seed=7)
    totals = step_totals(rows)
    for t, total in zip(totals["t"].to_list(), totals["total"].to_list(), strict=True):
        x = rows.filter(pl.col("t") == t)["x"].to_numpy()
        assert total == pytest.approx(float(x[np.isfinite(x)].sum()))
