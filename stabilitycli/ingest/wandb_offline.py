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
`json.loads`, which accepts them. A chunk with a bad CRC is rejected with its
byte offset and reading goes on at the next chunk; a file cut off mid-chunk
(the run was killed) keeps every whole record before the cut, with a warning.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path

from stabilitycli.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

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
    own = sorted(folder.glob("*.wandb"))
    if own:
        return own
    found = []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and not child.is_symlink() and _RUN_DIR.match(child.name):
            found.extend(sorted(child.glob("*.wandb")))
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
    import polars as pl

    from stabilitycli.frame import finalize

    file = resolve(path, options)
    data = file.read_bytes()
    source = SourceInfo(path=str(file), format=NAME, run=_run_id(file))
    if not data:
        raise StabInputError(str(file), "the file is empty")
    if not data.startswith(MAGIC):
        raise StabInputError(str(file), "not a W&B transaction log (no `:W&B` header)")
    rows: list[dict] = []
    config: dict[str, object] = {}
    n_records = 0
    for number, payload in enumerate(records(data, source), start=1):
        n_records = number
        for field, _, value in _fields(payload):
            if field == RECORD_HISTORY:
                row = _history(value, number, source)
                if row is not None:
                    rows.append(row)
            elif field == RECORD_CONFIG:
                config.update(_config(value))
            elif field == RECORD_RUN:
                for run_field, _, run_value in _fields(value):
                    if run_field == 4:
                        config.update(_config(run_value))
    if not rows:
        raise StabInputError(str(file), f"no history record among {n_records} records")
    _dtype(config, source)
    raw = pl.DataFrame(rows, infer_schema_length=None)
    step_key = "_step" if "_step" in raw.columns else None
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key=step_key, overrides=options.metric_overrides)


def _run_id(file: Path) -> str | None:
    match = _RUN_DIR.match(file.parent.name)
    return match.group(1) if match else file.stem.removeprefix("run-")


def records(data: bytes, source: SourceInfo):
    """Reassembled record payloads; bad chunks rejected, a cut-off tail warned about."""
    pos = HEADER_LEN
    pending: bytearray | None = None
    size = len(data)
    while pos < size:
        left_in_block = BLOCK_LEN - pos % BLOCK_LEN
        if left_in_block < CHUNK_HEADER_LEN:
            pos += left_in_block  # block trailer padding
            continue
        if pos + CHUNK_HEADER_LEN > size:
            _cut(source, pos)
            return
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0 and crc == 0:
            pos += left_in_block  # zero padding to the end of the block
            continue
        start = pos + CHUNK_HEADER_LEN
        end = start + length
        if end > size:
            _cut(source, pos)
            return
        if length > left_in_block - CHUNK_HEADER_LEN or kind not in (FULL, FIRST, MIDDLE, LAST):
            source.reject(None, f"corrupt chunk header at byte {pos}; skipped to the next block")
            pending = None
            pos += left_in_block
            continue
        payload = data[start:end]
        pos = end
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            source.reject(
                None,
                f"bad CRC in the chunk at byte {end - length - CHUNK_HEADER_LEN}; chunk skipped",
            )
            pending = None
            continue
        if kind == FULL:
            pending = None
            yield payload
        elif kind == FIRST:
            pending = bytearray(payload)
        elif pending is not None:
            pending += payload
            if kind == LAST:
                yield bytes(pending)
                pending = None
    if pending is not None:
        _cut(source, pos)


def _cut(source: SourceInfo, pos: int) -> None:
    source.warnings.append(
        f"the file ends inside a record (byte {pos}): the run was cut off while writing; "
        "kept every whole record before it"
    )
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


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message; stops at damage."""
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
                return
        except ValueError:
            return
        if pos > size:
            return
        yield field, wire, value


def _item(buf: bytes) -> tuple[str, object]:
    """A HistoryItem / ConfigItem: (key, parsed value)."""
    key = ""
    nested: list[str] = []
    value: object = None
    for field, wire, raw in _fields(buf):
        if field == 1 and wire == 2:
            key = raw.decode("utf-8", "replace")
        elif field == 2 and wire == 2:
            nested.append(raw.decode("utf-8", "replace"))
        elif field == 16 and wire == 2:
            try:
                value = json.loads(raw)
            except ValueError:
                value = None
        elif field == 6 and wire == 1:  # typed double (newer writers)
            value = struct.unpack("<d", raw)[0]
        elif field == 5 and wire == 0:  # typed int64
            value = raw - (1 << 64) if raw >= 1 << 63 else raw
    return ("/".join(nested) if nested else key), value


def _history(buf: bytes, number: int, source: SourceInfo) -> dict | None:
    row: dict = {"_row": number}
    step_num = None
    for field, wire, raw in _fields(buf):
        if field == 1 and wire == 2:
            key, value = _item(raw)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # media, histograms, text: not scalar metrics
            row[key] = float(value)
        elif field == 2 and wire == 2:
            for sub, sub_wire, sub_raw in _fields(raw):
                if sub == 1 and sub_wire == 0:
                    step_num = sub_raw
    if "_step" not in row and step_num is not None:
        row["_step"] = float(step_num)
    if len(row) == 1:
        source.reject(number, "history record without a scalar value")
        return None
    return row


def _config(buf: bytes) -> dict[str, object]:
    out = {}
    for field, wire, raw in _fields(buf):
        if field == 1 and wire == 2:
            key, value = _item(raw)
            out[key] = value
    return out


def _dtype(config: dict[str, object], source: SourceInfo) -> None:
    from stabilitycli.ingest._dtype import dtype_from

    found = dtype_from(("W&B run config", config))
    if found is not None:
        source.dtype, source.dtype_origin = found
