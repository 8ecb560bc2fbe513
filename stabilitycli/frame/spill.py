"""A run's columns held in files the process maps, not in its own memory (issue 40).

A 100M-row log's columns are about 5 GB as the rules read them (Float64): more than a
2 GiB memory limit allows, however the read is cut up. Written to a file and mapped, a
column's pages are the file's: the kernel reads them in as the rules touch them and, under
a memory cgroup, drops them again when it needs room (they are clean once written), where
anonymous memory over the limit ends the process. numpy maps the file and polars borrows
numpy's buffer, so the rules read a mapped column as they read any one-chunk column, and
compute the same numbers from the same bits.

Chosen on its own when a memory limit (a cgroup's, or the data segment's) leaves less
than twice the columns (`spill_wanted`), or asked for (`STAB_SPILL=1`; `STAB_SPILL=0`
never): a run that fits its memory reads faster from it.
Each file is removed as soon as it is mapped, so nothing is left behind, whatever ends the
process; the disk space is given back when the column is let go.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

SPILL_ENV = "STAB_SPILL"


def spill_wanted(columns_bytes: int | Callable[[], int] | None = None) -> bool:
    """Whether the run's columns go to mapped files: `STAB_SPILL=1` always, `STAB_SPILL=0`
    never; otherwise when a memory limit that the files' pages escape leaves less room
    than `memory_cap.ROOM_PER_COLUMN_BYTE` times the columns (`columns_bytes`, or a
    callable that works them out, asked only under such a limit): the rules' own arrays
    are about half the columns again, and without the files the run would be ended at the
    limit, with no word."""
    said = os.environ.get(SPILL_ENV, "").strip()
    if said in ("0", "1"):
        return said == "1"
    if columns_bytes is None:
        return False
    from stabilitycli.core.memory_cap import ROOM_PER_COLUMN_BYTE, room_beside_files

    room = room_beside_files()
    if room is None:
        return False
    needed = columns_bytes() if callable(columns_bytes) else columns_bytes
    return needed * ROOM_PER_COLUMN_BYTE > room


def mapped_buffer(rows: int, dtype: np.dtype) -> np.ndarray:
    """A writable array of `rows` values backed by a file of its own (removed already)."""
    size = max(1, rows * np.dtype(dtype).itemsize)
    handle, name = tempfile.mkstemp(prefix="stab-spill-", suffix=".col")
    try:
        os.ftruncate(handle, size)
        pages = mmap.mmap(handle, size)
    finally:
        os.close(handle)
        os.unlink(name)
    return np.frombuffer(pages, dtype=dtype, count=rows)


def small_page_buffer(rows: int, dtype: np.dtype) -> np.ndarray:
    """A writable array of `rows` values in the process's own memory, in small pages.

    numpy asks the kernel for huge pages (2 MiB) for a large array. Filled as a transpose
    fills it, a stretch per rank at a time, each stretch's first write takes a whole huge
    page: 64 ranks held 128 MB of pages ahead of the values written into them (the join by
    rank, 30M rows). Filled in order, a huge page's first write can still wait while the
    kernel compacts memory to make one: the join of a 10M-row log's seven columns took
    0.2-1.4 s (by how fragmented the machine's memory was) against 0.3 s here. Mapped
    without that advice, a write takes a 4 KiB page."""
    size = max(1, rows * np.dtype(dtype).itemsize)
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(pages, dtype=dtype, count=rows)


def settled(values: np.ndarray) -> None:
    """The array's written pages sent to its file: clean pages the kernel may drop and read
    back, where dirty ones it must write first."""
    base = values.base
    if isinstance(base, mmap.mmap):
        base.flush()


class ColumnFiles:
    """Columns appended a piece at a time, each to its own file, then mapped (`series`)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="stab-spill-"))
        self._files: dict[str, object] = {}
        self._dtypes: dict[str, np.dtype] = {}
        self.rows: dict[str, int] = {}

    def append(self, name: str, values: np.ndarray) -> None:
        """`values` written after the column's earlier pieces (one dtype for them all)."""
        if name not in self._files:
            self._files[name] = open(self.folder / f"{len(self._files)}.col", "wb")  # noqa: SIM115
            self._dtypes[name] = values.dtype
            self.rows[name] = 0
        assert values.dtype == self._dtypes[name]
        self._files[name].write(np.ascontiguousarray(values).data)  # type: ignore[attr-defined]
        self.rows[name] += values.size

    def series(self, name: str, dtype: pl.DataType) -> pl.Series:
        """The column, mapped from its file (the file then removed)."""
        handle = self._files.pop(name)
        handle.close()  # type: ignore[attr-defined]
        path = self.folder / Path(handle.name).name  # type: ignore[attr-defined]
        rows, np_dtype = self.rows[name], self._dtypes[name]
        with open(path, "rb") as file:
            pages = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if rows else None
        path.unlink()
        if pages is None:
            return pl.Series(name, np.zeros(0, dtype=np_dtype), dtype=dtype)
        return pl.Series(name, np.frombuffer(pages, dtype=np_dtype, count=rows), dtype=dtype)

    def close(self) -> None:
        """Every file not yet mapped removed, and the folder."""
        for handle in self._files.values():
            handle.close()  # type: ignore[attr-defined]
            Path(handle.name).unlink(missing_ok=True)  # type: ignore[attr-defined]
        self._files.clear()
        with contextlib.suppress(OSError):
            self.folder.rmdir()
