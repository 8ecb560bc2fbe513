"""Pieces of a log (JSONL pieces, a table's row groups) joined into one frame of
one-chunk columns, a column at a time and a piece at a time (issue 40).

Concatenated and then rechunked a column at a time, each column's new copy was made
while all of its pieces were still held: the frame plus one whole column at once
(240 MB of a 30M-row Float64 column, the read's peak on the 30M-row log). Here a number
column without nulls is written into one buffer a piece at a time, each piece's part let
go once it is copied, so the extra memory is one piece's part. Columns that need a cast
or nulls (a key missing from some pieces, a type that differs between them) are joined
as `pl.concat(how="diagonal_relaxed")` joins them: the same dtypes, values and order.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.frame.rank_sort import NUMPY_EXACT


def joined(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """The pieces' rows in order, their columns as the relaxed diagonal concat makes them;
    empties `pieces`. The caller must hold no other reference to them, or nothing is
    freed as the join goes."""
    # the concat of the empty pieces gives the joined schema (column order, supertypes)
    # without touching a row
    schema = pl.concat([p.clear() for p in pieces], how="diagonal_relaxed").schema
    heights = [p.height for p in pieces]
    columns: dict[str, pl.Series] = {}
    for name, dtype in schema.items():  # loop over columns, not rows
        parts = [p.drop_in_place(name) if name in p.columns else None for p in pieces]
        if dtype in NUMPY_EXACT and all(
            part is not None and part.dtype == dtype and part.null_count() == 0 for part in parts
        ):
            columns[name] = _copied(name, dtype, parts, sum(heights))
        else:
            columns[name] = _relaxed(name, dtype, parts, heights)
    pieces.clear()
    # by name: a list of Series would turn a column named "" (an empty JSON key) into
    # `column_N`
    return pl.DataFrame(columns)


def _copied(name: str, dtype: pl.DataType, parts: list, height: int) -> pl.Series:
    """The parts written into one buffer (which polars then borrows), each let go as it is
    copied; `parts` is left empty."""
    out: np.ndarray | None = None
    at = 0
    for i, part in enumerate(parts):  # loop over pieces, not rows
        values = part.to_numpy()
        if out is None:
            out = np.empty(height, dtype=values.dtype)
        out[at : at + values.size] = values
        at += values.size
        parts[i] = None
        del values, part
    assert out is not None  # a joined column has a part in every piece here
    return pl.Series(name, out, dtype=dtype)


def _relaxed(name: str, dtype: pl.DataType, parts: list, heights: list[int]) -> pl.Series:
    """The parts cast to the joined type, a missing one as nulls, as one chunk."""
    filled = [
        part.cast(dtype) if part is not None else pl.repeat(None, h, dtype=dtype, eager=True)
        for part, h in zip(parts, heights, strict=True)
    ]
    parts.clear()
    return pl.concat(filled, rechunk=True).alias(name)
