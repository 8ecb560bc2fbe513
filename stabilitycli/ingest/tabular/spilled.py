"""A Parquet table read a row group at a time into mapped column files (`frame.spill`).

Read as `tables.load_table` reads it (the same projection, validation and limits), but
each row group's columns are appended to their files and let go before the next group is
read: what the process holds of the table at once is one row group, and the columns it
hands on are mapped from their files. A column that has a null in some group, or no
number type, is held in memory instead, joined as the plain read joins it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from stabilitycli.frame import ROW
from stabilitycli.frame.rank_sort import NUMPY_EXACT
from stabilitycli.frame.spill import ColumnFiles
from stabilitycli.ingest.limits import InputLimits, limit_hit


def read_parquet_spilled(path: Path, limits: InputLimits, skipped: set[str]) -> pl.DataFrame:
    """The table, less the columns in `skipped` (unless that leaves none), with its row
    numbers first as `_row` (Int32 while they fit), its columns one chunk each; raises
    `UNSPILLABLE` for a table the plain read is to read (damaged, empty, past a limit, a
    logged `_row`, a column whose type changes between row groups)."""
    import numpy as np

    parquet = opened_parquet(path, limits)
    meta = parquet.metadata
    names = parquet.schema_arrow.names
    columns = [n for n in names if n not in skipped] if len(skipped) < len(names) else names
    if ROW in columns:
        raise _Unspillable  # a logged `_row` is renamed by the plain read
    if meta.num_rows == 0:
        raise _Unspillable
    row_type = np.int32 if meta.num_rows < 2**31 else np.int64
    files = ColumnFiles()
    held: dict[str, list[pl.Series]] = {}
    dtypes: dict[str, pl.DataType] = {}
    rows, held_bytes = 0, 0.0
    try:
        for i in range(meta.num_row_groups):  # loop over row groups, not rows
            part = _group(parquet, i, columns)
            held_bytes += part.estimated_size()
            if held_bytes > limits.max_input_bytes:
                raise _Unspillable  # the plain read says which limit, as it always has
            for name in part.columns:  # loop over columns, not rows
                column = part.drop_in_place(name)
                dtypes.setdefault(name, column.dtype)
                if column.dtype != dtypes[name]:
                    raise _Unspillable
                if name not in held and column.dtype in NUMPY_EXACT and not column.null_count():
                    files.append(name, column.to_numpy())
                    continue
                if name not in held:  # its earlier groups, mapped, then held with the rest
                    held[name] = [files.series(name, dtypes[name])] if name in files.rows else []
                held[name].append(column)
            files.append(ROW, np.arange(rows + 1, rows + part.height + 1, dtype=row_type))
            rows += part.height
        row_dtype: pl.DataType = pl.Int32() if row_type == np.int32 else pl.Int64()
        out = {ROW: files.series(ROW, row_dtype)}
        out |= {
            name: pl.concat(held[name], rechunk=True) if name in held else files.series(name, dtype)
            for name, dtype in dtypes.items()
        }
    finally:
        files.close()
    return pl.DataFrame(out)


def opened_parquet(path: Path, limits: InputLimits):
    """The Parquet file, opened; refused when its row groups inflate past the limit (the
    footer states each one's size once decompressed: checked before anything is read)."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(str(path))
    meta = parquet.metadata
    inflated = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if inflated > limits.max_input_bytes:
        raise limit_hit(
            str(path),
            f"the table holds {inflated} bytes once decompressed",
            "max_input_bytes",
            limits.max_input_bytes,
        )
    return parquet


class _Unspillable(Exception):
    """A table the spilled read does not take: the plain read reads it."""


UNSPILLABLE = _Unspillable


def _group(parquet, i: int, columns: list[str]) -> pl.DataFrame:
    """One row group, validated; a damaged one is left to the plain read, which names it."""
    from polars.exceptions import PanicException

    try:
        table = parquet.read_row_group(i, columns=columns)
        table.validate(full=True)
        frame = pl.from_arrow(table)
    except (Exception, PanicException):
        raise _Unspillable from None
    assert isinstance(frame, pl.DataFrame)
    return frame
