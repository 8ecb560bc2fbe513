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
  mid-write. Everything before it is kept.

TensorBoard's own loader and tbparse stop silently at the first bad record,
dropping everything after it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

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

    kind: str  # "data_crc", "length_crc" or "truncated"
    record: int  # 1-based number of the record where it happened
    offset: int  # byte offset of that record's header
    skipped_bytes: int

    def describe(self) -> str:
        if self.kind == "data_crc":
            return f"record {self.record} at byte offset {self.offset}: data CRC mismatch; record skipped"
        if self.kind == "length_crc":
            return (
                f"record {self.record} at byte offset {self.offset}: length CRC mismatch; "
                f"skipped {self.skipped_bytes} bytes to the next valid record"
            )
        return (
            f"record {self.record} at byte offset {self.offset}: cut off mid-write "
            f"({self.skipped_bytes} bytes); kept the records before it"
        )


@dataclass
class RecordReader:
    """Iterate `(record_number, payload)` over one file's bytes; problems are collected."""

    data: bytes
    verify_data: bool = True
    problems: list[Problem] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        from google_crc32c import value as crc32c

        data, size = self.data, len(self.data)
        unpack_header, unpack_crc = HEADER.unpack_from, CRC.unpack_from
        verify = self.verify_data
        delta = _MASK_DELTA
        pos, number = 0, 0
        while pos < size:
            number += 1
            if size - pos < HEADER_BYTES:
                self.problems.append(Problem("truncated", number, pos, size - pos))
                return
            length, length_crc = unpack_header(data, pos)
            # the masking is inlined: this loop runs once per scalar
            crc = crc32c(data[pos : pos + 8])
            if (((crc >> 15) | (crc << 17)) + delta) & 0xFFFFFFFF != length_crc:
                resume = self._resync(pos + 1)
                skipped = (resume if resume is not None else size) - pos
                self.problems.append(Problem("length_crc", number, pos, skipped))
                if resume is None:
                    return
                pos = resume
                continue
            start = pos + HEADER_BYTES
            end = start + length
            if end + FOOTER_BYTES > size:
                self.problems.append(Problem("truncated", number, pos, size - pos))
                return
            payload = data[start:end]
            if verify:
                crc = crc32c(payload)
                valid = (((crc >> 15) | (crc << 17)) + delta) & 0xFFFFFFFF == unpack_crc(data, end)[
                    0
                ]
            else:
                valid = True
            if not valid:
                self.problems.append(Problem("data_crc", number, pos, end + FOOTER_BYTES - pos))
            else:
                yield number, payload
            pos = end + FOOTER_BYTES

    def _resync(self, start: int) -> int | None:
        """The next offset where a whole, CRC-valid record begins, or None."""
        data, size = self.data, len(self.data)
        for pos in range(start, size - HEADER_BYTES - FOOTER_BYTES + 1):
            length, length_crc = HEADER.unpack_from(data, pos)
            if masked_crc(data[pos : pos + 8]) != length_crc:
                continue
            end = pos + HEADER_BYTES + length
            if end + FOOTER_BYTES > size:
                continue
            if masked_crc(data[pos + HEADER_BYTES : end]) == CRC.unpack_from(data, end)[0]:
                return pos
        return None
