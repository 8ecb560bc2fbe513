"""JSON Lines logs: one JSON object per line, as training scripts write them.

Three readers, fastest first, so that the common case is fast and the odd
case is still exact:

1. polars' NDJSON reader, when the bytes hold no bare NaN/Infinity token;
2. pyarrow's JSON reader, which parses Python's bare `NaN`, `Infinity` and
   `-Infinity` tokens natively (polars rejects them) at about 1.7x the time;
3. a per-line `json.loads` pass, only when a line is malformed or a key
   changes type in a way pyarrow refuses: it names every bad line.

A last line cut off mid-write (the job died) is dropped with a warning before
any reader sees it: it would make both fast readers raise.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl

from stabilitycli import aliases
from stabilitycli.errors import StabInputError
from stabilitycli.frame import ROW, RunData, finalize
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

NAME = "jsonl"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_NONFINITE_TOKENS = (b"NaN", b"Infinity")
TRUNCATED_REASON = "last line cut off mid-write (the job died while writing)"


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name.lower()
    if any(
        name.endswith(ext) for ext in (".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".ndjson.gz")
    ):
        return True
    text = _maybe_decompress_head(head)
    return text.lstrip().startswith(b"{") and b"\n" in text and not name.endswith(".json")


def _maybe_decompress_head(head: bytes) -> bytes:
    if head.startswith(GZIP_MAGIC):
        import zlib

        try:
            return zlib.decompressobj(31).decompress(head, 4096)
        except zlib.error:
            return b""
    if head.startswith(ZSTD_MAGIC):
        return b"{\n"  # a compressed stream we cannot peek cheaply; JSONL is the likely content
    return head


def read_bytes(path: Path) -> bytes:
    """File contents, decompressed when the magic bytes say gzip or zstd."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    compression = None
    if magic.startswith(GZIP_MAGIC):
        compression = "gzip"
    elif magic.startswith(ZSTD_MAGIC):
        compression = "zstd"
    if compression is None:
        return path.read_bytes()
    import pyarrow as pa

    try:
        with pa.input_stream(str(path), compression=compression) as stream:
            return stream.read()
    except (OSError, pa.ArrowException) as err:
        # a compressed log cut off mid-write: keep what decompresses
        return _partial_decompress(path, compression, err)


def _partial_decompress(path: Path, compression: str, err: Exception) -> bytes:
    if compression == "gzip":
        import zlib

        decoder = zlib.decompressobj(31)
        try:
            return decoder.decompress(path.read_bytes())
        except zlib.error:
            pass
    raise StabInputError(str(path), f"cannot decompress {compression} stream: {err}")


def read(path: Path, options: ReadOptions) -> RunData:
    data = read_bytes(path)
    source = SourceInfo(path=str(path), format=NAME, run=path.parent.name or None)
    return parse_bytes(data, source, options)


def parse_bytes(data: bytes, source: SourceInfo, options: ReadOptions) -> RunData:
    """Parse JSONL bytes into the canonical frame (also used by per-rank readers)."""
    data, cut_line = _strip_truncated_tail(data)
    if cut_line is not None:
        source.warnings.append(f"line {cut_line}: {TRUNCATED_REASON}; kept everything before it")
    if not data.strip():
        if cut_line is not None:
            source.reject(cut_line, TRUNCATED_REASON)
            source.rows_read = 1
        raise StabInputError(source.path, "no JSON lines to read (the file is empty)")
    raw = _fast_parse(data)
    if raw is None:
        raw = _slow_parse(data, source)
    if cut_line is not None:
        source.reject(cut_line, TRUNCATED_REASON)
    source.rows_read = raw.height + source.rows_rejected
    step_key = options.step_key or aliases.find_key(raw.columns, aliases.STEP_KEYS)
    if options.step_key and options.step_key not in raw.columns:
        raise StabInputError(
            source.path, f"--step-key {options.step_key!r} is not a key in the log"
        )
    rank_key = options.rank_key or aliases.find_key(raw.columns, aliases.RANK_KEYS)
    return finalize(
        raw, source, step_key=step_key, rank_key=rank_key, overrides=options.metric_overrides
    )


def _strip_truncated_tail(data: bytes) -> tuple[bytes, int | None]:
    """Drop a final line that has no newline and is not complete JSON.

    Returns the data to parse and the 1-based number of the dropped line. A
    last line that ends in a newline was written whole: if it is bad, it is a
    malformed line like any other, not a cut-off one.
    """
    if not data or data.endswith(b"\n"):
        return data, None
    cut = data.rfind(b"\n")
    last = data[cut + 1 :]
    if not last.strip() or _is_json(last):
        return data + b"\n", None
    return data[: cut + 1], data.count(b"\n", 0, cut + 1) + 1


def _is_json(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _line_numbers(data: bytes) -> np.ndarray:
    """1-based line numbers of the non-blank lines, the rows the fast readers return."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if ends.size == 0 or ends[-1] != buf.size - 1:
        ends = np.append(ends, buf.size)
    starts = np.concatenate(([0], ends[:-1] + 1))
    nonblank = (ends - starts) > 0
    return (np.flatnonzero(nonblank) + 1).astype(np.int64)


def _fast_parse(data: bytes) -> pl.DataFrame | None:
    has_tokens = any(token in data for token in _NONFINITE_TOKENS)
    try:
        if not has_tokens:
            frame = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
        else:
            import pyarrow.json as pa_json

            block = max(1 << 20, min(len(data) + 1, 64 << 20))
            table = pa_json.read_json(
                io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=block)
            )
            frame = cast(pl.DataFrame, pl.from_arrow(table))  # a Table converts to a DataFrame
    except Exception:
        return None
    if b"\n\n" in data or data.startswith(b"\n") or b"\n\r\n" in data:
        rows = _line_numbers(data)
        if rows.size != frame.height:
            return None
    else:
        rows = np.arange(1, frame.height + 1, dtype=np.int64)
    return frame.with_columns(pl.Series(ROW, rows))


def _slow_parse(data: bytes, source: SourceInfo) -> pl.DataFrame:
    """Exact per-line pass: keeps scalar fields, names every line it cannot read."""
    records: list[dict] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except UnicodeDecodeError as err:
            # a byte the job wrote while dying (or a binary blob) spoils that line only
            source.reject(number, f"not UTF-8 text (byte {err.start + 1} of the line)")
            continue
        except json.JSONDecodeError as err:
            source.reject(number, f"not valid JSON ({err.msg})")
            continue
        except ValueError as err:  # e.g. a number too deep or too long for the parser
            source.reject(number, f"not valid JSON ({err})")
            continue
        if not isinstance(obj, dict):
            source.reject(number, f"a JSON {type(obj).__name__}, not an object")
            continue
        record = {k: v for k, v in obj.items() if isinstance(v, (int, float, str)) or v is None}
        record[ROW] = number
        records.append(record)
    if not records:
        raise StabInputError(
            source.path,
            "no JSON object could be read"
            + (
                f" (first bad line {source.rejections[0].line}: {source.rejections[0].reason})"
                if source.rejections
                else ""
            ),
        )
    if source.rows_rejected:
        first = source.rejections[0]
        source.warnings.append(
            f"{source.rows_rejected} line(s) could not be read; first at line {first.line}: "
            f"{first.reason}"
        )
    return pl.DataFrame(records, infer_schema_length=None, strict=False)
