"""Helpers shared by the readers of plain-text training logs (Megatron, DeepSpeed, llm.c).

Text logs are what a launcher captured from stdout: lines may carry launcher
prefixes (`[default7]:`, `[rank3]:`, `0: `, `[1,0]<stdout>:`), logger
timestamps (`[2023-04-18 01:46:52,554]`), and the last line may be cut off
because the job died while writing it. Nothing here knows a log format; it
only reads bytes, finds a format's marker in a file's first megabytes, and
turns logged numbers (`NAN`, `inf`, `1.0E+00`) into floats.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import bounded
from stabilitycli.ingest.limits import InputLimits, limits_in_force

# How far `peek` reads into a text file to find a format's marker: a Megatron
# log can open with several hundred KB of banners and argument dumps.
PEEK_BYTES = 8 << 20

# `[2023-04-18 01:46:52,554]` (Python logging) or `2023-04-18 01:46:52.554` / ISO `T`.
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")

_peek_cache: dict[tuple[str, int, int], str] = {}


# Damaged bytes a text log's first 4 KiB may hold (NULs, bytes that are not UTF-8): a few
# (a flipped byte, a file system that zero-fills after a crash) leave it a text log; binary
# and compressed files (event files, Parquet, sqlite, gzip) hold hundreds
TEXT_MAX_BAD_BYTES = 8


def looks_textual(path: Path, head: bytes) -> bool:
    """A regular file whose first bytes read as text, but for a few damaged ones."""
    if path.is_dir() or not head:
        return False
    window = head[:4096]
    if window.count(b"\x00") > TEXT_MAX_BAD_BYTES:
        return False
    # a character cut at the window's end is one replacement, within the allowance
    return window.decode("utf-8", "replace").count("\ufffd") <= TEXT_MAX_BAD_BYTES


def peek(path: Path, head: bytes) -> str:
    """The first `PEEK_BYTES` of a text file, decoded (cached: every reader sniffs)."""
    try:
        stat = path.stat()
    except OSError:
        return head.decode("utf-8", "replace")
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    cached = _peek_cache.get(key)
    if cached is not None:
        return cached
    if stat.st_size <= len(head):
        text = head.decode("utf-8", "replace")
    else:
        with open(path, "rb") as handle:
            text = handle.read(PEEK_BYTES).decode("utf-8", "replace")
    _peek_cache.clear()  # keep one file only: sniffing goes file by file
    _peek_cache[key] = text
    return text


def read_lines(path: Path) -> tuple[list[str], bool]:
    """All lines of a text log, and whether the file ends without a newline.

    Bytes that are not UTF-8 (a log cut in the middle of a multi-byte
    character, binary noise from a crashing process) are replaced, never fatal.
    """
    data = path.read_bytes()
    if not data.strip():
        raise StabInputError(str(path), "the file is empty")
    text = data.decode("utf-8", "replace")
    no_final_newline = not text.endswith("\n")
    lines = text.split("\n")
    if not no_final_newline:
        lines.pop()  # the empty string after the final newline
    return [line.rstrip("\r") for line in lines], no_final_newline


def read_log(path: Path, source, limits: InputLimits | None = None) -> tuple[list[str], bool, int]:
    """`read_lines` within the limits: (lines, cut, lines rejected for their length).

    A file over `max_input_bytes` is refused whole. A line over `max_line_bytes`
    (binary noise, a dumped tensor) is rejected with its number and left empty,
    so the lines after it keep their numbers and reading goes on; a long last
    line is that rejection, not also a cut-off record.
    """
    import numpy as np

    limits = limits or limits_in_force()
    data = bounded.read_plain(path, limits)
    if not data.strip():
        raise StabInputError(str(path), "the file is empty")
    buffer = np.frombuffer(data, dtype=np.uint8)
    ends = np.append(np.flatnonzero(buffer == 10), len(data))
    starts = np.concatenate(([0], ends[:-1] + 1))
    too_long = np.flatnonzero(ends - starts > limits.max_line_bytes).tolist()
    if too_long:
        pieces, at = [], 0
        for index in too_long:
            pieces.append(data[at : int(starts[index])])
            at = int(ends[index])
        pieces.append(data[at:])
        data = b"".join(pieces)
        reason = f"line over max_line_bytes ({limits.max_line_bytes} bytes); not read"
        for index in too_long:
            source.reject(index + 1, reason)
    # lines in the file: the last one counts when it has no newline
    total = len(ends) - 1 if buffer.size and buffer[-1] == 10 else len(ends)
    text = data.decode("utf-8", "replace")
    no_final_newline = not text.endswith("\n")
    lines = text.split("\n")
    if not no_final_newline:
        lines.pop()  # the empty string after the final newline
    if len(lines) < total:  # the last line was the long one: its place stays, empty
        lines.append("")
    if too_long and too_long[-1] == total - 1:
        no_final_newline = False  # that long last line is rejected already
    return [line.rstrip("\r") for line in lines], no_final_newline, len(too_long)


INT64_MAX = 2**63 - 1
STEP_RANGE_REASON = "a step or count past the 64-bit range a frame holds"


def whole(text: str) -> int | None:
    """A logged step or count as an int; None past the Int64 range of the frame.

    A damaged line can hold a run of thousands of digits: Python would take
    them (or refuse past 4,300 digits) and polars then fail on the value, so
    such a number is no step rather than an error.
    """
    digits = text.strip().lstrip("0") or "0"
    # `isdigit` takes `²` and other digits `int` refuses
    if len(digits) > 19 or not (digits.isascii() and digits.isdigit()):
        return None
    value = int(digits)
    return value if value <= INT64_MAX else None


def number(text: str) -> float:
    """A logged number: `2.3E+00`, `nan`, `NAN`, `inf`, `-INF`, `Infinity` all read.

    Raises ValueError for anything else (a value cut in half by a wrapped line).
    """
    value = text.strip().rstrip(",")
    return float(value)


def timestamp(line: str) -> float | None:
    """Seconds since the epoch of the first timestamp on a line, or None."""
    match = _TIMESTAMP.search(line[:64])
    if match is None:
        return None
    day, clock, frac = match.groups()
    try:
        moment = datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return moment.timestamp() + (float("0." + frac) if frac else 0.0)


def truncation_warning(line_number: int, what: str) -> str:
    return (
        f"line {line_number}: {what} cut off mid-write (no newline at the end of the file; "
        "the job died while writing); kept everything before it"
    )


def cut_kept_warning(line_number: int, what: str, last_field: str, where: str) -> str:
    """A record cut mid-line whose whole fields are kept (the ones something follows on the
    line, or a separator closes): the cut need not be a dying job's."""
    return (
        f"line {line_number}: {what} cut off mid-line after its field `{last_field}` ({where}); "
        "its whole fields are kept, the rest is lost. The cut may come from where the text was "
        "copied (a paste, a terminal), not only from a job that stopped while printing"
    )


NO_FINAL_NEWLINE = "no newline at the end of the file"


def drop_cut_line(lines: list[str], cut: bool, source) -> list[str]:
    """`lines` without a last line cut off mid-write, which is rejected with a warning:
    its last value could be a prefix of the real one (`12.1` of `12.18`)."""
    if not (cut and lines):
        return lines
    source.warnings.append(truncation_warning(len(lines), "the last line"))
    source.reject(len(lines), "last line cut off mid-write")
    return lines[:-1]


# Structured files have their own readers; a text-log reader never claims them.
_STRUCTURED = (
    ".json",
    ".jsonl",
    ".ndjson",
    ".csv",
    ".tsv",
    ".parquet",
    ".arrow",
    ".feather",
    ".ipc",
    ".yaml",
    ".yml",
    ".toml",
    ".wandb",
    ".gz",
    ".zst",
    ".db",
    ".sqlite",
)


# Source code and documents quote log lines (`{"loss": 2.3}` in a script, a log in a README):
# the generic text readers (`kvlog`, `dictlog`) never take them for a log.
CODE_AND_DOCS = (".py", ".ipynb", ".md", ".rst", ".html", ".htm", ".sh", ".txt.md", ".tex")


def is_generic_text_log(path: Path, head: bytes) -> bool:
    """A text log that is not code or a document either (see CODE_AND_DOCS)."""
    return is_text_log(path, head) and not path.name.lower().endswith(CODE_AND_DOCS)


def is_text_log(path: Path, head: bytes) -> bool:
    """A regular text file that is not a structured format (JSON, CSV, ...)."""
    name = path.name.lower()
    if any(name.endswith(ext) for ext in _STRUCTURED):
        return False
    return looks_textual(path, head)


def finish_records(rows, source, overrides: dict[str, str], rank_key: str | None = None):
    """A text log's records (dicts or a frame, each with `_row` and `step`) through `finalize`.

    Rows read are the records plus the rejected ones; skipped text lines are
    counted apart (`SourceInfo.lines_skipped`) by the reader.
    """
    import polars as pl

    from stabilitycli.frame import finalize

    if source.rows_rejected:
        first = source.rejections[0]
        source.warnings.append(
            f"{source.rows_rejected} record(s) could not be read; first at line {first.line}: "
            f"{first.reason}"
        )
    raw = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, infer_schema_length=None)
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", rank_key=rank_key, overrides=overrides)
