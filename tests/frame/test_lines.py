"""A run's file lines held as runs of a fixed stride (`frame.lines`): the same table back,
whatever the pattern, and at a few steps without the rest."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from stabilitycli.frame import lines as lines_module
from stabilitycli.frame.lines import SourceLines


def _table(steps, lines, ranks=None, dtype=pl.Int32) -> pl.DataFrame:
    columns = {"step": pl.Series(steps, dtype=pl.Int64)}
    if ranks is not None:
        columns["rank"] = pl.Series(ranks, dtype=pl.Int64)
    columns["source_line"] = pl.Series(lines, dtype=dtype)
    return pl.DataFrame(columns)


def _cases():
    rng = np.random.default_rng(3)
    steps = np.arange(5_000)
    yield "a line a step", _table(steps, steps + 1)
    # 8 ranks in lockstep, sorted by rank: each rank's lines climb by 8
    ranks, per_rank = np.repeat(np.arange(8), 500), np.tile(np.arange(500), 8)
    yield "lockstep ranks", _table(per_rank, per_rank * 8 + ranks + 1, ranks)
    # an eval line every 100 steps shifts every later line by one
    yield "eval lines", _table(steps, steps + 1 + steps // 100, dtype=pl.Int64)
    yield "no pattern", _table(steps, np.sort(rng.choice(10**6, steps.size, replace=False)))
    yield "one row", _table([7], [9])
    yield "two rows", _table([7, 8], [9, 30])


@pytest.mark.parametrize("case", [name for name, _ in _cases()])
@pytest.mark.parametrize("small_chunks", [False, True])
def test_the_same_table_comes_back(monkeypatch, case, small_chunks) -> None:
    if small_chunks:  # runs found across chunk edges
        monkeypatch.setattr(lines_module, "_CHUNK_ROWS", 7)
    for _, table in (c for c in _cases() if c[0] == case):
        held = SourceLines(table.clone(), "source_line")
        assert_frame_equal(held.frame(), table, check_exact=True)
        steps = [int(s) for s in table["step"].unique().sort().gather_every(97)]
        want = table.filter(pl.col("step").is_in(steps))
        assert_frame_equal(held.at_steps(steps), want, check_exact=True)


def test_a_patterned_log_keeps_runs_not_the_column() -> None:
    steps = np.arange(100_000)
    held = SourceLines(_table(steps, steps + 1), "source_line")
    assert held._lines is None and held._runs is not None and held._runs[0].size == 1
    scattered = np.sort(np.random.default_rng(0).choice(10**7, steps.size, replace=False))
    assert SourceLines(_table(steps, scattered), "source_line")._lines is not None
