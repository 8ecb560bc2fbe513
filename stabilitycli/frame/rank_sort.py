"""A per-rank table sorted by rank, stably (each rank's rows in file order), a column at
a time (issue 15).

Sorted whole, the sorted copy of every column was made while the unsorted one was still
held: the log twice over. Sorted a column at a time, each unsorted column goes as its
sorted copy is made (when the table alone holds it, see `frame.finalize`'s `owned`), and
the extra memory is one column and, where one is needed, the row order.

Most per-rank logs are a lockstep grid: every step logs every rank, in the same rank
order. Sorting such rows by rank is a transpose of the steps x ranks matrix, done a
block of steps at a time so that each block is read and written within the CPU cache; a
gather through a row order jumps a rank's stride for every value and missed the cache
on each (10M rows, 64 ranks: 0.31 s a column gathered, 0.03 s transposed). Any other
row order is counted into a row order and each column gathered through it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# the dtypes numpy holds bit for bit (a Decimal or an Int128 it would not)
NUMPY_EXACT = (
    pl.Int8,
    pl.Int16,
    pl.Int32,
    pl.Int64,
    pl.UInt8,
    pl.UInt16,
    pl.UInt32,
    pl.UInt64,
    pl.Float32,
    pl.Float64,
)

# ranks below this are sorted by counting (a bin per rank); a higher one, by numpy
_COUNTED_RANKS = 1 << 16
# small enough that a chunk's working arrays stay in the CPU cache
_ORDER_ROWS = 1 << 16
# values a transposed block holds: 128 KiB of 8-byte values, within the CPU cache
_BLOCK_VALUES = 1 << 14
# a grid's first step is looked for among this many rows; a longer one is sorted by count
_GRID_SEARCH_ROWS = 1 << 17


def by_rank(table: pl.DataFrame) -> pl.DataFrame:
    """`table` sorted by rank, stably; `table` is left empty when its rows are not already
    in that order. The `rank` column holds whole numbers from 0 and no nulls."""
    ranks = table["rank"]
    if ranks.is_sorted():
        return table.with_columns(ranks.set_sorted())  # the flag a sort leaves
    rank_values = ranks.to_numpy()
    del ranks
    grid = Grid.of(rank_values)
    sort = grid.sorted if grid is not None else _Gather(_stable_order(rank_values)).sorted
    del rank_values
    # by name: a list of Series would turn a column named "" (an empty JSON key) into
    # `column_N`, and the rows would lose the metric they were read with
    columns = {}
    for name in table.columns:  # loop over columns, not rows
        column = sort(table.drop_in_place(name))
        columns[name] = column.set_sorted() if name == "rank" else column
    return pl.DataFrame(columns)


class _Gather:
    """Columns put in a row order."""

    def __init__(self, order: np.ndarray):
        self.order = order

    def sorted(self, column: pl.Series) -> pl.Series:
        """`column`'s values in the order. A number column without nulls is gathered by
        numpy into a buffer polars then borrows: polars' own gather held half as much again
        beside its result (+120 MB for a 10M-row float column, against +80)."""
        if column.dtype in NUMPY_EXACT and column.null_count() == 0:
            return pl.Series(column.name, column.to_numpy()[self.order], dtype=column.dtype)
        return column.gather(pl.Series(self.order))


class Grid:
    """Rows that are a lockstep grid: `steps` runs of the same ranks, each run in the order
    `first_step` holds them (no rank twice in it)."""

    def __init__(self, first_step: np.ndarray, steps: int):
        self.first_step, self.steps = first_step, steps
        self.rank_order = np.argsort(first_step, kind="stable")
        self.in_order = bool((self.rank_order == np.arange(first_step.size)).all())

    @classmethod
    def of(cls, ranks: np.ndarray) -> Grid | None:
        """The grid `ranks` make, or None when they make none."""
        grid = cls.begun(ranks[:_GRID_SEARCH_ROWS], ranks.size)
        return grid if grid is not None and grid.holds(ranks, 0) else None

    @classmethod
    def of_stretches(cls, stretches: list[np.ndarray], rows: int) -> Grid | None:
        """`of` the ranks that `stretches` make one after another (`rows` of them), told a
        stretch at a time: the column need not be joined first."""
        head, held = [], 0
        for stretch in stretches:  # loop over stretches, to the rows a first step is sought in
            if held >= _GRID_SEARCH_ROWS:
                break
            head.append(stretch[: _GRID_SEARCH_ROWS - held])
            held += head[-1].size
        grid = cls.begun(np.concatenate(head) if head else np.zeros(0, np.int64), rows)
        if grid is None:
            return None
        at = 0
        for stretch in stretches:  # loop over stretches, not rows
            if not grid.holds(stretch, at):
                return None
            at += stretch.size
        return grid

    @classmethod
    def begun(cls, head: np.ndarray, rows: int) -> Grid | None:
        """The grid of `rows` ranks that begin with `head` (their first `_GRID_SEARCH_ROWS`,
        or all of them) when the rest follow it (`holds`); None when they can make none."""
        again = np.flatnonzero(head[1:_GRID_SEARCH_ROWS] == head[0]) if head.size else head
        if again.size == 0:
            return None
        width = int(again[0]) + 1
        if rows % width:
            return None
        # a copy: a view would keep the whole unsorted rank column alive with the grid
        first_step = head[:width].copy()
        if np.unique(first_step).size != width:
            return None
        return cls(first_step, rows // width)

    def holds(self, ranks: np.ndarray, first_row: int) -> bool:
        """Whether rows `first_row` on (`ranks`, a stretch of the column) are the grid's:
        each step's ranks in `first_step`'s order. A stretch at a time, so that a column in
        pieces is checked without being joined first."""
        width = self.first_step.size
        # the part step the stretch may begin inside, its whole steps, the part step it
        # may end inside
        into = first_row % width
        head = min(ranks.size, (width - into) % width)
        if not (ranks[:head] == self.first_step[into : into + head]).all():
            return False
        whole = (ranks.size - head) // width * width
        by_step = ranks[head : head + whole].reshape(-1, width)
        steps_per_block = _steps_per_block(width)
        for first in range(0, by_step.shape[0], steps_per_block):  # loop over blocks, not rows
            if not (by_step[first : first + steps_per_block] == self.first_step).all():
                return False
        tail = ranks[head + whole :]
        return bool((tail == self.first_step[: tail.size]).all())

    def sorted(self, column: pl.Series) -> pl.Series:
        """`column`'s values with each rank's rows together, in rank order."""
        if column.name == "rank":
            sorted_ranks = np.repeat(self.first_step[self.rank_order], self.steps)
            return pl.Series(column.name, sorted_ranks, dtype=column.dtype)
        if column.dtype not in NUMPY_EXACT:
            return _Gather(self._order()).sorted(column)
        missing = column.null_count()
        # a null's slot holds a zero while transposed and is made null again after
        values = (column.fill_null(0) if missing else column).to_numpy()
        out = pl.Series(column.name, self._transposed(values), dtype=column.dtype)
        del values  # the filled copy, when there are nulls, goes before the mask is made
        if missing:
            valid = self._transposed(column.is_not_null().to_numpy())
            out.scatter(np.flatnonzero(~valid), None)
        return out

    def sorted_ranks(self, dtype: pl.DataType, name: str, out: np.ndarray) -> pl.Series:
        """The rank column of the sorted rows (each rank's run of `steps`), flagged sorted,
        written into `out` (empty, a value for each of the grid's rows, the ranks' numpy
        dtype)."""
        out.reshape(self.first_step.size, self.steps)[:] = self.first_step[self.rank_order, None]
        return pl.Series(name, out, dtype=dtype).set_sorted()

    def place(self, out: np.ndarray, values: np.ndarray, first_row: int) -> None:
        """Rows `first_row` on of a step-major column (one piece of it) written where the
        sorted column holds them, in `out` (rank-major, as `_transposed` makes it): a piece
        at a time, so the unsorted column is never held whole beside the sorted one."""
        width = self.first_step.size
        end = first_row + values.size
        # the piece's whole steps are transposed a cache-sized block at a time; the part
        # steps at its two ends (a piece is cut at a line, not a step) are placed by index
        first_step = -(-first_row // width)
        last_step = end // width
        if last_step > first_step:
            by_rank = out.reshape(width, self.steps)
            whole = values[first_step * width - first_row : last_step * width - first_row]
            by_step = whole.reshape(-1, width)
            steps_per_block = _steps_per_block(width)
            for at in range(0, by_step.shape[0], steps_per_block):  # loop over blocks
                block = by_step[at : at + steps_per_block]
                if not self.in_order:
                    block = block[:, self.rank_order]
                step = first_step + at
                by_rank[:, step : step + block.shape[0]] = block.T
            ends = [(first_row, first_step * width), (last_step * width, end)]
        else:
            ends = [(first_row, end)]
        position = np.empty(width, dtype=np.int64)
        position[self.rank_order] = np.arange(width)
        for start, stop in ends:  # at most a step's rows each
            rows = np.arange(start, stop)
            slots = position[rows % width] * self.steps + rows // width
            out[slots] = values[start - first_row : stop - first_row]

    def _order(self) -> np.ndarray:
        rows = self.steps * self.first_step.size
        index_type = np.uint32 if rows < 2**32 else np.int64
        return self._transposed(np.arange(rows, dtype=index_type))

    def _transposed(self, values: np.ndarray) -> np.ndarray:
        """`values` (step-major, ranks in the grid's order) made rank-major, ranks sorted."""
        width = self.first_step.size
        by_step = values.reshape(self.steps, width)
        by_rank = np.empty((width, self.steps), dtype=values.dtype)
        steps_per_block = _steps_per_block(width)
        for first in range(0, self.steps, steps_per_block):  # loop over blocks, not rows
            block = by_step[first : first + steps_per_block]
            if not self.in_order:
                block = block[:, self.rank_order]
            by_rank[:, first : first + steps_per_block] = block.T
        return by_rank.reshape(-1)


def _steps_per_block(ranks_per_step: int) -> int:
    """How many whole steps of a grid one cache-sized block holds (one at least)."""
    return max(1, _BLOCK_VALUES // ranks_per_step)


def _stable_order(ranks: np.ndarray) -> np.ndarray:
    """The row order that sorts `ranks` (whole numbers from 0, no nulls) stably, as row
    numbers in 32 bits while they fit (polars' own index type).

    numpy's stable argsort of the whole column returns 64-bit indices and works beside
    them (+130 to +180 MB for 10M rows, three to four times the 32-bit order); counted a
    chunk of rows at a time, each rank's rows are placed after the ones before them, and
    nothing but the order is as long as the column.
    """
    rows = ranks.size
    top = int(ranks.max()) if rows else 0
    if top >= _COUNTED_RANKS:
        order = np.argsort(ranks, kind="stable")
        return order.astype(np.uint32) if rows < 2**32 else order
    # the first free slot of each rank in the sorted rows
    per_rank = np.bincount(ranks, minlength=top + 1)
    next_slot = np.cumsum(per_rank) - per_rank
    order = np.empty(rows, dtype=np.uint32 if rows < 2**32 else np.int64)
    for first in range(0, rows, _ORDER_ROWS):  # loop over chunks, not rows
        part = ranks[first : first + _ORDER_ROWS].astype(np.uint16)
        # 16-bit keys take numpy's radix sort, stable and linear
        local = np.argsort(part, kind="stable")
        in_part = np.bincount(part, minlength=top + 1)
        # a rank's k-th row in the sorted chunk goes to its next free slot plus k
        slot_past_chunk_start = next_slot - (np.cumsum(in_part) - in_part)
        slots = slot_past_chunk_start[part[local]]
        slots += np.arange(part.size)
        local += first
        order[slots] = local
        next_slot += in_part
    return order
