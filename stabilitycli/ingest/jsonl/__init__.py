"""JSON lines, plain or gzip / zstd compressed: `reader` sniffs and reads a log,
`pieces` reads a large one in pieces, `parse` turns bytes into rows.

This module declares the reader for `ingest` without importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

JSONL = ReaderEntry(
    "jsonl",
    "stabilitycli.ingest.jsonl.reader",
    # cheap to import, and its sniff looks inside gzip and zstd streams
    Takes(any_file=True),
    "JSONL (.jsonl, .jsonl.gz, .jsonl.zst)",
)
