"""TFRecord framing, the container of TensorBoard event files, with CRC checks.

Each record (little-endian):

    uint64 length
    uint32 masked_crc32c(the 8 length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

CRC-32C comes from `google-crc32c` (C, releases the GIL). What happens on bad bytes:

* data CRC mismatch: the length is trusted (its own CRC passed), so only that
  record is skipped and reading goes on with the next one;
* length CRC mismatch: the length cannot be trusted, so we scan forward, byte
  by byte, for the next position where a length and its CRC agree (and the
  data CRC of that record too), and resume there;
* a record that runs past the end of the file: the writer was killed
  mid-write. Everything before it is kept;
* a record longer than `max_record_bytes` (an image or a graph: no scalar is
  that big) is stepped over unread, its length taken from its CRC-checked
  header; the caller maps the file, so its pages are never loaded;
* a resync looks `RESYNC_WINDOW` bytes ahead at most: past that, the walk
  stops and says how many bytes after the damage were not read.

TensorBoard's own loader and tbparse stop silently at the first bad record,
dropping everything after it.

`frame_records` reads the whole file at once and returns where the valid
records are as numpy arrays, so the caller can decode them in bulk; the walk
checks repeating stretches of records in bulk too (see its docstring).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import field
from typing import TYPE_CHECKING

from stabilitycli.core.records import dataclass

if TYPE_CHECKING:  # numpy is imported where it is used, not when the CLI starts
    import numpy as np

HEADER = struct.Struct("<QI")
CRC = struct.Struct("<I")
HEADER_BYTES = 12
FOOTER_BYTES = 4
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """CRC-32C, rotated and offset the way TFRecord stores it."""
    from google_crc32c import value as crc32c

    return _mask(crc32c(data))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Problem:
    """Bytes that could not be read as a record."""

    kind: str  # "data_crc", "length_crc", "damaged_end", "oversize" or "truncated"
    record: int  # 1-based number of the record where it happened
    offset: int  # byte offset of that record's header
    skipped_bytes: int

    def describe(self) -> str:
        if self.kind == "data_crc":
            return (
                f"record {self.record} at byte offset {self.offset}: data CRC mismatch; "
                "record skipped"
            )
        if self.kind == "length_crc":
            return (
                f"record {self.record} at byte offset {self.offset}: length CRC mismatch; "
                f"skipped {self.skipped_bytes} bytes to the next valid record"
            )
        if self.kind == "damaged_end":
            return (
                f"record {self.record}: damaged at byte {self.offset} (length CRC mismatch, "
                f"no valid record within {RESYNC_WINDOW} bytes after it); "
                f"{self.skipped_bytes} bytes after it not read"
            )
        if self.kind == "oversize":
            return (
                f"record {self.record} at byte offset {self.offset}: "
                f"{self.skipped_bytes - HEADER_BYTES - FOOTER_BYTES} bytes, over "
                "max_record_bytes; skipped unread"
            )
        return (
            f"record {self.record} at byte offset {self.offset}: cut off mid-write "
            f"({self.skipped_bytes} bytes); kept the records before it"
        )


@dataclass
class Framing:
    """Where the valid records of one file are: parallel numpy int64 arrays, in file order.

    `numbers` are 1-based record numbers (a skipped record keeps its number),
    `starts`/`ends` the payload byte offsets; records that failed a check are
    not in the arrays but in `problems`, ordered by record number.
    """

    numbers: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    problems: list[Problem]


# distinct headers remembered as CRC-verified; a header is 12 bytes, so this stays small
_VERIFIED_HEADERS_MAX = 4096
# the bulk walk looks for a repeating pattern of up to this many records (tags logged per step)
_PERIOD_MAX = 32
# records walked one by one before looking for a repeating pattern (doubles while none is found)
_WINDOW_MIN, _WINDOW_MAX = 2 * _PERIOD_MAX, 8192
_CYCLES_FIRST = 256  # cycles compared by the first bulk look-ahead; doubles while they all match
# how far past a damaged length a resync looks for the next record: scalar records are
# tens of bytes apart, and a scan of the whole rest of a big file would take minutes
RESYNC_WINDOW = 8 << 20
_RESYNC_CHUNK = 1 << 16
# the default of InputLimits.max_record_bytes, for callers that pass none
_RECORD_BYTES_MAX = 64 << 20


def frame_records(
    data: bytes, verify_data: bool = True, max_record_bytes: int = _RECORD_BYTES_MAX
) -> Framing:
    """Walk the framing of one file's bytes, checking every header and data CRC.

    Finding where each record starts is sequential (each length says where the
    next header is), so it is the one per-record loop of the reader. Two things
    keep it short. A header (length + its CRC) is 12 bytes that repeat from
    record to record, so each distinct header is CRC-checked once and
    remembered: identical bytes have the identical CRC, so every header is
    still checked. And a training log repeats itself: the same tags every step
    give the same record lengths in the same order, so once a period of P
    records repeats, the next cycles are checked in bulk with numpy (every
    header of every cycle byte-equal to the verified one) instead of stepped
    through. The data CRC of every record is computed after the walk and
    compared to the stored ones in bulk.
    """
    import numpy as np

    walk = _Walk(data, max_record_bytes)
    walk.run()
    starts = walk.starts()
    count = starts.size
    bumps = np.array(walk.bumps, dtype=np.int64)
    index = np.arange(count, dtype=np.int64)
    numbers = index + 1 + np.searchsorted(bumps, index, side="right")
    ends = np.empty(count, dtype=np.int64)
    # the next record's header follows this one's footer, except across a resync and at the end
    ends[:-1] = starts[1:] - HEADER_BYTES - FOOTER_BYTES
    for i in {*(b - 1 for b in walk.bumps if 0 < b <= count), count - 1} - {-1}:
        ends[i] = starts[i] + HEADER.unpack_from(data, int(starts[i]) - HEADER_BYTES)[0]
    problems = walk.problems
    valid = np.ones(count, dtype=bool)
    if verify_data and count:
        valid = _data_crc_ok(data, starts, ends)
        for i in np.flatnonzero(~valid).tolist():
            header_at = int(starts[i]) - HEADER_BYTES
            span = int(ends[i]) + FOOTER_BYTES - header_at
            problems.append(Problem("data_crc", int(numbers[i]), header_at, span))
        problems.sort(key=lambda problem: problem.record)
    return Framing(numbers[valid], starts[valid], ends[valid], problems)


def _data_crc_ok(data: bytes, starts, ends):
    """Whether each payload's masked CRC-32C equals the one stored after it (bool array)."""
    import numpy as np
    from google_crc32c import value as crc32c

    buffer = np.frombuffer(data, dtype=np.uint8)
    stored = buffer[ends[:, None] + np.arange(4)].copy().view("<u4").ravel().astype(np.int64)
    # one C call per payload; a comprehension is the cheapest way to make a million of them
    crc = np.array(
        [crc32c(data[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)],
        dtype=np.int64,
    )
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF == stored


class _Walk:
    """The record walk of `frame_records`: payload starts, problems, record numbers used up."""

    def __init__(self, data: bytes, max_record_bytes: int = _RECORD_BYTES_MAX) -> None:
        import numpy as np

        self.data = data
        self.max_record_bytes = max_record_bytes
        self.buffer = np.frombuffer(data, dtype=np.uint8)
        self.size = len(data)
        self.chunks: list = []  # payload starts found in bulk, numpy arrays
        self.bulk_count = 0
        self.recent: list[int] = []  # payload starts found one by one since the last chunk
        self.problems: list[Problem] = []
        self.bumps: list[int] = []  # records before each length-CRC problem: it uses up a number
        self.verified: dict[bytes, int] = {}

    def starts(self):
        import numpy as np

        self._flush()
        if not self.chunks:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(self.chunks)

    def _flush(self) -> None:
        import numpy as np

        if self.recent:
            self.chunks.append(np.array(self.recent, dtype=np.int64))
            self.bulk_count += len(self.recent)
            self.recent = []

    def _number(self) -> int:
        """The 1-based number of the record being read now."""
        return self.bulk_count + len(self.recent) + len(self.bumps) + 1

    def run(self) -> None:
        data, size, verified = self.data, self.size, self.verified
        pos, window, stepped = 0, _WINDOW_MIN, 0
        while pos < size:
            if stepped >= window:
                pos, gained = self._jump(pos)
                # nothing repeats here: look again later, so a log without a pattern
                # pays for few look-aheads
                window = _WINDOW_MIN if gained else min(2 * window, _WINDOW_MAX)
                stepped = 0
                continue
            header = data[pos : pos + HEADER_BYTES]
            length = verified.get(header)
            if length is None:
                if len(header) < HEADER_BYTES:
                    self.problems.append(Problem("truncated", self._number(), pos, size - pos))
                    return
                length, length_crc = HEADER.unpack(header)
                if masked_crc(header[:8]) != length_crc:
                    number = self._number()
                    resume = _resync(data, pos + 1, self.max_record_bytes)
                    if resume is None:
                        self.problems.append(Problem("damaged_end", number, pos, size - pos))
                        return
                    self.problems.append(Problem("length_crc", number, pos, resume - pos))
                    self._skip_number(number)
                    pos, stepped = resume, 0
                    continue
                if len(verified) < _VERIFIED_HEADERS_MAX and length <= self.max_record_bytes:
                    verified[header] = length
            start = pos + HEADER_BYTES
            end = start + length
            if end + FOOTER_BYTES > size:
                self.problems.append(Problem("truncated", self._number(), pos, size - pos))
                return
            if length > self.max_record_bytes:
                # its header is CRC-checked, so the length can be trusted to step over it
                number = self._number()
                self.problems.append(Problem("oversize", number, pos, end + FOOTER_BYTES - pos))
                self._skip_number(number)
                pos, stepped = end + FOOTER_BYTES, 0
                continue
            self.recent.append(start)
            stepped += 1
            pos = end + FOOTER_BYTES

    def _skip_number(self, number: int) -> None:
        """A record not taken uses up its number, and no pattern may span the gap."""
        self.bumps.append(number - len(self.bumps) - 1)
        self._flush()

    def _jump(self, pos: int) -> tuple[int, int]:
        """Take every whole repetition of the last records' pattern from `pos`.

        Returns (new pos, records taken)."""
        import numpy as np
        from numpy.lib.stride_tricks import as_strided

        recent = self.recent
        period = _period([self.data[s - HEADER_BYTES : s] for s in recent[-2 * _PERIOD_MAX :]])
        if period is None:
            return pos, 0
        first = recent[-period] - HEADER_BYTES
        cycle = pos - first  # bytes of one repetition
        offsets = np.array([s - HEADER_BYTES - first for s in recent[-period:]], dtype=np.int64)
        headers = [self.buffer[first + o : first + o + HEADER_BYTES] for o in offsets.tolist()]
        taken, limit = 0, _CYCLES_FIRST
        while True:
            cycles = min(limit, (self.size - pos) // cycle)  # whole cycles left in the file
            if cycles == 0:
                break
            same = np.ones(cycles, dtype=bool)
            for offset, header in zip(offsets.tolist(), headers, strict=True):
                # row j = the 12 header bytes of this record in cycle j, without a copy
                view = as_strided(
                    self.buffer[pos + offset :],
                    shape=(cycles, HEADER_BYTES),
                    strides=(cycle, 1),
                    writeable=False,
                )
                same &= (view == header).all(axis=1)
            whole = cycles if same.all() else int(np.argmin(same))
            if whole:
                self._flush()
                heads = pos + np.arange(whole, dtype=np.int64)[:, None] * cycle + offsets
                self.chunks.append((heads + HEADER_BYTES).ravel())
                self.bulk_count += whole * period
                pos += whole * cycle
                taken += whole * period
            if whole < cycles:
                break
            limit *= 2
        return pos, taken


def _period(headers: list[bytes]) -> int | None:
    """The smallest P such that the last 2P headers are one block of P repeated, or None."""
    for period in range(1, len(headers) // 2 + 1):
        if headers[-period:] == headers[-2 * period : -period]:
            return period
    return None


@dataclass
class RecordReader:
    """Iterate `(record_number, payload)` over one file's bytes; problems are collected."""

    data: bytes
    verify_data: bool = True
    problems: list[Problem] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        framing = frame_records(self.data, self.verify_data)
        self.problems = framing.problems
        data = self.data
        for number, start, end in zip(
            framing.numbers.tolist(), framing.starts.tolist(), framing.ends.tolist(), strict=True
        ):
            yield number, data[start:end]


def _resync(data: bytes, start: int, max_record_bytes: int = _RECORD_BYTES_MAX) -> int | None:
    """The next offset where a whole, CRC-valid record begins, within RESYNC_WINDOW, or None.

    Most offsets cannot start a record at all (their 8 bytes read as a length
    longer than the rest of the file or than `max_record_bytes`); numpy sets
    those aside at once, and only the rest pay for a CRC.
    """
    import numpy as np

    size = len(data)
    last = min(size - HEADER_BYTES - FOOTER_BYTES, start + RESYNC_WINDOW)
    buffer = np.frombuffer(data, dtype=np.uint8)
    # in chunks: the next record is nearly always a few bytes on, and memory stays small
    for first in range(start, last + 1, _RESYNC_CHUNK):
        count = min(_RESYNC_CHUNK, last + 1 - first)
        lengths = np.ndarray(shape=(count,), dtype="<u8", buffer=buffer, offset=first, strides=(1,))
        room = size - HEADER_BYTES - FOOTER_BYTES - np.arange(first, first + count, dtype=np.int64)
        fits = np.flatnonzero(lengths <= np.minimum(room, max_record_bytes).astype(np.uint64))
        # the length CRC depends on the 8 length bytes only: one CRC per distinct length, so
        # a run of zero bytes (every offset a candidate of length 0) costs one CRC, not millions
        distinct, which = np.unique(lengths[fits], return_inverse=True)
        crcs = np.array([masked_crc(int(n).to_bytes(8, "little")) for n in distinct.tolist()])
        stored = np.ndarray(
            shape=(count,), dtype="<u4", buffer=buffer, offset=first + 8, strides=(1,)
        )[fits]
        for pos in (first + fits[crcs.astype(np.uint32)[which.ravel()] == stored]).tolist():
            (length,) = struct.unpack_from("<Q", data, pos)
            end = pos + HEADER_BYTES + length
            if masked_crc(data[pos + HEADER_BYTES : end]) == CRC.unpack_from(data, end)[0]:
                return pos
    return None
