"""Weights & Biases offline runs: the `run-<id>.wandb` transaction log, read without wandb.

Accepted paths: the `.wandb` file, its `offline-run-*` (or `run-*`) folder, or
a `wandb/` folder holding one run (several: the error lists them, and
`options.run` picks one by id or folder name).

File layout (observed with wandb 0.31; shared/research/formats.md 4.3):

* a 7-byte header `:W&B` + magic 0xBEE1 (little-endian) + version 0;
* LevelDB-log framing in 32 KiB blocks counted from the start of the file:
  each chunk is `crc32 (u32 LE) | length (u16 LE) | type (u8)` + payload, the
  CRC being zlib's CRC-32 over the type byte and the payload; types 1 FULL,
  2 FIRST, 3 MIDDLE, 4 LAST; fewer than 7 bytes left in a block are padding;
* each reassembled payload is a protobuf `wandb.Record`. Only what is needed
  is decoded, by a small wire-format reader below: `history` (field 2) ->
  `HistoryItem`s (`key` 1, `nested_key` 2 joined with `/`, `value_json` 16),
  the step (`HistoryRecord.step.num`), and the run config (Record field 5,
  and `RunRecord` 17 -> `config` 4) for the dtype.

Values are JSON text with bare `NaN` / `Infinity` / `-Infinity`: parsed with
`json.loads`, which accepts them (after a check, without recursion, that a
value is not nested past `max_json_depth`). A damaged chunk (bad CRC, a header
that cannot be) costs its record, rejected with its byte offset: reading picks
up at the next chunk whose header and CRC are valid, not at the next block. A
record over `max_record_bytes` is skipped unread. A file cut off mid-chunk (the
run was killed) keeps every whole record before the cut, with a warning.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.ingest import bounded
from stabilitycli.ingest.folders import list_folder
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.options import ReadOptions

NAME = "wandb_offline"
MAGIC = b":W&B\xe1\xbe"
HEADER_LEN = 7
BLOCK_LEN = 32768
CHUNK_HEADER_LEN = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RECORD_HISTORY, RECORD_CONFIG, RECORD_RUN = 2, 5, 17
_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(\w+)$")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return bool(_run_files(path))
    return path.name.endswith(".wandb") or head.startswith(MAGIC)


def _run_files(folder: Path) -> list[Path]:
    """The .wandb files of a run folder, or of the run folders inside a wandb/ folder."""
    entries = list_folder(folder)
    own = [p for p in entries if p.name.endswith(".wandb")]
    if own:
        return own
    found: list[Path] = []
    for child in entries:
        if child.is_dir() and not child.is_symlink() and _RUN_DIR.match(child.name):
            found.extend(p for p in list_folder(child) if p.name.endswith(".wandb"))
    return found


def resolve(path: Path, options: ReadOptions) -> Path:
    if not path.is_dir():
        return path
    files = _run_files(path)
    if options.run:
        files = [f for f in files if options.run in f.name or options.run in f.parent.name]
    if not files:
        raise StabInputError(
            str(path),
            "no run-<id>.wandb file here"
            + (f" matching --run {options.run!r}" if options.run else ""),
        )
    if len(files) > 1:
        names = ", ".join(f.parent.name for f in files[:10])
        raise StabInputError(
            str(path), f"{len(files)} W&B runs here ({names}); choose one with --run ID"
        )
    return files[0]


def read(path: Path, options: ReadOptions):
    file = resolve(path, options)
    history = History(file, options)
    data = bounded.read_input(file, options.limits).data
    history.header(data)
    history.add(data, 0)
    return history.run_data()


@dataclass
class Walk:
    """Where reading stopped: the end of the last whole record (absolute byte offset)."""

    pos: int = HEADER_LEN
    after_damage: bool = False  # fragments there belong to a record counted as damaged


class History:
    """The history rows and config of one `.wandb` file, read at once or in stretches.

    A live follower gives `add` each stretch the file grew by, from `walk.pos`
    on: a record the writer has not finished waits for the next stretch, and the
    rows, rejections and config come out as one whole read of the same bytes.
    """

    def __init__(self, file: Path, options: ReadOptions) -> None:
        self.file, self.options = file, options
        self.source = SourceInfo(path=str(file), format=NAME, run=_run_id(file))
        self.rows: list[dict] = []
        self.config: dict[str, object] = {}
        self.count = 0  # records read
        self.walk = Walk()

    def header(self, data: bytes, live: bool = False) -> bool:
        """Check the file header; False while a live file is too short to tell."""
        where = str(self.file)
        if not data:
            if live:
                return False
            raise StabInputError(where, "the file is empty")
        if not data.startswith(MAGIC):
            # a damaged header over whole chunks is still the log: the chunks carry their CRCs
            found = _resync(data, 0) if len(data) > HEADER_LEN else None
            if found is None and live:
                return False
            if found != HEADER_LEN:
                raise StabInputError(where, "not a W&B transaction log (no `:W&B` header)")
            self.source.warnings.append(
                f"the file header is damaged ({data[:HEADER_LEN]!r}); its chunks are whole and read"
            )
        return True

    def add(self, data: bytes, offset: int, live: bool = False) -> int:
        """Read the records in `data`, the file's bytes from `offset` on; returns how many.

        Blocks are counted from the start of the file, so a stretch starting inside
        a block is read behind zero bytes standing for the block's start."""
        lead = offset % BLOCK_LEN
        buffer = bytes(lead) + data if lead else data
        limits = self.options.limits
        before = self.count
        walked = records(
            buffer, self.source, limits, walk=self.walk, shift=offset - lead, live=live
        )
        for payload in walked:
            self.count += 1
            self._record(payload, self.count, limits)
        return self.count - before

    def _record(self, payload: bytes, number: int, limits: InputLimits) -> None:
        for field, wire, value in _fields(payload):
            if wire != 2:
                continue  # every message this reads is length-delimited; damage made it a number
            if field == RECORD_HISTORY:
                row = _history(value, number, self.source, limits)
                if row is not None:
                    self.rows.append(row)
            elif field == RECORD_CONFIG:
                self.config.update(_config(value, limits))
            elif field == RECORD_RUN:
                for run_field, run_wire, run_value in _fields(value):
                    if run_field == 4 and run_wire == 2:
                        self.config.update(_config(run_value, limits))

    def run_data(self, source: SourceInfo | None = None):
        """The canonical run of the rows read (`source`: a copy to fill, for a live follower)."""
        import polars as pl

        from stabilitycli.frame import finalize

        source = source or self.source
        if not self.rows:
            raise StabInputError(str(self.file), f"no history record among {self.count} records")
        _dtype(self.config, source)
        raw = pl.DataFrame(self.rows, infer_schema_length=None)
        step_key = "_step" if "_step" in raw.columns else None
        source.rows_read = raw.height + source.rows_rejected
        return finalize(raw, source, step_key=step_key, overrides=self.options.metric_overrides)


def _run_id(file: Path) -> str | None:
    match = _RUN_DIR.match(file.parent.name)
    return match.group(1) if match else file.stem.removeprefix("run-")


def records(
    data: bytes,
    source: SourceInfo,
    limits: InputLimits | None = None,
    *,
    walk: Walk | None = None,
    shift: int = 0,
    live: bool = False,
):
    """Reassembled record payloads; damaged records counted, a cut-off tail warned about.

    After damage (a bad CRC, a chunk header that cannot be) reading picks up at
    the next chunk whose header and CRC are valid, found byte by byte: one bad
    byte costs its record, not the rest of the block. A record over
    max_record_bytes is skipped unread (its chunks are still walked, to keep
    the framing).

    `data` is the file from byte `shift` on, and reading starts at `walk.pos`;
    `walk` is left at the end of the last whole record. `live`: the file is
    still being written, so a record cut off at the end (or damage with nothing
    valid after it yet) is not reported: it waits, unread, for more bytes.
    """
    limit = (limits or limits_in_force()).max_record_bytes
    walk = walk if walk is not None else Walk()
    pos = walk.pos - shift
    after_damage = walk.after_damage
    size = len(data)
    pending: bytearray | None = None
    pending_at = pending_size = 0  # where the record being reassembled began, its size
    oversized = False  # the record being reassembled is too big: its bytes are not kept
    while pos < size:
        if pending is None and not oversized:
            walk.pos, walk.after_damage = pos + shift, after_damage
        chunk = _chunk_at(data, pos)
        if chunk == _PADDING:
            pos += BLOCK_LEN - pos % BLOCK_LEN
            continue
        found = None
        if chunk == _SHORT or chunk is None:
            found = _resync(data, pos) if pos + CHUNK_HEADER_LEN <= size else None
            if found is None and live:
                return  # the writer is still writing here
        if chunk == _SHORT and found is None:
            _cut(source, pos + shift)  # nothing valid after it: the file ends inside this chunk
            return
        if chunk == _SHORT or chunk is None:
            # a length that runs past the end, with whole chunks after it, is damage too
            if chunk == _SHORT:
                what = "a length that runs past the end of the file"
            elif _crc_fails(data, pos):
                what = "bad CRC"
            else:
                what = "a chunk header that cannot be"
            at = pos + shift
            if pending is not None or oversized:
                source.reject(None, f"record at byte {pending_at} damaged ({what} at byte {at})")
            elif _lost_record(data, pos, found):
                source.reject(None, f"record at byte {at} damaged ({what}); skipped")
            pending, oversized, after_damage = None, False, True
            if found is None:
                return
            pos = found
            continue
        kind, payload_start, end = chunk
        if kind in (FULL, FIRST):
            after_damage = False
            if pending is not None or oversized:
                source.reject(None, f"record at byte {pending_at} lost its last fragment")
                pending, oversized = None, False
            walk.pos, walk.after_damage = pos + shift, False
        if kind == FULL:
            if end - payload_start > limit:
                source.reject(None, _too_big(pos + shift, end - payload_start, limit))
            else:
                yield data[payload_start:end]
        elif kind == FIRST:
            pending, pending_at, pending_size = bytearray(), pos + shift, 0
        if kind in (FIRST, MIDDLE, LAST):
            if pending is None and not oversized:
                if not after_damage:
                    source.reject(
                        None, f"record fragment at byte {pos + shift} without its first part"
                    )
                pos = end
                continue
            pending_size += end - payload_start
            if pending_size > limit:
                pending, oversized = None, True
            elif pending is not None:
                pending += data[payload_start:end]
            if kind == LAST:
                if oversized:
                    source.reject(None, _too_big(pending_at, pending_size, limit))
                elif pending is not None:
                    yield bytes(pending)
                pending, oversized = None, False
        pos = end
    if pending is None and not oversized:
        # padding may run past what is written yet: the next stretch starts where it stops
        walk.pos, walk.after_damage = min(pos, size) + shift, after_damage
    elif not live:
        _cut(source, pos + shift)


_PADDING = (0, 0, 0)  # what _chunk_at finds besides a chunk (or None, for damage)
_SHORT = (0, 0, 1)


def _chunk_at(data: bytes, pos: int) -> tuple[int, int, int] | None:
    """(kind, payload start, end) of a valid chunk at `pos`; _PADDING, _SHORT or None (damage)."""
    left_in_block = BLOCK_LEN - pos % BLOCK_LEN
    if left_in_block < CHUNK_HEADER_LEN:
        return _PADDING  # block trailer
    if pos + CHUNK_HEADER_LEN > len(data):
        return _SHORT
    crc, length, kind = struct.unpack_from("<IHB", data, pos)
    if kind == 0 and length == 0 and crc == 0:
        return _PADDING  # zero padding to the end of the block
    if kind not in (FULL, FIRST, MIDDLE, LAST) or length > left_in_block - CHUNK_HEADER_LEN:
        return None
    start = pos + CHUNK_HEADER_LEN
    if start + length > len(data):
        return _SHORT
    if zlib.crc32(data[start : start + length], zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
        return None
    return kind, start, start + length


def _crc_fails(data: bytes, pos: int) -> bool:
    """A header that could be a chunk's, whose CRC does not match its payload."""
    _, length, kind = struct.unpack_from("<IHB", data, pos)
    left = BLOCK_LEN - pos % BLOCK_LEN - CHUNK_HEADER_LEN
    return kind in (FULL, FIRST, MIDDLE, LAST) and length <= left


def _resync(data: bytes, pos: int) -> int | None:
    """The offset of the next valid chunk after damage at `pos`, or None if there is none.

    First where the damaged chunk says it ends (its length may be intact), then
    offset by offset. A false match needs a type byte, a length that fits the
    block, a plausible next header and a CRC-32 over the bytes that follow all
    to agree by chance.
    """
    said = pos + CHUNK_HEADER_LEN + struct.unpack_from("<H", data, pos + 4)[0]
    if said < len(data) and _is_chunk(data, said):
        return said
    start = pos + 1
    while start + CHUNK_HEADER_LEN <= len(data):
        # whole blocks at a time: numpy's cost per call, not per byte, dominates small windows
        stop = min((start // BLOCK_LEN + _SCAN_BLOCKS) * BLOCK_LEN, len(data))
        found = _scan(data, start, stop)
        if found is not None:
            return found
        start = stop
    return None


_SCAN_BLOCKS = 64


def _scan(data: bytes, start: int, stop: int) -> int | None:
    """The first valid chunk starting in [start, stop), tested cheaply first (numpy)."""
    import numpy as np

    last = stop - CHUNK_HEADER_LEN  # the last offset whose header fits before `stop`
    if last < start:
        return None
    buf = np.frombuffer(data, dtype=np.uint8, count=stop - start, offset=start)
    kinds = buf[6 : last - start + 7]
    # a resync needs a record's start: a MIDDLE or LAST part would be skipped anyway.
    # The type byte rules out all but about 1 offset in 128; the rest is done on those
    at = np.flatnonzero((kinds == FULL) | (kinds == FIRST))
    lengths = buf[at + 4].astype(np.int64) | (buf[at + 5].astype(np.int64) << 8)
    offsets = at + start
    block_end = np.minimum((offsets // BLOCK_LEN + 1) * BLOCK_LEN, len(data))
    ends = offsets + CHUNK_HEADER_LEN + lengths
    plausible = ends <= block_end
    # and what follows must be another chunk's type byte, padding, or the block's end:
    # this spares the CRC of nearly every false candidate in a run of garbage
    room = plausible & (block_end - ends >= CHUNK_HEADER_LEN) & (ends + 6 < stop)
    after = np.zeros(at.size, dtype=np.uint8)
    after[room] = buf[ends[room] + 6 - start]
    plausible &= ~room | (after <= LAST)
    for at in offsets[plausible].tolist():
        if _is_chunk(data, at):
            return int(at)
    return None


def _is_chunk(data: bytes, at: int) -> bool:
    chunk = _chunk_at(data, at)
    return chunk is not None and chunk != _SHORT and chunk != _PADDING


def _lost_record(data: bytes, pos: int, found: int | None) -> bool:
    """Whether skipped bytes held a record: a flipped byte in zero padding is none.

    Every chunk has a CRC and a length, so a record leaves more than a few
    bytes that are not zero.
    """
    skipped = data[pos:found]
    return len(skipped) - skipped.count(0) > 4


def _too_big(pos: int, length: int, limit: int) -> str:
    return f"record at byte {pos} of {length:,} bytes, over max_record_bytes = {limit:,}; skipped"


def _cut_warning(pos: int) -> str:
    return (
        f"the file ends inside a record (byte {pos}): the run was cut off while writing; "
        "kept every whole record before it"
    )


def _cut(source: SourceInfo, pos: int) -> None:
    source.warnings.append(_cut_warning(pos))
    source.reject(None, "last record cut off mid-write")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


class _Malformed(ValueError):
    """A protobuf message that ends mid-field or uses a wire type that does not exist."""


def _fields(buf: bytes, strict: bool = False):
    """(field number, wire type, value) of a protobuf message; stops at damage.

    `strict`: damage raises `_Malformed` instead, for a record whose every field
    matters (a history row must not lose a metric unnoticed).
    """
    pos = 0
    size = len(buf)
    value: int | bytes  # varint fields are numbers, the others raw bytes
    while pos < size:
        try:
            tag, pos = _varint(buf, pos)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value, pos = _varint(buf, pos)
            elif wire == 1:
                value, pos = buf[pos : pos + 8], pos + 8
            elif wire == 2:
                length, pos = _varint(buf, pos)
                value, pos = buf[pos : pos + length], pos + length
            elif wire == 5:
                value, pos = buf[pos : pos + 4], pos + 4
            else:
                raise _Malformed(f"wire type {wire} at byte {pos}")
        except ValueError as err:
            if strict:
                raise _Malformed(str(err)) from None
            return
        if pos > size:
            if strict:
                raise _Malformed(f"a field runs past the end ({size} bytes)")
            return
        yield field, wire, value


class _TooDeep(ValueError):
    pass


def _item(buf: bytes, limits: InputLimits, strict: bool = False) -> tuple[str, object]:
    """A HistoryItem / ConfigItem: (key, parsed value).

    Raises `_TooDeep` for a value nested past max_json_depth (it never reaches
    `json.loads`, which would recurse), `_Malformed` (strict) for damage.
    """
    key = ""
    nested: list[str] = []
    value: object = None
    for field, wire, raw in _fields(buf, strict):
        if field == 1 and wire == 2:
            key = raw.decode("utf-8", "replace")
        elif field == 2 and wire == 2:
            nested.append(raw.decode("utf-8", "replace"))
        elif field == 16 and wire == 2:
            deep = bounded.depth_fault(raw, limits)
            if deep is not None:
                raise _TooDeep(deep)
            try:
                value = json.loads(raw)
            except ValueError:
                value = None
        elif field == 6 and wire == 1:  # typed double (newer writers)
            value = struct.unpack("<d", raw)[0]
        elif field == 5 and wire == 0:  # typed int64
            value = raw - (1 << 64) if raw >= 1 << 63 else raw
    return ("/".join(nested) if nested else key), value


def _history(buf: bytes, number: int, source: SourceInfo, limits: InputLimits) -> dict | None:
    """One history record as a row, or None when it is rejected (with its reason)."""
    try:
        row, reason = _history_row(buf, number, limits)
    except _Malformed as err:
        row, reason = None, f"history record damaged ({err})"
    except _TooDeep as err:
        row, reason = None, f"history value {err}"
    if reason is not None:
        source.reject(number, reason)
        return None
    return row


def _history_row(buf: bytes, number: int, limits: InputLimits) -> tuple[dict | None, str | None]:
    row: dict = {"_row": number}
    step_num = None
    for field, wire, raw in _fields(buf, strict=True):
        if field == 1 and wire == 2:
            key, value = _item(raw, limits, strict=True)
            if key == "_step" and not _is_number(value):
                return None, f"_step is {_kind(value)}, not a number"
            if not _is_number(value):
                continue  # media, histograms, text: not scalar metrics
            row[key] = value
        elif field == 2 and wire == 2:
            for sub, sub_wire, sub_raw in _fields(raw, strict=True):
                if sub == 1 and sub_wire == 0:
                    step_num = sub_raw
                elif sub == 1:
                    return None, "the step is binary, not a number"
    if "_step" not in row and step_num is not None:
        row["_step"] = step_num - (1 << 64) if step_num >= 1 << 63 else step_num
    # a _step past int64 is no step (finalize says so); any integer past a float is +/-inf
    bounded.widen_ints(row)
    if len(row) == 1:
        return None, "history record without a scalar value"
    return row, None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: object) -> str:
    names = {list: "a JSON list", dict: "a JSON object", bool: "a bool", str: "text"}
    return names.get(type(value), "missing" if value is None else type(value).__name__)


def _config(buf: bytes, limits: InputLimits) -> dict[str, object]:
    out = {}
    for field, wire, raw in _fields(buf):
        if field == 1 and wire == 2:
            try:
                key, value = _item(raw, limits)
            except _TooDeep:
                continue  # a config value too deep to read names no dtype
            out[key] = value
    return out


def _dtype(config: dict[str, object], source: SourceInfo) -> None:
    from stabilitycli.ingest.dtype import dtype_from

    found = dtype_from(("W&B run config", config))
    if found is not None:
        source.dtype, source.dtype_origin = found
