"""The parsed pieces of a JSONL log, kept until they are joined: in memory, or in files.

Held in memory, the pieces of a log are its columns whole before the join begins: a log
whose columns are more than a memory limit allows was ended at the limit while it was
still being read, with no word (a container's cgroup kills the process). Where such a
limit leaves too little room for the log's columns (`frame.spill.spill_wanted`, asked once
the first piece tells how many bytes a row takes), each piece's columns are appended to
files of their own instead (`frame.spill.ColumnFiles`) and let go: what the read holds at
once is a piece or two, as a Parquet table read a row group at a time holds one group.
The files are mapped at the end as one frame, which the join takes as its one piece.

A piece that does not continue the pieces before it column for column (a key first seen
in it, one it lacks, a null, another type) ends that: what is on file so far is mapped
as the first frame held, and that piece and the rest are held as before, for the join to
reconcile as it always has. The frame is the same, bit for bit, either way.
"""

from __future__ import annotations

import polars as pl

from stabilitycli.frame.rank_sort import NUMPY_EXACT
from stabilitycli.frame.spill import ColumnFiles, spill_wanted


class KeptPieces:
    """The pieces of one log of `file_bytes` bytes, in the order they are `add`ed."""

    def __init__(self, file_bytes: int):
        self.file_bytes = file_bytes
        self._held: list[pl.DataFrame] = []
        self._files: ColumnFiles | None = None
        self._schema: pl.Schema | None = None
        self._asked = False

    def add(self, piece: pl.DataFrame, piece_bytes: int) -> None:
        """One parsed piece, read from `piece_bytes` bytes of the log."""
        if not self._asked:
            self._asked = True
            if spill_wanted(lambda: self._columns_bytes(piece, piece_bytes)):
                self._files, self._schema = ColumnFiles(), piece.schema
        if self._files is not None:
            if self._continues(piece):
                for name in piece.columns:  # loop over columns, not rows
                    self._files.append(name, piece.drop_in_place(name).to_numpy())
                return
            self._stop_filing()
        self._held.append(piece)

    def finished(self) -> tuple[list[pl.DataFrame], bool]:
        """The frames to join, and whether they are one frame mapped from files."""
        if self._files is None:
            return self._held, False
        if not self._files.rows:
            self._stop_filing()
            return self._held, False
        return [self._mapped()], True

    def close(self) -> None:
        """The files not yet mapped removed (a read that ends early)."""
        if self._files is not None:
            self._files.close()
            self._files = None

    def _columns_bytes(self, piece: pl.DataFrame, piece_bytes: int) -> int:
        """About what the log's columns hold, read off its first piece: its rows a byte
        times the log's bytes, 8 bytes a value."""
        rows = piece.height * self.file_bytes // max(1, piece_bytes)
        return rows * 8 * piece.width

    def _continues(self, piece: pl.DataFrame) -> bool:
        """Whether `piece`'s columns go on from those on file: the same names, in order,
        of the same number types, without nulls."""
        return piece.schema == self._schema and all(
            dtype in NUMPY_EXACT and not piece[name].null_count()
            for name, dtype in piece.schema.items()
        )

    def _stop_filing(self) -> None:
        """Pieces held from here on; what is on file so far, mapped, held first."""
        assert self._files is not None
        if self._files.rows:
            self._held.append(self._mapped())
        else:
            self.close()

    def _mapped(self) -> pl.DataFrame:
        """The columns on file as one frame of mapped columns; no more files after it."""
        files, schema = self._files, self._schema
        assert files is not None and schema is not None
        self._files = None
        try:
            return pl.DataFrame({name: files.series(name, dtype) for name, dtype in schema.items()})
        finally:
            files.close()
