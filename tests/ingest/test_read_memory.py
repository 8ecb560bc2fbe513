"""A per-rank log is sorted by rank a column at a time, each unsorted column let go as its
sorted copy is made (issue 15: sorted whole, the frame was held twice over). It must give
the very run polars' stable sort of the whole frame gives: the same frame bit for bit
(NaN, +-Inf and -0.0 included), the same rewritten rows, the same accounting.

The chunks the row order is counted in are made tiny here (1 to 64 rows), and the
pieces a log is read in too, so that every boundary falls inside the data."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import polars as pl
import pytest

import stabilitycli.frame as frame_module
import stabilitycli.frame.rank_sort as rank_sort
from stabilitycli import read
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import finalize
from stabilitycli.ingest.jsonl import reader as jsonl

_ODD_VALUES = (math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-300, 2.5)


def _same_bits(new: pl.DataFrame, old: pl.DataFrame) -> None:
    """The same columns, dtypes, nulls, bits and sorted flags: NaN is NaN, -0.0 is -0.0."""
    assert new.columns == old.columns
    assert new.schema == old.schema
    for name in new.columns:
        a, b = new[name], old[name]
        assert a.flags == b.flags, name
        assert a.is_null().to_list() == b.is_null().to_list(), name
        values_a, values_b = a.drop_nulls().to_numpy(), b.drop_nulls().to_numpy()
        if values_a.dtype.kind == "f":
            values_a, values_b = values_a.view(np.int64), values_b.view(np.int64)
        assert np.array_equal(values_a, values_b), name


def _log(seed: int, *, ranks: list[int], evals: bool, resume: bool, cut: bool) -> str:
    """Per-rank records in a shuffled rank order per step and odd values; (`evals`) sparse
    eval lines that log a step again, (`resume`) a rank that goes back and logs steps anew,
    (`cut`) a last line cut off mid-write. Without the first two, steps only go forward."""
    rng = random.Random(seed)
    lines = []
    for step in range(12):
        order = ranks[:]
        rng.shuffle(order)
        for rank in order:
            record: dict = {"step": step, "rank": rank, "loss": rng.choice(_ODD_VALUES)}
            if rng.random() < 0.7:
                record["grad_norm"] = rng.choice(_ODD_VALUES)
            lines.append(json.dumps(record))
            if evals and rng.random() < 0.2:  # an eval line for the same step
                lines.append(json.dumps({"step": step, "rank": rank, "eval_loss": rng.random()}))
        if resume and step == 8:
            for back in (5, 6):
                lines.append(json.dumps({"step": back, "rank": ranks[0], "loss": -0.0}))
    text = "\n".join(lines) + "\n"
    return text + '{"step": 99, "rank": 0, "lo' if cut else text


def _old_sort(table: pl.DataFrame) -> pl.DataFrame:
    return table.sort("rank", maintain_order=True)  # the whole-frame sort it replaced


@pytest.mark.parametrize("order_rows", [1, 3, 64])
@pytest.mark.parametrize("piece_bytes", [300, 1 << 40])
@pytest.mark.parametrize(
    "ranks",
    [[0, 1, 2, 3], [5, 0, 3], [0, 70_000, 2], [0]],
    ids=["four", "gaps", "past-16-bits", "one"],
)
@pytest.mark.parametrize(
    ("evals", "resume", "cut"),
    [(False, False, False), (False, False, True), (True, False, False), (True, True, True)],
    ids=["forward", "forward-cut", "evals", "resumed-cut"],
)
def test_the_column_at_a_time_sort_gives_the_whole_frame_sort(
    tmp_path, monkeypatch, order_rows, piece_bytes, ranks, evals, resume, cut
) -> None:
    log = tmp_path / "train.jsonl"
    seed = len(ranks) + order_rows
    log.write_text(_log(seed, ranks=ranks, evals=evals, resume=resume, cut=cut))
    monkeypatch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(rank_sort, "_ORDER_ROWS", order_rows)
    new = read(log)
    with monkeypatch.context() as patch:
        patch.setattr(frame_module, "by_rank", _old_sort)
        old = read(log)
    _same_bits(new.frame, old.frame)
    _same_bits(new.abandoned, old.abandoned)
    assert new.source.to_dict() == old.source.to_dict()
    assert bool(new.source.restarts) == resume
    assert new.abandoned.height > 0 or not resume
    if not (evals or resume):  # the path that takes no merge, whose order is the sort's own
        assert new.frame["rank"].is_sorted() and new.frame["rank"].flags["SORTED_ASC"]


def test_rows_already_by_rank_are_not_gathered(tmp_path, monkeypatch) -> None:
    lines = [
        json.dumps({"step": step, "rank": rank, "loss": -0.0 if step % 2 else math.nan})
        for rank in (0, 1, 2)
        for step in range(5)
    ]
    log = tmp_path / "train.jsonl"
    log.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(
        rank_sort, "_stable_order", lambda ranks: pytest.fail("sorted rows were gathered")
    )
    new = read(log)
    monkeypatch.setattr(frame_module, "by_rank", _old_sort)
    _same_bits(new.frame, read(log).frame)


@pytest.mark.parametrize("order_rows", [1, 2, 7, 64])
@pytest.mark.parametrize("top", [0, 1, 63, 70_000])
def test_the_counted_order_is_numpys_stable_argsort(monkeypatch, order_rows, top) -> None:
    monkeypatch.setattr(rank_sort, "_ORDER_ROWS", order_rows)
    ranks = np.random.default_rng(top + order_rows).integers(0, top + 1, size=500)
    order = rank_sort._stable_order(ranks)
    assert order.dtype == np.uint32
    assert np.array_equal(order, np.argsort(ranks, kind="stable"))


def test_a_column_is_gathered_as_polars_gathers_it_with_or_without_nulls() -> None:
    values = [math.nan, -0.0, None, math.inf, -math.inf, 0.0]
    order = np.array([5, 3, 0, 2, 4, 1], dtype=np.uint32)
    with_nulls = pl.Series("x", values, dtype=pl.Float64)
    expected = with_nulls.gather(pl.Series(order))
    _same_bits(rank_sort._Gather(order).sorted(with_nulls).to_frame(), expected.to_frame())
    no_nulls = with_nulls.fill_null(-0.0)
    _same_bits(
        rank_sort._Gather(order).sorted(no_nulls).to_frame(),
        no_nulls.gather(pl.Series(order)).to_frame(),
    )


def _raw() -> pl.DataFrame:
    return pl.DataFrame(
        {"step": [1, 0, 1, 0], "rank": [1, 1, 0, 0], "loss": [1.0, -0.0, math.nan, math.inf]}
    )


def test_a_frame_handed_over_is_left_empty_and_one_lent_is_untouched() -> None:
    lent = _raw()
    kept = finalize(
        lent, SourceInfo(path="<frame>", format="frame"), step_key="step", rank_key="rank"
    )
    assert lent.equals(_raw(), null_equal=True)  # a user's own frame (`analyze(frame)`)
    handed = _raw()
    taken = finalize(
        handed,
        SourceInfo(path="<frame>", format="frame"),
        step_key="step",
        rank_key="rank",
        owned=True,
    )
    assert handed.width == 0
    _same_bits(taken.frame, kept.frame)
    assert kept.frame["rank"].to_list() == [0, 0, 1, 1]


def _grid_log(seed: int, ranks: list[int], steps: int) -> str:
    """Every step logs every rank, in one shuffled order; a sparse column (nulls) and odd
    values (NaN, +-Inf, -0.0)."""
    rng = random.Random(seed)
    order = ranks[:]
    rng.shuffle(order)
    lines = []
    for step in range(steps):
        for rank in order:
            record: dict = {"step": step, "rank": rank, "loss": rng.choice(_ODD_VALUES)}
            if rng.random() < 0.5:
                record["grad_norm"] = rng.choice(_ODD_VALUES)
            lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("block_values", [1, 3, 8, 1 << 14])
@pytest.mark.parametrize(
    "ranks", [[0, 1, 2, 3], [7, 2, 0, 5, 1], [3, 0]], ids=["four", "gaps", "two"]
)
@pytest.mark.parametrize("piece_bytes", [300, 1 << 40])
def test_a_lockstep_grid_is_transposed_to_the_whole_frame_sort(
    tmp_path, monkeypatch, block_values, ranks, piece_bytes
) -> None:
    log = tmp_path / "train.jsonl"
    log.write_text(_grid_log(len(ranks) + block_values, ranks, steps=13))
    monkeypatch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(rank_sort, "_BLOCK_VALUES", block_values)
    with monkeypatch.context() as patch:
        # a grid needs no row order: counting one would mean the grid went unseen
        patch.setattr(rank_sort, "_stable_order", lambda _: pytest.fail("a grid was gathered"))
        new = read(log)
    with monkeypatch.context() as patch:
        patch.setattr(frame_module, "by_rank", _old_sort)
        old = read(log)
    assert new.frame["grad_norm"].null_count() > 0  # the sparse column went through
    _same_bits(new.frame, old.frame)
    assert new.source.to_dict() == old.source.to_dict()
    assert new.frame["rank"].flags["SORTED_ASC"]


@pytest.mark.parametrize(
    "ranks",
    [
        [0, 1, 2, 0, 1],  # the rows are no whole number of steps
        [0, 1, 1, 0, 1, 1],  # a rank twice in a step
        [0, 1, 2, 0, 2, 1],  # a step in another order
        [0, 1, 2, 0, 1, 3],  # a rank in one step only
        [1, 0, 2, 3, 4, 5],  # no step repeats the first rank
    ],
)
def test_rows_that_are_no_lockstep_grid_are_counted_into_an_order(ranks) -> None:
    assert rank_sort.Grid.of(np.array(ranks, dtype=np.int64)) is None
    table = pl.DataFrame({"rank": ranks, "x": [float(i) for i in range(len(ranks))]})
    _same_bits(rank_sort.by_rank(table.clone()), _old_sort(table))


def test_a_grid_first_step_past_the_search_is_counted(monkeypatch) -> None:
    monkeypatch.setattr(rank_sort, "_GRID_SEARCH_ROWS", 3)
    ranks = np.tile(np.array([3, 1, 2, 0], dtype=np.int64), 5)
    assert rank_sort.Grid.of(ranks) is None
    monkeypatch.setattr(rank_sort, "_GRID_SEARCH_ROWS", 5)
    assert rank_sort.Grid.of(ranks) is not None


@pytest.mark.parametrize("block_values", [1, 2, 5, 1 << 14])
def test_every_column_type_of_a_grid_sorts_as_polars_sorts_it(monkeypatch, block_values) -> None:
    monkeypatch.setattr(rank_sort, "_BLOCK_VALUES", block_values)
    steps, order = 6, [2, 0, 3, 1]
    rows = steps * len(order)
    rng = np.random.default_rng(block_values)
    floats = rng.choice(np.array(_ODD_VALUES), size=rows)
    table = pl.DataFrame(
        {
            "rank": np.tile(order, steps),
            "x": pl.Series(floats).scatter([1, 5, 22], None),  # NaN and null, both kept
            "n": pl.Series(np.arange(rows), dtype=pl.Int64).scatter([0], None),
            "i": pl.Series(np.arange(rows), dtype=pl.UInt32),
            "flag": [bool(v) for v in rng.integers(0, 2, size=rows)],  # gathered by order
            "text": [f"r{v}" for v in range(rows)],
        }
    )
    _same_bits(rank_sort.by_rank(table.clone()), _old_sort(table))


@pytest.mark.parametrize("piece_bytes", [200, 700])
def test_a_grid_read_in_pieces_rejects_the_rows_read_whole_rejects(
    tmp_path, monkeypatch, piece_bytes
) -> None:
    """Joined in rank order (`join.joined_by_rank`), a lockstep log's unusable rows (a
    rank that is no process, a negative step, a line without a metric) are rejected and
    named by their first lines in the file, as when the rows are sorted after."""
    rng = random.Random(piece_bytes)
    lines = []
    for step in range(9):
        for rank in (2, -1, 0, 1):
            record: dict = {"step": -step if step == 4 else step, "rank": rank}
            if (step * 7 + rank) % 5:
                record["loss"] = rng.choice(_ODD_VALUES)
            lines.append(json.dumps(record))
    log = tmp_path / "train.jsonl"
    log.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
    sort = frame_module.by_rank

    def sorted_already(table: pl.DataFrame) -> pl.DataFrame:
        assert table["rank"].is_sorted(), "the rows reached the sort by rank unsorted"
        return sort(table)

    with monkeypatch.context() as patch:
        patch.setattr(frame_module, "by_rank", sorted_already)
        pieces = read(log)
    monkeypatch.setattr(jsonl, "PIECE_BYTES", 1 << 40)
    whole = read(log)
    _same_bits(pieces.frame, whole.frame)
    assert pieces.source.to_dict() == whole.source.to_dict()
    assert pieces.source.rows_rejected > 10
    assert pieces.lines is not None and whole.lines is not None
    assert pieces.lines.equals(whole.lines)
