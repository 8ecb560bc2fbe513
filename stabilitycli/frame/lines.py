"""The file line of each row of a run's frame, held as runs of rows whose line grows by
a fixed stride (issue 40).

A training log's lines follow its rows: one line a step (line = step + 1), or one line a
step and rank, which sorted by rank climb by the number of ranks. As a column the line
numbers cost 4 bytes a row (120 MB for a 30M-row log) for what the outputs read at a
handful of steps; as runs they cost 24 bytes a run, one run for a 1-rank log and one a
rank for a lockstep one. A log whose lines follow no such pattern (more than one run in
`_MAX_RUN_SHARE` rows) keeps the column. Either way the same numbers come back.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# rows scanned at a time while the runs are found: the scan's temporaries stay small
_CHUNK_ROWS = 1 << 20
# runs cost 24 bytes against a row's 4: past one run in this many rows, the column is kept
_MAX_RUN_SHARE = 16


class SourceLines:
    """`keys` (`step`, and `rank` for a per-rank log: the frame's own columns, shared) and
    the file line of each of their rows, under the name `column`."""

    def __init__(self, table: pl.DataFrame, column: str):
        """`table`: the keys and the line column, a row per row of the frame."""
        self.column = column
        self.keys = table.drop(column)
        self.dtype = table.schema[column]
        lines = table[column]
        self._runs = _runs(lines.to_numpy()) if lines.null_count() == 0 else None
        # kept only when it does not reduce to few runs
        self._lines = lines if self._runs is None else None

    def frame(self) -> pl.DataFrame:
        """Every row's keys and line, as one table."""
        return self.keys.with_columns(self._values(None).alias(self.column))

    def at_steps(self, steps: list[int]) -> pl.DataFrame:
        """The rows at `steps` only (in row order): the keys and their lines."""
        hit = self.keys["step"].is_in(steps)
        rows = hit.arg_true()
        return self.keys.filter(hit).with_columns(self._values(rows).alias(self.column))

    def _values(self, rows: pl.Series | None) -> pl.Series:
        if self._lines is not None:
            return self._lines if rows is None else self._lines.gather(rows)
        assert self._runs is not None
        at = np.arange(self.keys.height) if rows is None else rows.to_numpy()
        starts, first, stride = self._runs
        run = np.searchsorted(starts, at, side="right") - 1
        values = first[run] + stride[run] * (at - starts[run])
        return pl.Series(self.column, values, dtype=pl.Int64).cast(self.dtype)


def _runs(lines: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(first row, first line, stride) of each run of rows whose line grows by a fixed
    stride, or None past `_MAX_RUN_SHARE`; found a chunk of rows at a time."""
    rows = lines.size
    if rows == 0:
        return None
    budget = rows // _MAX_RUN_SHARE + 1
    starts: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    found = 1
    for first in range(0, rows - 2, _CHUNK_ROWS):  # loop over chunks, not rows
        part = lines[first : min(rows, first + _CHUNK_ROWS + 2)].astype(np.int64)
        step = np.diff(part)
        # a run starts at the row where the stride to the next row changes
        changed = np.flatnonzero(step[1:] != step[:-1]) + 1 + first
        found += changed.size
        if found > budget:
            return None
        starts.append(changed)
    start = np.concatenate(starts)
    first_line = lines[start].astype(np.int64)
    following = np.minimum(start + 1, rows - 1)
    stride = lines[following].astype(np.int64) - first_line
    return start, first_line, stride
