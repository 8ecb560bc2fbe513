"""Issue 40: the lockstep shortcuts of the rank check against the general paths they stand
in for, bit for bit: the step table by numpy selection against polars' group-bys, the
CUSUM crossings with a rank's numbers broadcast against gathered, and the mean effect over
the steps from its baseline on against over every step."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.ranks import change
from stabilitycli.detect.ranks import cohort as cohort_module
from stabilitycli.detect.ranks.change import first_crossings
from stabilitycli.detect.ranks.check import explained_mean_shift, find_rank_outliers
from tests.detect.test_rank_cohort_chunks import troubled_run

# what a block of a lockstep log may hold besides plain numbers
KINDS = ["plain", "ties", "nan", "inf", "zeros"]


def grid(kind: str, n_ranks: int, n_steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_ranks, n_steps)) * 10.0 ** rng.integers(-3, 4) + rng.normal() * 5
    if kind == "ties":
        x = np.round(x)
    elif kind == "nan":
        x[rng.random(x.shape) < 0.02] = np.nan
    elif kind == "inf":
        x[rng.random(x.shape) < 0.02] = np.inf
    elif kind == "zeros":  # -0.0 and 0.0: equal, but printed apart
        x[rng.random(x.shape) < 0.2] = -0.0
        x[rng.random(x.shape) < 0.1] = 0.0
    x = pl.Series(x.ravel()).to_numpy()  # read-only, as a view of a log's column is
    return x.reshape(n_ranks, n_steps)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_ranks", [2, 3, 8, 33])
@pytest.mark.parametrize("chunk_rows", [40, 1 << 20])
def test_the_step_table_by_selection_is_the_group_bys_table(
    kind, n_ranks, chunk_rows, monkeypatch
) -> None:
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
    x = grid(kind, n_ranks, 97, seed=n_ranks)
    steps = np.arange(97, dtype=np.int64) * 3
    got = cohort_module._grid_step_stats(steps, x)
    monkeypatch.setattr(cohort_module, "_finite_block_stats", lambda steps, by_step: None)
    want = cohort_module._grid_step_stats(steps, x)
    assert got.schema == want.schema
    for name in want.columns:
        a, b = got[name].fill_null(-1), want[name].fill_null(-1)
        assert a.to_numpy().tobytes() == b.to_numpy().tobytes(), name


@pytest.mark.parametrize("seed", range(6))
def test_crossings_with_a_rank_numbers_broadcast_are_the_gathered_ones(seed) -> None:
    rng = np.random.default_rng(seed)
    n_ranks, per_rank = int(rng.integers(1, 20)), int(rng.integers(1, 300))
    z = rng.normal(size=(n_ranks, per_rank)) * 2.0
    shifted = rng.random(n_ranks) < 0.4
    z[shifted, int(rng.integers(0, per_rank)) :] += rng.normal(0.0, 4.0)
    z[rng.random(z.shape) < 0.05] = np.nan
    rank = np.repeat(np.arange(n_ranks) * 7, per_rank)
    for k, clip, bar in ((2.0, 6.0, 40.0), (0.5, 3.0, 5.0)):
        gathered = first_crossings(z.ravel(), rank, k=k, clip=clip, bar=bar)
        broadcast = first_crossings(
            z.ravel(), rank, k=k, clip=clip, bar=bar, rows_per_rank=per_rank
        )
        assert np.array_equal(gathered[0], broadcast[0])
        assert np.array_equal(gathered[1], broadcast[1])


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "sparse"])
def test_the_mean_effect_from_its_baseline_is_the_one_over_every_step(ragged) -> None:
    run = troubled_run(seed=4, ragged=ragged)
    if not ragged:
        run.frame = run.frame.filter(pl.col("rank") < 5)
    report = find_rank_outliers(run, "loss", Thresholds())
    # an onset past the first 50 steps: the baseline starts after the first step
    assert report.mean_effect is not None and report.mean_effect.baseline_steps[0] > 0
    every_step = explained_mean_shift(
        report, run.frame, baseline_points=Thresholds().rank_history_points
    )
    assert repr(report.mean_effect) == repr(every_step)  # NaN means compare as text


@pytest.mark.parametrize("seed", range(4))
def test_the_segment_bound_is_over_every_ranks_cusum(seed) -> None:
    """`_may_cross` skips a chunk only when no rank's CUSUM can reach the bar: its bound
    is over the CUSUM itself in each segment, either way, unjudged rows included."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n_ranks, per_rank = int(rng.integers(1, 6)), int(rng.integers(1, 400))
        z = rng.normal(size=(n_ranks, per_rank)) * rng.choice([0.5, 1.0, 3.0, 10.0])
        z[rng.random(z.shape) < rng.choice([0.0, 0.1])] = np.nan
        k, clip = float(rng.choice([0.0, 0.5, 2.0])), 6.0
        bars = []
        for sign in (1.0, -1.0):
            cusums = np.stack([change.cusum(sign * row, 1.0, k, clip) for row in z])
            bars.append(float(cusums.max()))
        unjudged = ~np.isfinite(z.ravel())
        # just under the highest CUSUM (it must be reached), and anywhere
        for bar in (max(bars) - 1e-9, float(rng.uniform(0.0, 2.0 * max(bars) + 1.0))):
            reached = max(bars) >= bar
            may = change._may_cross(
                z.ravel(), unjudged if unjudged.any() else None, per_rank, k=k, clip=clip, bar=bar
            )
            assert may or not reached


def test_a_chunk_of_healthy_ranks_skips_the_cusum_and_one_shifted_rank_does_not() -> None:
    rng = np.random.default_rng(7)
    z = rng.normal(size=(52, 2000))
    rank = np.repeat(np.arange(52), 2000)
    kwargs = {"k": 2.0, "clip": 6.0, "bar": 40.0}
    assert not change._may_cross(z.ravel(), None, 2000, **kwargs)
    z[13, 1500:] += 4.0  # 4 sigmas up: the CUSUM climbs ~2 a step from step 1500
    ranks, rows = first_crossings(z.ravel(), rank, rows_per_rank=2000, **kwargs)
    assert change._may_cross(z.ravel(), None, 2000, **kwargs)
    assert ranks.tolist() == [13]
    assert 13 * 2000 + 1500 <= rows[0] < 13 * 2000 + 1560


def test_a_second_metric_of_a_lockstep_frame_takes_its_grid_as_told() -> None:
    rng = np.random.default_rng(3)
    n_ranks, per_rank = 5, 40
    frame = pl.DataFrame(
        {
            "rank": np.repeat(np.arange(n_ranks), per_rank),
            "step": np.tile(np.arange(per_rank) * 10, n_ranks),
            "loss": rng.normal(2.0, 0.1, n_ranks * per_rank),
            "tokens_per_s": rng.normal(1000.0, 30.0, n_ranks * per_rank),
        }
    )
    loss = cohort_module.build_cohort(frame, "loss", 0.01, [], pool_points=51)
    assert loss.frame_grid is not None
    told = cohort_module.build_cohort(
        frame, "tokens_per_s", 0.01, [], pool_points=51, frame_grid=loss.frame_grid
    )
    found = cohort_module.build_cohort(frame, "tokens_per_s", 0.01, [], pool_points=51)
    assert told.per_rank == found.per_rank == per_rank
    assert told.rows.equals(found.rows) and told.steps.equals(found.steps)
    # rows that had to be sorted are not the frame's order: no grid to tell
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=1)
    assert cohort_module.build_cohort(shuffled, "loss", 0.01, [], pool_points=51).frame_grid is None
