"""Pieces of a log (JSONL pieces, a table's row groups) joined into one frame of
one-chunk columns, a column at a time and a piece at a time (issue 40).

Concatenated and then rechunked a column at a time, each column's new copy was made
while all of its pieces were still held: the frame plus one whole column at once
(240 MB of a 30M-row Float64 column, the read's peak on the 30M-row log). Here a number
column without nulls is written into one buffer a piece at a time, each piece's part let
go once it is copied, so the extra memory is one piece's part. Columns that need a cast
or nulls (a key missing from some pieces, a type that differs between them) are joined
as `pl.concat(how="diagonal_relaxed")` joins them: the same dtypes, values and order.

A per-rank log whose ranks log in lockstep (`rank_sort.Grid`) can be joined in rank order
(`joined_by_rank`): each piece's part is written where the sort by rank puts it, so the
sort that followed the join (a second copy of each column while the first was held,
240 MB at 30M rows and the read's peak on the 30M-row, 64-rank log) is not needed.
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from stabilitycli.frame.rank_sort import NUMPY_EXACT, Grid
from stabilitycli.frame.spill import mapped_buffer, settled, small_page_buffer, spill_wanted


def joined(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """The pieces' rows in order, their columns as the relaxed diagonal concat makes them;
    empties `pieces`. The caller must hold no other reference to them, or nothing is
    freed as the join goes."""
    return joined_by_rank(pieces, None)[0]


def joined_by_rank(pieces: list[pl.DataFrame], rank_key: str | None) -> tuple[pl.DataFrame, bool]:
    """The pieces joined as `joined` joins them, and whether the rows came out sorted by
    `rank_key` (stably: what `rank_sort.by_rank` makes of them) rather than in order.

    They do when `rank_key` is a whole-number column with no nulls whose values make a
    lockstep grid; else the rows are in order, as `joined` gives them."""
    # the concat of the empty pieces gives the joined schema (column order, supertypes)
    # without touching a row
    schema = pl.concat([p.clear() for p in pieces], how="diagonal_relaxed").schema
    heights = [p.height for p in pieces]
    columns: dict[str, pl.Series] = {}
    grid = None
    # the joined columns in files of their own where a memory limit leaves too little room
    spill = spill_wanted(lambda: _joined_bytes(schema, sum(heights)))
    if rank_key is not None and rank_key in schema and (rank_key == "rank" or "rank" not in schema):
        # the rank first: its grid decides where every other column's rows go
        told, grid = _pieces_grid(rank_key, schema[rank_key], pieces, heights)
        if told:
            if grid is not None:  # the sorted column is made without the pieces' ranks
                for piece in pieces:  # loop over pieces, not rows
                    piece.drop_in_place(rank_key)
        else:
            parts = [p.drop_in_place(rank_key) if rank_key in p.columns else None for p in pieces]
            ranks = _joined_column(rank_key, schema[rank_key], parts, heights, _append, spill)
            del parts
            grid = Grid.of(ranks.to_numpy()) if _whole_without_nulls(ranks) else None
            if grid is None:
                columns[rank_key] = ranks
            # the rows' ranks go before the sorted ones are made: both at once were a
            # whole column more than the frame (240 MB at 30M rows)
            del ranks
        if grid is not None:
            out = _buffer(sum(heights), grid.first_step.dtype, spill)
            columns[rank_key] = grid.sorted_ranks(schema[rank_key], rank_key, out)
            if spill:
                settled(out)
    place = _append if grid is None else grid.place
    # each column's parts taken from the pieces here, on this thread: two columns joined at
    # once would otherwise both change the same pieces
    left = [
        (name, dtype, [p.drop_in_place(name) if name in p.columns else None for p in pieces])
        for name, dtype in schema.items()  # loop over columns, not rows
        if name not in columns
    ]
    pieces.clear()

    def join_one(todo: tuple[str, pl.DataType, list]) -> pl.Series:
        name, dtype, parts = todo
        column = _joined_column(name, dtype, parts, heights, place, spill)
        if grid is not None and column.null_count():
            column = grid.sorted(column)  # the relaxed join's column, whole: rare
        return column

    for (name, _, _), column in zip(left, _each(join_one, left, sum(heights)), strict=True):
        columns[name] = column
    del left
    # by name: a list of Series would turn a column named "" (an empty JSON key) into
    # `column_N`; in the schema's order
    return pl.DataFrame({name: columns[name] for name in schema}), grid is not None


# below this many rows the columns' join takes milliseconds: a thread would cost more
_JOINED_AT_ONCE_MIN_ROWS = 1_000_000
_JOINED_AT_ONCE = 2


def _each(func, todo: list, rows: int) -> list:
    """`[func(t) for t in todo]`, two at a time on a long log with a core to spare and no
    cap on memory: numpy copies a column's parts without the GIL, and a column's copy
    (its transpose by rank, its new pages) is one core's work (the join of the 10M-row,
    64-rank log: 0.5 s on one thread). Two columns at once hold one piece's part more."""
    if rows < _JOINED_AT_ONCE_MIN_ROWS or len(todo) < 2 or (os.cpu_count() or 1) < 2:
        return [func(t) for t in todo]
    from stabilitycli.core.memory_cap import memory_capped

    if memory_capped():
        return [func(t) for t in todo]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_JOINED_AT_ONCE, thread_name_prefix="stab-join") as pool:
        return list(pool.map(func, todo))


def _pieces_grid(
    name: str, dtype: pl.DataType, pieces: list[pl.DataFrame], heights: list[int]
) -> tuple[bool, Grid | None]:
    """Whether the pieces' ranks tell their grid as they are, and the grid (None: they
    make none), told a piece at a time (`Grid.of_stretches`): the joined rank column
    `Grid.of` reads is a copy of every row's rank (80 MB at 10M rows, each page faulted
    in) that the sorted column then replaces. They do not when the joined column would
    not be the parts as they are (a part of another dtype, or with nulls)."""
    if not all(name in piece.columns for piece in pieces):
        return False, None
    parts = [piece[name] for piece in pieces]
    if not (
        sum(heights)
        and dtype.is_integer()
        and dtype in NUMPY_EXACT
        and all(p.dtype == dtype and not p.null_count() for p in parts)
    ):
        return False, None
    # numpy's views of the parts' own buffers, a chunk at a time (no copy)
    stretches = [values for part in parts for values in _chunks(part)]
    return True, Grid.of_stretches(stretches, sum(heights))


def _whole_without_nulls(column: pl.Series) -> bool:
    return (
        column.dtype.is_integer()
        and column.dtype in NUMPY_EXACT
        and len(column) > 0
        and not column.null_count()
    )


def _joined_column(
    name: str,
    dtype: pl.DataType,
    parts: list[pl.Series | None],
    heights: list[int],
    place,
    spill: bool,
) -> pl.Series:
    """One column's parts (None: a piece without it) as one chunk, `parts` emptied as they
    are copied; `place` writes a piece's values into the joined buffer (in a file's pages
    with `spill`)."""
    if dtype in NUMPY_EXACT and all(
        part is not None and part.dtype == dtype and part.null_count() == 0 for part in parts
    ):
        return _copied(name, dtype, parts, sum(heights), place, spill)
    return _relaxed(name, dtype, parts, heights)


def _append(out: np.ndarray, values: np.ndarray, first_row: int) -> None:
    out[first_row : first_row + values.size] = values


def _copied(
    name: str, dtype: pl.DataType, parts: list, height: int, place, spill: bool
) -> pl.Series:
    """The parts written into one buffer (which polars then borrows), each let go as it is
    copied; `parts` is left empty. A chunk at a time: each is numpy's view of polars' own
    buffer, where `to_numpy` of a part in several chunks would copy it into one first."""
    out: np.ndarray | None = None
    at = 0
    for i, part in enumerate(parts):  # loop over pieces, not rows
        for values in _chunks(part):  # loop over a piece's chunks
            if out is None:
                out = _buffer(height, values.dtype, spill)
            place(out, values, at)
            at += values.size
        parts[i] = None
        del part
    assert out is not None  # a joined column has a part in every piece here
    if spill:
        settled(out)
    return pl.Series(name, out, dtype=dtype)


def _joined_bytes(schema: pl.Schema, rows: int) -> int:
    """About what the joined columns hold: 8 bytes a value (what a metric is as the rules
    read it), 4 for a narrower column."""
    return rows * sum(
        4 if dtype in (pl.Int32, pl.UInt32, pl.Float32) else 8 for dtype in schema.values()
    )


def _chunks(part: pl.Series):
    """A part's values a chunk at a time, as numpy views of polars' buffers."""
    for chunk in part.get_chunks():
        values = chunk.to_numpy()
        if values.size:
            yield values


def _buffer(height: int, dtype: np.dtype, spill: bool) -> np.ndarray:
    """An empty joined column of `height` rows: under `STAB_SPILL=1` in a file's pages
    (`spill`), not the process's own."""
    if spill:
        return mapped_buffer(height, dtype)
    # in small pages: numpy's own array asks for huge pages, and a first write into one can
    # wait while the kernel compacts memory to make it (the join of a 10M-row log's seven
    # columns took 1.4 s so, 0.3 s in small pages); a transpose, a stretch per rank at a
    # time, would also hold a huge page a rank ahead of its values
    return small_page_buffer(height, dtype)


def _relaxed(name: str, dtype: pl.DataType, parts: list, heights: list[int]) -> pl.Series:
    """The parts cast to the joined type, a missing one as nulls, as one chunk."""
    filled = [
        part.cast(dtype) if part is not None else pl.repeat(None, h, dtype=dtype, eager=True)
        for part, h in zip(parts, heights, strict=True)
    ]
    parts.clear()
    return pl.concat(filled, rechunk=True).alias(name)
