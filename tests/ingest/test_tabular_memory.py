"""The checks a table's steps go through on the way in, taken without whole-log copies,
say what the whole-column computations they replace say."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli import frame
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import ROW
from stabilitycli.ingest.tabular import tables as tabular


def whole_column_forward(table: pl.DataFrame, keys: list[str]) -> bool:
    """The check as it was written over whole columns."""
    forward = (pl.col("step").diff() > 0) & (pl.col(ROW).diff() > 0)
    for key in keys:
        forward |= pl.col(key).diff() != 0
    return bool(table.select(forward.all()).item())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 6)), min_size=1, max_size=60),
    st.booleans(),
    st.sampled_from([1, 2, 5, 1 << 20]),
)
def test_steps_only_forward_a_chunk_at_a_time(rows, with_rank, chunk_rows):
    ranks = sorted(r for r, _ in rows)  # each rank's rows together, as the caller orders them
    steps = np.cumsum([gap for _, gap in rows])
    table = pl.DataFrame(
        {"step": steps, ROW: pl.Series(np.arange(1, len(rows) + 1), dtype=pl.Int32)}
    )
    keys = []
    if with_rank:
        table = table.with_columns(pl.Series("rank", ranks, dtype=pl.Int64))
        keys = ["rank"]
    with mock.patch.object(frame, "_CHECK_ROWS", chunk_rows):
        got = frame._steps_only_forward(table, keys)
    assert got == whole_column_forward(table, keys)


def step_warnings(steps: pl.Series) -> list[str]:
    raw = pl.DataFrame({"_row": np.arange(1, steps.len() + 1), "step": steps})
    source = SourceInfo(path="t.parquet", format="tabular")
    tabular._step_order_warnings(raw, "step", source)
    return source.warnings


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.integers(0, 5000), st.integers(2**40, 2**62), st.integers(2**62, 2**63 - 1)),
        min_size=0,
        max_size=40,
    ),
    st.sampled_from([1, 3, 1 << 20]),
)
def test_sorted_whole_steps_warn_as_the_float_path_does(values, chunk_rows):
    steps = pl.Series("step", sorted(values), dtype=pl.Int64)
    with mock.patch.object(tabular, "_ORDER_CHUNK_ROWS", chunk_rows):
        got = step_warnings(steps)
    # a float column takes the general path, which casts the steps to floats itself
    assert got == step_warnings(steps.cast(pl.Float64))


def test_a_far_step_at_the_end_of_a_sorted_table_is_named() -> None:
    steps = pl.Series("step", [*range(100), 10**12], dtype=pl.Int64)
    assert tabular._sorted_whole_steps(steps)
    (warning,) = step_warnings(steps)
    assert warning.startswith("1 row(s) with a step far beyond the others (first at row 101")


def test_an_int128_step_column_takes_the_general_path() -> None:
    # numpy holds no 128-bit integers: a damaged table's Int128 steps are checked as floats
    steps = pl.Series("step", [0, 1, 2, 10**15], dtype=pl.Int128)
    assert not tabular._sorted_whole_steps(steps)
    assert step_warnings(steps) == step_warnings(steps.cast(pl.Float64))


def test_a_per_rank_table_is_handed_over_to_finalize_and_sorted_as_before(tmp_path) -> None:
    """A per-rank table's raw frame is left empty by `finish` (so no name keeps its
    columns alive while they are sorted by rank), and the run is the one a lent frame
    gives."""
    from stabilitycli.ingest.options import ReadOptions

    steps, ranks = 7, [2, 0, 1]
    table = pl.DataFrame(
        {
            "step": np.repeat(np.arange(steps), len(ranks)),
            "rank": np.tile(ranks, steps),
            "loss": [np.nan if i == 4 else -0.0 if i == 5 else float(i) for i in range(21)],
        }
    )
    path = tmp_path / "train.parquet"
    table.write_parquet(path)
    raw = tabular.load_table(path, SourceInfo(path=str(path), format="table"))
    lent = frame.finalize(
        raw.clone(), SourceInfo(path=str(path), format="table"), step_key="step", rank_key="rank"
    )
    run = tabular.finish(raw, SourceInfo(path=str(path), format="table"), ReadOptions())
    assert raw.width == 0
    assert run.frame.equals(lent.frame, null_equal=True)
    assert run.frame["rank"].to_list() == [0] * steps + [1] * steps + [2] * steps
    assert np.isnan(run.frame.filter(pl.col("rank") == 0, pl.col("step") == 1)["loss"][0])
