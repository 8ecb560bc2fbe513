"""JSON Lines logs: one JSON object per line, as training scripts write them.

Three readers, fastest first, so that the common case is fast and the odd
case is still exact:

1. polars' NDJSON reader with the schema of the first lines, kept only when
   it provably dropped no key (`parse._polars_parse`); it raises on a bare
   NaN/Infinity token or a later value of another type;
2. pyarrow's JSON reader, which parses Python's bare `NaN`, `Infinity` and
   `-Infinity` tokens natively, in blocks (then polars over every line when a
   key changes type between blocks);
3. a per-line `json.loads` pass, only when a line is malformed or a key
   changes type in a way neither accepts: it names every bad line.

A plain log larger than `PIECE_BYTES` goes through the same steps a piece at a
time (`pieces`), so the file is never held whole.

A last line cut off mid-write (the job died) is dropped with a warning before
any reader sees it: it would make both fast readers raise.

No parser sees a line over `max_line_bytes` or nested deeper than
`max_json_depth` (pyarrow's parser overflows the C stack on 100k-deep nesting,
`json.loads` raises RecursionError): a vectorised screen (`ingest.bounded`) finds them
first and they are rejected by number, so the rest still takes a fast path.
Compressed logs are inflated within the same limits.
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import RunData
from stabilitycli.ingest import bounded
from stabilitycli.ingest.bounded import GZIP_MAGIC, ZSTD_MAGIC
from stabilitycli.ingest.jsonl.parse import parse_bytes
from stabilitycli.ingest.jsonl.pieces import read_in_pieces
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.options import ReadOptions

NAME = "jsonl"


_JSON_OBJECT = re.compile(rb"\s*\{\s*[\"}]")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name.lower()
    if any(
        name.endswith(ext) for ext in (".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".ndjson.gz")
    ):
        return True
    text = _maybe_decompress_head(head)
    # `{"` opens a JSON object; `{'` is a Python dict printed with repr (`dictlog`'s)
    return _JSON_OBJECT.match(text) is not None and b"\n" in text and not name.endswith(".json")


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


def read_bytes(path: Path, limits: InputLimits | None = None) -> bytes:
    """File contents, decompressed when the magic bytes say gzip or zstd, within the limits.

    A compressed log cut off mid-write keeps what decompresses.
    """
    return bounded.read_input(path, limits or limits_in_force()).data


# a plain log larger than this is parsed a piece of about this size at a time: the file is
# never held whole, and no parser copies more than a piece (issue 15)
PIECE_BYTES = 16 << 20


def read(path: Path, options: ReadOptions) -> RunData:
    source = SourceInfo(path=str(path), format=NAME, run=path.parent.name or None)
    run = read_in_pieces(path, source, options, PIECE_BYTES)
    if run is not None:
        return run
    loaded = bounded.read_input(path, options.limits)
    source.warnings.extend(loaded.warnings)
    return parse_bytes(loaded.data, source, options)
