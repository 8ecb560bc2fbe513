"""The mean over ranks per step (`frame.step_means`): polars' group-by mean to the bit on
a lockstep grid, polars' own group-by on anything else."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.frame import step_means
from stabilitycli.frame.step_means import _lockstep_steps, means_over_ranks


def _polars_means(frame: pl.DataFrame, metrics: list[str]) -> pl.DataFrame:
    return frame.group_by("step").agg([pl.col(c).mean() for c in metrics]).sort("step")


def _same_bits(ours: pl.DataFrame, theirs: pl.DataFrame) -> None:
    assert ours.schema == theirs.schema
    assert ours["step"].to_list() == theirs["step"].to_list()
    for name in ours.columns[1:]:
        a, b = ours[name].to_numpy(), theirs[name].to_numpy()
        same = (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))
        assert same.all(), f"{name}: {int((~same).sum())} steps differ"


def _grid(rng: np.random.Generator, n_ranks: int, steps: np.ndarray) -> pl.DataFrame:
    """A per-rank log sorted by rank, every rank at every step, values of every magnitude
    with infinities, NaN and sums that overflow."""
    shape = (n_ranks, steps.size)
    values = rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)
    pick = rng.random(shape)
    values[pick < 0.02] = np.inf
    values[(pick >= 0.02) & (pick < 0.04)] = -np.inf
    values[(pick >= 0.04) & (pick < 0.05)] = np.nan
    huge = (pick >= 0.05) & (pick < 0.08)
    values[huge] = rng.choice([1e308, -1e308, 1.7e308], int(huge.sum()))
    values[(pick >= 0.08) & (pick < 0.09)] = -0.0
    return pl.DataFrame(
        {
            "step": np.tile(steps, n_ranks),
            "rank": np.repeat(np.arange(n_ranks), steps.size),
            "loss": values.ravel(),
            "lr": np.abs(rng.standard_normal(values.size)) * 1e-4,
        }
    )


@pytest.mark.parametrize("seed", range(12))
def test_a_lockstep_grid_gives_polars_means_to_the_bit(seed) -> None:
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(2, 80))
    steps = np.cumsum(rng.integers(1, 50, 2000))
    frame = _grid(rng, n_ranks, steps)
    assert _lockstep_steps(frame, ["loss", "lr"]) is not None  # the matrix path
    _same_bits(means_over_ranks(frame, ["loss", "lr"]), _polars_means(frame, ["loss", "lr"]))


@pytest.mark.parametrize("block_steps", [1, 7, 256])
def test_blocks_of_steps_give_the_same_bits(block_steps, monkeypatch) -> None:
    """The sum goes a block of steps at a time: a block's edge changes no step's sum."""
    rng = np.random.default_rng(block_steps)
    frame = _grid(rng, 13, np.arange(1000))
    monkeypatch.setattr(step_means, "_BLOCK_STEPS", block_steps)
    _same_bits(means_over_ranks(frame, ["loss", "lr"]), _polars_means(frame, ["loss", "lr"]))


def test_an_infinity_stays_infinite_and_opposite_ones_make_nan() -> None:
    rows = [[1.0, np.inf, 2.0], [1e308, 1e308, -1e308], [np.inf, -np.inf, 1.0], [1.0, 1e100, 1.0]]
    by_rank = np.array(rows).T  # a rank a row, a step a column
    frame = pl.DataFrame(
        {
            "step": np.tile(np.arange(4), 3),
            "rank": np.repeat(np.arange(3), 4),
            "loss": by_rank.ravel(),
        }
    )
    ours = means_over_ranks(frame, ["loss"])["loss"].to_list()
    assert ours[:2] == [np.inf, np.inf] and np.isnan(ours[2])
    _same_bits(means_over_ranks(frame, ["loss"]), _polars_means(frame, ["loss"]))


def _not_a_grid() -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(5)
    grid = _grid(rng, 4, np.arange(0, 100, 10))
    return {
        "a rank missing a step": grid.filter(~((pl.col("rank") == 2) & (pl.col("step") == 50))),
        "ranks at different steps": grid.with_columns(
            pl.when(pl.col("rank") == 1)
            .then(pl.col("step") + 1)
            .otherwise(pl.col("step"))
            .alias("step")
        ),
        "not sorted by rank": grid.sort("step", maintain_order=True),
        "a step twice in a rank": grid.with_columns(
            pl.when(pl.col("step") == 20).then(10).otherwise(pl.col("step")).alias("step")
        ),
        "a null value": grid.with_columns(
            pl.when(pl.int_range(pl.len()) == 7).then(None).otherwise(pl.col("loss")).alias("loss")
        ),
        "an integer metric": grid.with_columns(pl.col("lr").cast(pl.Int64)),
        "one rank": grid.filter(pl.col("rank") == 0),
    }


@pytest.mark.parametrize("case", list(_not_a_grid()))
def test_anything_else_takes_polars_group_by(case) -> None:
    frame = _not_a_grid()[case]
    assert _lockstep_steps(frame, ["loss", "lr"]) is None
    _same_bits(means_over_ranks(frame, ["loss", "lr"]), _polars_means(frame, ["loss", "lr"]))
