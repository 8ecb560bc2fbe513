"""Pieces joined a column and a piece at a time (`frame.join`): the frame the relaxed
diagonal concat makes, bit for bit, in one chunk a column, with each piece emptied."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import stabilitycli.frame.rank_sort as rank_sort
from stabilitycli.frame import one_chunk_frame
from stabilitycli.frame.join import joined, joined_by_rank


def _concat_then_rechunk(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(pieces, how="diagonal_relaxed").rechunk()


def _pieces() -> list[pl.DataFrame]:
    rng = np.random.default_rng(7)
    return [
        # an empty JSON key, line numbers in 32 bits
        pl.DataFrame(
            {
                "step": np.arange(5),
                "_row": np.arange(1, 6, dtype=np.int32),
                "loss": rng.random(5),
                "": rng.random(5),
            }
        ),
        # line numbers past 32 bits, a null and a NaN, a key only this piece has
        pl.DataFrame(
            {
                "step": np.arange(5, 8),
                "_row": np.arange(6, 9, dtype=np.int64),
                "loss": [1.0, None, np.nan],
                "acc": [1, 2, 3],
            }
        ),
        pl.DataFrame(
            {
                "step": np.arange(8, 10),
                "_row": np.arange(9, 11, dtype=np.int32),
                "loss": [np.inf, -0.0],
                "": [1.0, 2.0],
                "phase": ["train", "eval"],
            }
        ),
    ]


def test_mixed_pieces_join_as_the_relaxed_concat_joins_them() -> None:
    want = _concat_then_rechunk(_pieces())
    pieces = _pieces()
    got = joined(pieces)
    assert pieces == []
    assert got.schema == want.schema
    assert_frame_equal(got, want, check_exact=True)
    assert all(got[name].n_chunks() == 1 for name in got.columns)
    # -0.0 stays -0.0, NaN stays NaN: the bits, not just the values
    assert np.signbit(got["loss"].to_numpy()[-1])


def test_number_columns_are_copied_a_piece_at_a_time_and_each_piece_let_go() -> None:
    rows = 1_000
    frames = [
        pl.DataFrame({"step": np.arange(i * rows, (i + 1) * rows), "loss": np.linspace(0, 1, rows)})
        for i in range(6)
    ]
    want = _concat_then_rechunk([f.clone() for f in frames])
    handed = list(frames)
    got = one_chunk_frame(handed)
    assert handed == []
    # the join drops each column from the pieces it came from, so nothing else holds them
    assert all(f.width == 0 for f in frames)
    assert_frame_equal(got, want, check_exact=True)
    assert got["loss"].n_chunks() == 1


def _grid_pieces(seed: int, order: list[int], steps: int, cuts: list[int]) -> list[pl.DataFrame]:
    """A lockstep per-rank log (each step logs the ranks in `order`) cut into pieces at
    `cuts` (rows, inside steps as well as between them); a sparse column with nulls."""
    rng = np.random.default_rng(seed)
    rows = steps * len(order)
    loss = rng.choice([np.nan, np.inf, -np.inf, -0.0, 0.0, 2.5], size=rows)
    sparse = pl.Series("grad_norm", rng.random(rows)).scatter(np.arange(0, rows, 3), None)
    whole = pl.DataFrame(
        {
            "step": np.repeat(np.arange(steps), len(order)),
            "rank": np.tile(np.array(order, dtype=np.int64), steps),
            "_row": np.arange(1, rows + 1, dtype=np.int32),
            "loss": loss,
            "grad_norm": sparse,
        }
    )
    bounds = [0, *(c for c in cuts if c < rows), rows]
    return [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize(
    "order", [[0, 1, 2, 3], [5, 0, 3], [2]], ids=["in-order", "shuffled", "one"]
)
@pytest.mark.parametrize("block_values", [1, 4, 1 << 14])
def test_a_grid_joined_by_rank_is_the_join_then_the_sort(monkeypatch, order, block_values) -> None:
    monkeypatch.setattr(rank_sort, "_BLOCK_VALUES", block_values)
    cuts = [1, 2, 7, 12, 13, 30]  # pieces inside one step, across several, a step exactly
    pieces = _grid_pieces(len(order), order, steps=11, cuts=cuts)
    want = rank_sort.by_rank(joined([p.clone() for p in pieces]))
    got, in_rank_order = joined_by_rank(pieces, "rank")
    assert in_rank_order and pieces == []
    assert got.schema == want.schema
    assert_frame_equal(got, want, check_exact=True)
    assert got["rank"].flags["SORTED_ASC"]
    assert all(got[name].n_chunks() == 1 for name in got.columns)
    assert np.array_equal(
        got["loss"].to_numpy().view(np.int64), want["loss"].to_numpy().view(np.int64)
    )


@pytest.mark.parametrize(
    "ranks",
    [[0, 1, 2, 0, 2, 1], [0, 1, None, 0, 1, 2], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]],
    ids=["no-grid", "a-null-rank", "float-ranks"],
)
def test_ranks_that_make_no_grid_are_joined_in_order(ranks) -> None:
    frame = pl.DataFrame({"step": [0, 0, 0, 1, 1, 1], "rank": ranks, "loss": [1.0] * 6})
    pieces = [frame.slice(0, 4), frame.slice(4)]
    got, in_rank_order = joined_by_rank(pieces, "rank")
    assert not in_rank_order
    assert_frame_equal(got, frame, check_exact=True)


def _huge_page_kb(first: int, size: int) -> int:
    """AnonHugePages of the mappings over bytes [first, first + size) (/proc/self/smaps):
    numpy's advice splits an allocation's mapping where its huge pages can begin."""
    total, inside, seen = 0, False, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < first + size and first < hi
                seen |= inside
            elif inside and head == "AnonHugePages:":
                total += int(line.split()[1])
    assert seen, "no mapping holds the column"
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc only")
def test_a_joined_column_is_written_in_small_pages() -> None:
    # numpy asks for huge pages for an array this size; the first write into one can wait
    # on the kernel compacting memory (1.4 s for a 10M-row log's columns)
    rows = 4 * 2**20  # 32 MiB of float64, in four pieces
    pieces = [pl.DataFrame({"loss": np.full(rows // 4, float(i))}) for i in range(4)]
    column = joined(pieces)["loss"]
    values = column.to_numpy()
    assert values[0] == 0.0 and values[-1] == 3.0
    assert _huge_page_kb(values.__array_interface__["data"][0], values.nbytes) == 0


@pytest.mark.parametrize("broken_row", [0, 5, 13, 31, 43])
def test_ranks_off_the_grid_in_a_later_piece_are_joined_in_order(broken_row) -> None:
    # the grid is told a piece at a time: a rank out of place in any piece, at a step's
    # start, inside it or in the part step a piece ends with, means no grid
    pieces = _grid_pieces(3, [5, 0, 3], steps=15, cuts=[1, 2, 7, 12, 13, 30])
    whole = pl.concat([p.clone() for p in pieces])
    ranks = whole["rank"].to_numpy().copy()
    ranks[broken_row] = 9
    whole = whole.with_columns(pl.Series("rank", ranks))
    starts = itertools.accumulate((p.height for p in pieces), initial=0)
    pieces = [whole.slice(start, p.height) for start, p in zip(starts, pieces, strict=False)]
    got, in_rank_order = joined_by_rank(pieces, "rank")
    assert not in_rank_order
    assert_frame_equal(got, whole, check_exact=True)


def test_a_grid_told_a_piece_at_a_time_is_the_whole_column_s() -> None:
    # pieces shorter than a step: the first step is sought across them
    ranks = np.tile(np.array([4, 1, 7, 2, 0], dtype=np.int64), 9)
    stretches = [ranks[a:b] for a, b in itertools.pairwise([0, 1, 3, 4, 11, 20, 44, 45])]
    told = rank_sort.Grid.of_stretches(stretches, ranks.size)
    whole = rank_sort.Grid.of(ranks)
    assert told is not None and whole is not None
    assert np.array_equal(told.first_step, whole.first_step) and told.steps == whole.steps == 9
    assert rank_sort.Grid.of_stretches(stretches[:-1], ranks.size - 1) is None


@pytest.mark.parametrize("rank_key", ["rank", None], ids=["by-rank", "in-order"])
def test_columns_joined_two_at_once_are_the_columns_joined_in_turn(monkeypatch, rank_key) -> None:
    import stabilitycli.frame.join as join

    monkeypatch.setattr(join.os, "cpu_count", lambda: 2)
    monkeypatch.setattr("stabilitycli.core.memory_cap.memory_capped", lambda *a: False)
    threads_used: list[str] = []
    copied = join._copied

    def watched(*args, **kwargs):
        import threading

        threads_used.append(threading.current_thread().name)
        return copied(*args, **kwargs)

    monkeypatch.setattr(join, "_copied", watched)
    cuts = [3, 10, 17, 40]
    monkeypatch.setattr(join, "_JOINED_AT_ONCE_MIN_ROWS", 10**9)
    want, want_sorted = joined_by_rank(_grid_pieces(3, [2, 0, 1], 19, cuts), rank_key)
    assert not any(name.startswith("stab-join") for name in threads_used)
    threads_used.clear()
    monkeypatch.setattr(join, "_JOINED_AT_ONCE_MIN_ROWS", 0)
    got, got_sorted = joined_by_rank(_grid_pieces(3, [2, 0, 1], 19, cuts), rank_key)
    assert any(name.startswith("stab-join") for name in threads_used)
    assert got_sorted == want_sorted == (rank_key is not None)
    assert_frame_equal(got, want, check_exact=True)
    # the relaxed column (nulls) and the copied ones, NaN, -0.0 and Inf, bit for bit
    for name in got.columns:
        assert got[name].n_chunks() == 1
    assert np.array_equal(
        got["loss"].to_numpy().view(np.int64), want["loss"].to_numpy().view(np.int64)
    )
