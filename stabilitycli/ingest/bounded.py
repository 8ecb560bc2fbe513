"""Reading untrusted bytes within `InputLimits`: files, compressed streams, JSON lines.

Every reader of a file ends up holding its bytes, and every JSON reader hands
lines to a parser that recurses on nesting. Both are where a hostile or broken
input costs unbounded memory (a gzip bomb inflates 1,000x) or crashes the
process (pyarrow's JSON parser overflows the C stack on 100k-deep nesting, the
stdlib raises RecursionError). The checks here run before any parser sees the
bytes, without recursion, and vectorised so that a clean log pays almost
nothing for them.
"""

from __future__ import annotations

import math
import os
import zlib
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from stabilitycli.core.records import dataclass
from stabilitycli.ingest.limits import InputLimits, limit_hit

if TYPE_CHECKING:
    import numpy as np

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# compressed bytes read at a time; what one read may inflate to is capped separately
# (zlib's max_length, pyarrow's read size), so this only sets the number of calls
_FEED = 1 << 16
# the screen works on windows of the buffer so its temporaries stay small on a huge log,
# and small enough that they stay in the CPU's cache: a 16 MB piece screened in 64 MB
# windows (one) took 21 ms, in 256 KB windows 11 ms (1 MB: 13 ms, 64 KB: 14 ms)
_WINDOW = 256 << 10


@dataclass
class Input:
    """The bytes of a file, decompressed, and what happened on the way."""

    data: bytes
    compression: str | None = None
    # a damaged or cut-off compressed stream: the bytes before the damage are kept
    warnings: list[str] = field(default_factory=list)


def compression_of(head: bytes) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def read_input(path: Path, limits: InputLimits) -> Input:
    """A file's bytes, decompressed when its magic bytes say gzip or zstd, within the limits.

    Decompression stops as soon as the output passes the bound (the ratio times
    the size on disk, and never more than max_input_bytes), so a bomb costs the
    bound, not its inflated size.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        compression = compression_of(handle.read(4))
        handle.seek(0)
        if compression is None:
            return Input(_read_within(handle, path, size, limits))
        by_ratio = limits.max_decompression_ratio * max(size, 1)
        bound = min(by_ratio, limits.max_input_bytes)
        setting = (
            "max_decompression_ratio" if by_ratio < limits.max_input_bytes else "max_input_bytes"
        )
        decode = _gunzip if compression == "gzip" else _unzstd
        return decode(handle, path, bound, setting, limits)


def read_plain(path: Path, limits: InputLimits) -> bytes:
    """A file's bytes as they are (no decompression), refused past max_input_bytes: the one
    bounded read of the table, text-log and MLflow file-store readers."""
    with open(path, "rb") as handle:
        return _read_within(handle, path, os.fstat(handle.fileno()).st_size, limits)


def refuse_oversize(path: Path, size: int, limits: InputLimits) -> None:
    """A file past max_input_bytes is refused whole, before a reader holds any of it."""
    if size > limits.max_input_bytes:
        raise _too_big(path, f"the file is {size:,} bytes", limits)


def _read_within(handle, path: Path, size: int, limits: InputLimits) -> bytes:
    refuse_oversize(path, size, limits)
    # asked for its size and one byte more: read(n) reserves n bytes up front, so asking
    # for the limit reserved 2 GiB of address space for every small log (fatal under
    # `ulimit -v`). The byte more shows a file that grew while read: the rest is read a
    # piece at a time, within the limit.
    data = handle.read(size + 1)
    if len(data) <= size:
        return data
    pieces, total = [data], len(data)
    while piece := handle.read(_FEED * 16):
        total += len(piece)
        if total > limits.max_input_bytes:
            raise _too_big(path, "the file grew past the limit while read", limits)
        pieces.append(piece)
    if total > limits.max_input_bytes:
        raise _too_big(path, "the file grew past the limit while read", limits)
    return b"".join(pieces)


def _too_big(path: Path, what: str, limits: InputLimits):
    return limit_hit(str(path), what, "max_input_bytes", limits.max_input_bytes)


def _over_bound(path: Path, compression: str, setting: str, limits: InputLimits, size: int):
    if setting == "max_decompression_ratio":
        return limit_hit(
            str(path),
            f"the {compression} stream inflates past {limits.max_decompression_ratio}x its "
            f"{size:,} bytes on disk (a decompression bomb, or raise the ratio)",
            setting,
            limits.max_decompression_ratio,
        )
    return limit_hit(
        str(path),
        f"the {compression} stream inflates past the bytes one input may hold",
        setting,
        limits.max_input_bytes,
    )


def _gunzip(handle, path: Path, bound: int, setting: str, limits: InputLimits) -> Input:
    size = os.fstat(handle.fileno()).st_size
    out = bytearray()
    warnings: list[str] = []
    fed = 0
    decoder = zlib.decompressobj(31)
    in_member = False  # the current decoder has been fed part of a member
    data = b""
    while True:
        if not data:
            data = handle.read(_FEED)
            fed += len(data)
            if not data:
                break
        saved = decoder.copy()
        try:
            # max_length: one call never inflates past the room left (+1 to see it pass)
            out += decoder.decompress(data, bound - len(out) + 1)
        except zlib.error as err:
            # the call that met the damage returned nothing: feed its input again in small
            # pieces, to keep what inflates before the damage (a small log is one call)
            out += _before_damage(saved, data, bound - len(out) + 1)
            if not out:
                raise _undecodable(path, "gzip", err) from None
            if len(out) > bound:
                raise _over_bound(path, "gzip", setting, limits, size) from None
            warnings.append(_damaged("gzip", fed, len(out), err))
            return Input(bytes(out), "gzip", warnings)
        in_member = True
        if len(out) > bound:
            raise _over_bound(path, "gzip", setting, limits, size)
        data = decoder.unconsumed_tail
        if decoder.eof:
            # gzip members back to back (`cat a.gz b.gz`, an appended log) are one stream
            data = decoder.unused_data
            decoder = zlib.decompressobj(31)
            in_member = False
            if len(data) < 2:  # too short to tell whether another member follows
                more = handle.read(_FEED)
                fed += len(more)
                data += more
            if data and not data.startswith(GZIP_MAGIC):
                if data.strip(b"\x00"):
                    warnings.append(
                        f"bytes after the end of the gzip stream ignored (byte {fed:,})"
                    )
                break
    if in_member and not decoder.eof:
        warnings.append(_cut("gzip", len(out)))
    return Input(bytes(out), "gzip", warnings)


def _before_damage(decoder, data: bytes, room: int) -> bytes:
    out = bytearray()
    for at in range(0, len(data), 256):
        try:
            out += decoder.decompress(data[at : at + 256], room - len(out))
            while decoder.unconsumed_tail and len(out) < room:
                out += decoder.decompress(decoder.unconsumed_tail, room - len(out))
        except zlib.error:
            break
        if len(out) >= room:
            break
    return bytes(out)


def _unzstd(handle, path: Path, bound: int, setting: str, limits: InputLimits) -> Input:
    import pyarrow as pa

    size = os.fstat(handle.fileno()).st_size
    out = bytearray()
    warnings: list[str] = []
    try:
        # read(n) returns at most n inflated bytes: the stream never runs ahead of the bound
        with pa.input_stream(str(path), compression="zstd") as stream:
            while True:
                piece = stream.read(_FEED)
                if not piece:
                    break
                out += piece
                if len(out) > bound:
                    raise _over_bound(path, "zstd", setting, limits, size)
    except (OSError, pa.ArrowException) as err:
        if not out:
            raise _undecodable(path, "zstd", err) from None
        # pyarrow holds back what it inflated of the last frame: the tail of a cut-off
        # stream may be shorter than what a streaming decoder would give
        warnings.append(_damaged("zstd", None, len(out), err))
    return Input(bytes(out), "zstd", warnings)


def _undecodable(path: Path, compression: str, err: BaseException):
    from stabilitycli.core.errors import StabInputError

    return StabInputError(str(path), f"cannot decompress {compression} stream: {err}")


def _damaged(compression: str, fed: int | None, kept: int, err: BaseException) -> str:
    if "incorrect data check" in str(err):
        # the checksum covers the whole member: the damage may be anywhere in what was kept
        return (
            f"the {compression} stream's checksum does not match what it inflates to (damaged "
            f"somewhere in it); kept the {kept:,} bytes, which may hold altered values"
        )
    where = f" near compressed byte {fed:,}" if fed is not None else ""
    return (
        f"the {compression} stream is damaged{where} ({err}); "
        f"kept the {kept:,} bytes that decompress before it"
    )


def _cut(compression: str, kept: int) -> str:
    return (
        f"the {compression} stream ends early (cut off mid-write); "
        f"kept the {kept:,} bytes that decompress"
    )


# --- JSON lines ----------------------------------------------------------------------------

_OPEN = (ord("{"), ord("["))
_CLOSE = (ord("}"), ord("]"))
_QUOTE = ord('"')
_BACKSLASH = ord("\\")


def json_depth(text: bytes) -> int:
    """The deepest nesting of objects and arrays in JSON text, found without recursion.

    Brackets inside strings do not count; a quote is escaped when an odd run of
    backslashes precedes it, exactly as a JSON parser reads it. Text that is not
    valid JSON gets a number too (a parser stops at the damage, no deeper).
    """
    deepest = 0
    for _, levels in _levels(text):
        if levels.size:
            deepest = max(deepest, int(levels.max()))
    return deepest


def deeper_than(text: bytes, limit: int) -> int | None:
    """The byte offset where nesting first goes past `limit`, or None."""
    import numpy as np

    for base, levels in _levels(text):
        over = np.flatnonzero(levels > limit)
        if over.size:
            return base + int(over[0])
    return None


# bytes scanned per numpy pass: its temporaries are ~15 bytes a byte, so a whole
# trainer_state.json or a 16 MiB line never costs more than this many times 15
_LEVEL_WINDOW = 4 << 20


def _levels(text: bytes):
    """(offset, nesting level after each byte) per window of `text`, strings set aside.

    Each window starts from the state the one before left: the depth, whether
    it ends inside a string, and how many backslashes it ends with.
    """
    import numpy as np

    depth, inside_before, run_before = 0, 0, 0
    for base in range(0, len(text), _LEVEL_WINDOW):
        buf = np.frombuffer(
            text, dtype=np.uint8, count=min(_LEVEL_WINDOW, len(text) - base), offset=base
        )
        index = np.arange(buf.size, dtype=np.int32)
        # for each byte, the offset of the last byte at or before it that is not a
        # backslash; backslashes carried over from the window before sit before offset 0
        last_plain = np.where(buf != _BACKSLASH, index, -1 - run_before)
        np.maximum.accumulate(last_plain, out=last_plain)
        quotes = np.flatnonzero(buf == _QUOTE)
        before = np.maximum(quotes - 1, 0)
        backslashes = np.where(quotes > 0, quotes - 1 - last_plain[before], run_before)
        toggles = np.zeros(buf.size, dtype=np.uint8)
        toggles[quotes[backslashes % 2 == 0]] = 1
        toggles[0] += inside_before
        # inside a string: an odd count of real quotes so far (uint8 wraps, parity holds)
        inside = (np.cumsum(toggles, dtype=np.uint8) & 1).astype(bool)
        run_before = int(buf.size - 1 - last_plain[-1])
        inside_before = int(inside[-1])
        del toggles, last_plain, index
        step = np.zeros(buf.size, dtype=np.int8)
        step[((buf == _OPEN[0]) | (buf == _OPEN[1])) & ~inside] = 1
        step[((buf == _CLOSE[0]) | (buf == _CLOSE[1])) & ~inside] = -1
        levels = np.cumsum(step, dtype=np.int64) + depth
        depth = int(levels[-1])
        yield base, levels


def depth_fault(text: bytes, limits: InputLimits) -> str | None:
    """Why JSON text may not reach a parser that recurses (nested too deep), or None."""
    # text cannot nest deeper than it has opening brackets: most need no scan
    if text.count(b"{") + text.count(b"[") > limits.max_json_depth:
        depth = json_depth(text)
        if depth > limits.max_json_depth:
            return too_deep(depth, limits)
    return None


def line_fault(line: bytes, limits: InputLimits) -> str | None:
    """Why one line may not reach a JSON parser (too long, too deep), or None."""
    if len(line) > limits.max_line_bytes:
        return too_long(len(line), limits)
    return depth_fault(line, limits)


@dataclass
class Screened:
    """Lines of a JSON-lines buffer no parser may see, by 1-based number, with the reason."""

    bad: dict[int, str]
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # line -> (start, end)
    # newline bytes in the buffer, counted on the way: a reader then need not count again
    newlines: int = 0
    # `:` bytes in the buffer, when the screen counted them on the way (`_flat_screen`):
    # the proof that polars dropped no key (`jsonl.parse`) then reads no byte again
    colons: int | None = None

    def blanked(self, data: bytes) -> bytes:
        """The buffer with those lines emptied (their newlines kept, so numbering holds)."""
        if not self.bad:
            return data
        pieces, at = [], 0
        for start, end in sorted(self.spans[n] for n in self.bad):
            pieces.append(data[at:start])
            at = end
        pieces.append(data[at:])
        return b"".join(pieces)


def screen_lines(data: bytes, limits: InputLimits) -> Screened:
    """Every line longer than max_line_bytes or nested deeper than max_json_depth.

    Vectorised over windows of the buffer: a line can only be too deep if it has
    more opening brackets than the limit, and only those few lines are scanned
    exactly (`line_fault`). A clean log costs a few numpy compares per byte.
    """
    import numpy as np

    flat = _flat_screen(data, limits)
    if flat is not None:
        return flat
    bad: dict[int, str] = {}
    spans: dict[int, tuple[int, int]] = {}
    buf = np.frombuffer(data, dtype=np.uint8)
    suspects: set[tuple[int, int, int]] = set()  # (line number, start, end)
    squares = b"[" in data
    lines_before = 0  # newlines before the current window
    line_start = 0  # offset where the line running into the current window began
    for base in range(0, buf.size, _WINDOW):
        window = buf[base : base + _WINDOW]
        ends = np.flatnonzero(window == 10) + base
        if ends.size == 0:
            continue  # all one line, still running: judged where it ends
        starts = np.concatenate(([line_start], ends[:-1] + 1))
        for i in np.flatnonzero(ends - starts > limits.max_line_bytes).tolist():
            bad[lines_before + i + 1] = too_long(int(ends[i] - starts[i]), limits)
            spans[lines_before + i + 1] = (int(starts[i]), int(ends[i]))
        # the first line may have begun in an earlier window: always counted whole below
        suspects.add((lines_before + 1, int(starts[0]), int(ends[0])))
        if _most_brackets_in_a_line(window, buf[starts[1:]], squares) > limits.max_json_depth:
            is_open = (window == _OPEN[0]) | (window == _OPEN[1]) if squares else window == _OPEN[0]
            opens = np.flatnonzero(is_open) + base
            counts = np.bincount(np.searchsorted(ends, opens), minlength=ends.size + 1)
            for i in np.flatnonzero(counts[: ends.size] > limits.max_json_depth).tolist():
                suspects.add((lines_before + i + 1, int(starts[i]), int(ends[i])))
        lines_before += ends.size
        line_start = int(ends[-1]) + 1
    if line_start < buf.size:
        suspects.add((lines_before + 1, line_start, buf.size))
    for number, start, end in suspects:
        if number not in bad:
            fault = line_fault(data[start:end], limits)
            if fault is not None:
                bad[number] = fault
                spans[number] = (start, end)
    return Screened(bad, spans, newlines=lines_before)


def _flat_screen(data: bytes, limits: InputLimits) -> Screened | None:
    """The screen of a buffer no line of which can be too long or too deep, told from counts
    over the whole buffer in one pass; None when the counts cannot tell (`screen_lines`
    then looks line by line).

    No line is longer than the buffer, and none holds more opening brackets than the
    buffer's brackets less one for each other line that begins with `{` (as
    `_most_brackets_in_a_line` bounds a window): a flat log's bound is 1. One pass over
    each 256 KB window counts the newlines, the `{`, the newlines followed by `{` and
    the `:` (which the parse needs: `Screened.colons`), where the screen by windows
    found every newline's offset and the parse counted the `:` in a pass of its own
    (16 MB: 11 + 2 ms, now 8)."""
    import numpy as np

    if len(data) > limits.max_line_bytes or not data:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    is_newline = np.empty(min(buf.size, _WINDOW) + 1, dtype=bool)
    is_byte = np.empty_like(is_newline)
    newlines = braces = line_braces = colons = 0
    for base in range(0, buf.size, _WINDOW):  # loop over windows, not bytes
        # with the next window's first byte: a newline at the window's end and the `{` after
        window = buf[base : base + _WINDOW + 1]
        size, counted = window.size, min(_WINDOW, buf.size - base)
        nl, hit = is_newline[:size], is_byte[:size]
        np.equal(window, 10, out=nl)
        np.equal(window, _OPEN[0], out=hit)
        newlines += int(np.count_nonzero(nl[:counted]))
        braces += int(np.count_nonzero(hit[:counted]))
        np.logical_and(nl[: size - 1], hit[1:], out=nl[: size - 1])
        line_braces += int(np.count_nonzero(nl[: min(counted, size - 1)]))
        np.equal(window, ord(":"), out=hit)
        colons += int(np.count_nonzero(hit[:counted]))
    if b"[" in data:
        braces += int(np.count_nonzero(buf == _OPEN[1]))
    line_braces += int(buf[0] == _OPEN[0])
    if braces - line_braces + 1 > limits.max_json_depth:
        return None
    return Screened({}, {}, newlines=newlines, colons=colons)


def _most_brackets_in_a_line(window: np.ndarray, first_bytes: np.ndarray, squares: bool) -> int:
    """A bound on the opening brackets any one line after the window's first holds.

    Every line that begins with `{` holds at least one, so one line holds at most
    the window's brackets less one for each other such line. A flat log (one `{`
    a line) bounds it at 1 with two counts over the window, where counting per
    line means finding every bracket. Past the limit, the caller counts per line.
    """
    import numpy as np

    brackets = int(np.count_nonzero(window == _OPEN[0]))
    if squares:
        brackets += int(np.count_nonzero(window == _OPEN[1]))
    return brackets - int(np.count_nonzero(first_bytes == _OPEN[0])) + 1


def too_long(size: int, limits: InputLimits) -> str:
    return f"line of {size:,} bytes, over max_line_bytes = {limits.max_line_bytes:,}"


def too_deep(depth: int, limits: InputLimits) -> str:
    return f"JSON nested {depth:,} deep, over max_json_depth = {limits.max_json_depth}"


_INT64 = (-(1 << 63), 1 << 63)


def widen_ints(record: dict) -> None:
    """Integers past int64 become floats in place (polars has no column for them).

    JSON holds integers of any length; a metric of 10**30 is still a number, a
    float, and a step that large is no step (finalize rejects it). Past a
    float's range the value is +/-inf, as pyarrow's reader and a float literal
    of that size (`1e400`) give it, so every path reads the same line alike.
    """
    for key, value in record.items():
        if type(value) is int and not _INT64[0] <= value < _INT64[1]:
            try:
                record[key] = float(value)
            except OverflowError:
                record[key] = math.inf if value > 0 else -math.inf
