"""A large plain JSONL log read a piece at a time, never held whole (issue 15).

Read whole, a 1.5 GB log costs its bytes, the parser's own copy of them and
the frame, all at once. Here the file is read in pieces of about
`PIECE_BYTES`, each cut at its last newline (the partial line is carried into
the next piece), and each piece goes through the same screen and readers as a
whole log (`jsonl.parse_piece`), its lines numbered from where it starts. The
pieces' frames are joined at the end; a key that first appears in a later
piece is a new column, and a column that is whole numbers in one piece and
fractional in another becomes Float64, as the whole-log readers make it.

Compressed logs, and logs no larger than one piece, are read whole: this
returns None for them. So it does when the pieces' columns cannot be joined
(a key that is a number in one piece and an object in another), and the
whole-log path decides, as before.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, NamedTuple

import polars as pl

from stabilitycli.core import progress
from stabilitycli.core.memory_cap import memory_capped
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import (
    ROW,
    RunData,
    metrics_as_floats,
    one_chunk_frame,
    unread_columns,
    without_columns,
)
from stabilitycli.frame.join import joined_by_rank
from stabilitycli.ingest import bounded
from stabilitycli.ingest.jsonl import parse as jsonl
from stabilitycli.ingest.jsonl.kept import KeptPieces
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions

_INT32_LIMIT = 2**31
# the bytes at a piece's end searched for its last newline before it is read (`_Pieces`):
# a line of a metrics log is far shorter
_PROBE_BYTES = 64 << 10
# the fewest rows a chunk of a piece's column may hold on average and be kept as it is
# (`_lean`): polars reading 4 MB blocks makes chunks of 26,000 (160-byte lines) to 62,000
# rows (66 bytes), by default 3,000 to 7,000, which leave the pages among them unused
_PACKED_CHUNK_ROWS = 1 << 14
# pieces parsed at once where nothing caps memory (`_ahead`): polars' reader leaves gaps on
# the cores while it parses one piece, which a second piece's parse fills (400 MB of the
# 64-rank log in 16 MB pieces: 0.92 s one after another, 0.85 s two at once); the second
# holds a piece's bytes, its screen and its parse's buffers more (the 10M-row log's read
# peaked 16-30 MB higher, 725 -> 745 MB at 64 ranks)
_PARSED_AT_ONCE = 2


def read_in_pieces(
    path: Path, source: SourceInfo, options: ReadOptions, piece_bytes: int
) -> RunData | None:
    """The run, read in pieces of `piece_bytes`; None when the log is to be read whole."""
    limits = options.limits
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= piece_bytes or bounded.compression_of(handle.read(4)) is not None:
            return None
        bounded.refuse_oversize(path, size, limits)
        handle.seek(0)
        # filled here, handed back only when the pieces join: else the whole-log path
        # starts again from the caller's untouched source
        trial = copy.deepcopy(source)
        kept = KeptPieces(size)
        lines_before = 0
        pieces = _Pieces(handle, path, piece_bytes, limits)
        at_once = 1 if memory_capped() else _PARSED_AT_ONCE
        try:
            with ThreadPoolExecutor(at_once, thread_name_prefix="stab-read") as pool:
                for piece, screened, bytes_read, parsed in _ahead(pieces, pool, options, at_once):
                    lines_before = _parse(
                        piece, screened, lines_before, trial, options, kept, parsed
                    )
                    progress.tell("read", bytes_read, size, rows=lines_before)
            carry = pieces.carry
            cut_line = None
            if carry:
                last, cut = jsonl.strip_truncated_tail(carry, limits)
                if cut is not None:
                    cut_line = lines_before + cut
                lines_before = _parse(
                    last, bounded.screen_lines(last, limits), lines_before, trial, options, kept
                )
            frames, spilled = kept.finished()
        finally:
            kept.close()
    if cut_line is not None:
        # said first, as the whole-log path says it
        trial.warnings.insert(
            len(source.warnings),
            f"line {cut_line}: {jsonl.TRUNCATED_REASON}; kept everything before it",
        )
    if not frames:
        if cut_line is not None and not trial.rows_rejected:
            trial.reject(cut_line, jsonl.TRUNCATED_REASON)
            trial.rows_read = 1
            raise jsonl.only_a_cut_line(trial, cut_line)
        raise jsonl.nothing_read(trial)
    try:
        raw, in_rank_order = _joined(frames, options, spilled)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        return None
    if trial.rows_rejected:
        jsonl.warn_rejected(trial)
    if cut_line is not None:
        trial.reject(cut_line, jsonl.TRUNCATED_REASON)
    run = jsonl.finish(raw, trial, options, in_rank_order=in_rank_order)
    _adopt(source, trial)
    return run


def _joined(
    frames: list[pl.DataFrame], options: ReadOptions, spilled: bool = False
) -> tuple[pl.DataFrame, bool]:
    """The pieces joined (`frames` emptied), and whether their rows came out sorted by rank.

    A per-rank log is joined in rank order when nothing `finalize` does before its sort
    by rank depends on the rows' order: it has a step key (without one, steps are numbered
    in row order) and no text column (an `N/M` step's example and planned lengths are
    taken in row order). The rows it drops are then the same, and named by line.
    `spilled`: `frames` is one frame of columns mapped from files (`KeptPieces`): kept as
    it is, or, a per-rank log's, put in rank order into files again (`joined_by_rank`),
    where `finalize`'s sort by rank would copy every column into memory."""
    if len(frames) < 2 and not spilled:
        return one_chunk_frame(frames), False
    schema = pl.concat([f.clear() for f in frames], how="diagonal_relaxed").schema
    step_key, rank_key = jsonl.axis_keys(list(schema), options)
    if step_key not in schema or not all(dtype.is_numeric() for dtype in schema.values()):
        rank_key = None
    if len(frames) < 2 and (rank_key is None or rank_key not in schema):
        return one_chunk_frame(frames), False
    return joined_by_rank(frames, rank_key)


class _Ready(NamedTuple):
    """A piece of whole lines made ready on a worker thread (`_ahead`)."""

    piece: bytes
    screened: bounded.Screened
    bytes_read: int  # the file's bytes read up to the piece's end
    parsed: jsonl.Parsed | None  # its parse, when done ahead (`jsonl.clean_parse`)


def _ahead(
    pieces: _Pieces, pool: ThreadPoolExecutor, options: ReadOptions, at_once: int
) -> Iterator[_Ready]:
    """The pieces in the file's order, each read and screened on `pool`, where the caller
    parses it in turn while the next one is read (`at_once` 1: one parse at a time, as a
    cap on memory wants); else each is parsed on `pool` too (`jsonl.clean_parse`, which
    depends on nothing read before it), `at_once` pieces at a time, and the caller only
    numbers, rejects and keeps them in order. A piece with a bad line, or one the fast
    readers refuse, is still parsed by the caller in its turn (`parse_piece`).

    Held at once: `at_once` pieces in the works besides the one the caller holds; the
    next piece starts when the caller is done with this one, so that a piece the caller
    parses line by line makes no third parse at once."""
    turns = itertools.count()
    ahead = at_once > 1

    def submit() -> None:
        window.append(pool.submit(_ready, pieces, next(turns), options, ahead))

    window: deque = deque()
    for _ in range(at_once):
        submit()
    while (ready := window.popleft().result()) is not None:
        if not ahead:
            submit()  # the next piece is read and screened while this one is parsed
        yield ready
        if ahead:
            submit()


def _ready(pieces: _Pieces, turn: int, options: ReadOptions, ahead: bool) -> _Ready | None:
    """Piece number `turn` read (after every earlier one), screened and, when `ahead`,
    parsed; None at the file's end."""
    got = pieces.next(turn)
    if got is None:
        return None
    piece, bytes_read = got
    screened = bounded.screen_lines(piece, pieces.limits)
    parsed = jsonl.clean_parse(piece, screened, options) if ahead else None
    return _Ready(piece, screened, bytes_read, parsed)


class _Pieces:
    """The file's whole lines a piece at a time (`next`), one thread reading at a time and
    in turn; what follows the last newline is left in `carry`."""

    def __init__(self, handle: BinaryIO, path: Path, piece_bytes: int, limits: InputLimits):
        self.handle, self.path, self.piece_bytes, self.limits = handle, path, piece_bytes, limits
        self.carry = b""
        self.bytes_read = 0
        self._turn = 0
        self._turns = threading.Condition()

    def next(self, turn: int) -> tuple[bytes, int] | None:
        """Piece number `turn` (from 0; waits for the earlier ones to be read) and the bytes
        read up to its end; None at the end."""
        with self._turns:
            self._turns.wait_for(lambda: self._turn == turn)
            try:
                return self._next()
            finally:
                self._turn += 1
                self._turns.notify_all()

    def _next(self) -> tuple[bytes, int] | None:
        while block := self._read():
            end = block.rfind(b"\n") + 1
            if end == len(block) and not self.carry:  # read to a line's end: as it is
                return block, self.bytes_read
            if end == 0:  # one line longer than a piece: keep reading until it ends
                self.carry += block
                continue
            # one copy of the piece: slicing `block` and then joining would make two
            piece = b"".join((self.carry, memoryview(block)[:end]))
            self.carry = block[end:]
            return piece, self.bytes_read
        return None

    def _read(self) -> bytes:
        """The next block of about a piece, counted against the limit; b"" at the end.

        With nothing carried, the block is read to the last newline of its piece, found
        first in the piece's last bytes: it is then the piece itself, where a block cut
        at any byte is copied once more, joined to what the last one left over (16 MB a
        piece, and pages to fault in for the copy)."""
        length = self.piece_bytes if self.carry else self._to_line_end()
        block = self.handle.read(length)
        self.bytes_read += len(block)
        if self.bytes_read > self.limits.max_input_bytes:
            raise bounded.limit_hit(
                str(self.path),
                "the file grew past the limit while read",
                "max_input_bytes",
                self.limits.max_input_bytes,
            )
        return block

    def _to_line_end(self) -> int:
        """The bytes from here to the last newline within a piece, or a piece's worth
        when its last `_PROBE_BYTES` hold none (or the file ends first)."""
        start = self.handle.tell()
        probe_bytes = min(_PROBE_BYTES, self.piece_bytes)
        self.handle.seek(start + self.piece_bytes - probe_bytes)
        probe = self.handle.read(probe_bytes)
        self.handle.seek(start)
        newline = probe.rfind(b"\n")
        if len(probe) < probe_bytes or newline < 0:
            return self.piece_bytes
        return self.piece_bytes - probe_bytes + newline + 1


def _parse(
    piece: bytes,
    screened: bounded.Screened,
    lines_before: int,
    source: SourceInfo,
    options: ReadOptions,
    kept: KeptPieces,
    parsed: jsonl.Parsed | None = None,
) -> int:
    """Parse one piece of whole lines into `kept` (`parsed`: its parse done ahead); the
    number of lines read so far."""
    if piece and not jsonl.blank(piece):
        raw = jsonl.parse_piece(
            piece,
            lines_before + 1,
            source,
            options,
            whole=False,
            screened=screened,
            parsed=parsed,
        )
        if raw is not None:
            kept.add(_lean(raw, lines_before + screened.newlines, options), len(piece))
    return lines_before + screened.newlines


def _lean(raw: pl.DataFrame, lines_through: int, options: ReadOptions) -> pl.DataFrame:
    """A piece without what the join would carry for nothing: the clock columns finalize
    never reads (epoch, timestamps: one float column of the whole log each), the columns
    that can hold no metric (text, objects: `metrics_as_floats`), and line numbers in 32
    bits while they fit (half the column); each column in one chunk."""
    keep = tuple(k for k in (options.step_key, options.rank_key) if k)
    raw = without_columns(raw, unread_columns(raw.columns, keep))
    named = (*keep, *options.metric_overrides.values(), jsonl.LOGGED_ROW)
    raw = metrics_as_floats(raw, named)
    if lines_through < _INT32_LIMIT and raw.schema[ROW] == pl.Int64:
        # a Series (an expression would rechunk the whole piece: `parse_piece`)
        raw = raw.with_columns(raw[ROW].cast(pl.Int32))
    # polars parses a 16 MB piece into some 34 chunks a column by default, left among the
    # pages of its freed temporaries: held so until the join, the pieces of the 10M-row,
    # 64-rank log took 835 MB for 572 MB of columns, 687 MB copied into one chunk a column
    # here. The `stab` command has polars read in larger blocks (`cli.ALLOCATOR_SETTINGS`):
    # its few chunks pack as tightly without the copy
    if raw.height < _PACKED_CHUNK_ROWS * max(c.n_chunks() for c in raw.get_columns()):
        raw = raw.rechunk()
    return raw


def _adopt(source: SourceInfo, trial: SourceInfo) -> None:
    """The caller holds `source`: give it everything the pieces found."""
    source.__dict__.update(trial.__dict__)
