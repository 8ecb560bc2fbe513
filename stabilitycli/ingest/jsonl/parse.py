"""JSON lines bytes into rows: the three parsers, fastest first, and what is rejected.

`reader` hands a whole log here (`parse_bytes`), `pieces` a large one a piece at
a time (`parse_piece`, then `finish` once for the log); per-rank folders parse
each rank's file with the same steps (`fast_parse`, `slow_parse`).
"""

from __future__ import annotations

import io
import json
import re
from typing import NamedTuple, cast

import numpy as np
import polars as pl

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import ROW, RunData, finalize, plain_numpy
from stabilitycli.ingest import bounded
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.options import ReadOptions

_NONFINITE_TOKENS = (b"NaN", b"Infinity")
LOGGED_ROW = f"{ROW} (as logged)"
TRUNCATED_REASON = "last line cut off mid-write (the job died while writing)"


def parse_bytes(data: bytes, source: SourceInfo, options: ReadOptions) -> RunData:
    """Parse JSONL bytes into the canonical frame (also used by per-rank readers)."""
    limits = options.limits
    data, cut_line = strip_truncated_tail(data, limits)
    if cut_line is not None:
        source.warnings.append(f"line {cut_line}: {TRUNCATED_REASON}; kept everything before it")
    if blank(data):
        if cut_line is not None:  # one line and no newline (`garbage`): not an empty file
            source.reject(cut_line, TRUNCATED_REASON)
            source.rows_read = 1
            raise only_a_cut_line(source, cut_line)
        raise StabInputError(source.path, "no JSON lines to read (the file is empty)")
    raw = parse_piece(data, 1, source, options, whole=True)
    assert raw is not None  # a whole log with no record raised in the per-line pass
    if cut_line is not None:
        source.reject(cut_line, TRUNCATED_REASON)
    return finish(raw, source, options)


class Parsed(NamedTuple):
    """A clean piece's `fast_parse`, done ahead on another thread (`pieces`); a `frame` of
    None sends the piece to the per-line pass, as the parse done in turn would."""

    frame: pl.DataFrame | None


def parse_piece(
    data: bytes,
    first_line: int,
    source: SourceInfo,
    options: ReadOptions,
    *,
    whole: bool,
    screened: bounded.Screened | None = None,
    parsed: Parsed | None = None,
) -> pl.DataFrame | None:
    """The records of `data` (whole lines, the first one numbered `first_line`), rejections
    recorded in `source`. A piece of a larger log (`whole=False`) may hold no record (None);
    the caller says what was rejected once, for the whole log. `screened`: the caller's
    own `screen_lines` of `data`, when it has one; `parsed`: its `clean_parse` of `data`,
    when it has done it."""
    limits = options.limits
    offset = first_line - 1
    if screened is None:
        screened = bounded.screen_lines(data, limits)
    for number, reason in sorted(screened.bad.items()):
        source.reject(number + offset, reason)
    data = screened.blanked(data)
    axes = _axes(options)
    if parsed is not None:
        raw = parsed.frame
    elif not blank(data):
        raw = fast_parse(
            data,
            screened=True,
            axes=axes,
            newlines=screened.newlines,
            colons=None if screened.bad else screened.colons,
        )
    else:
        raw = None
    if raw is None:  # the per-line pass numbers its lines from `first_line` itself
        return slow_parse(data, source, limits, axes=axes, first_line=first_line, whole=whole)
    if screened.bad and whole:
        warn_rejected(source)
    # a Series, not `pl.col(ROW) + offset`: the expression rechunks every column of the
    # piece (a copy of it all), which the join copies again
    return raw.with_columns(raw[ROW] + offset) if offset else raw


def clean_parse(data: bytes, screened: bounded.Screened, options: ReadOptions) -> Parsed | None:
    """`parse_piece`'s fast parse of a piece, when its screen found no bad line and it is
    not blank: what it depends on is the bytes and the screen only, so it may run on any
    thread, ahead of its turn; None when the piece must be parsed in turn."""
    if screened.bad or blank(data):
        return None
    frame = fast_parse(
        data,
        screened=True,
        axes=_axes(options),
        newlines=screened.newlines,
        colons=screened.colons,
    )
    return Parsed(frame)


def _axes(options: ReadOptions) -> tuple[str, ...]:
    return tuple(k for k in (options.step_key, options.rank_key) if k)


def finish(
    raw: pl.DataFrame, source: SourceInfo, options: ReadOptions, *, in_rank_order: bool = False
) -> RunData:
    """Every record read: count them, find the step and rank keys, build the canonical frame.

    `raw` is used up (left empty): the caller's name for it must not keep the raw columns
    alive while the frame is sorted by rank (`finalize(owned=True)`). `in_rank_order`: its
    rows are sorted by the rank key already (`finalize`).
    """
    source.rows_read = raw.height + source.rows_rejected
    if LOGGED_ROW in raw.columns:
        source.notes.append(
            f"key '{ROW}' read as '{LOGGED_ROW}': stab numbers the lines under that name"
        )
    step_key, rank_key = axis_keys(raw.columns, options)
    if options.step_key and options.step_key not in raw.columns:
        raise StabInputError(
            source.path, f"--step-key {options.step_key!r} is not a key in the log"
        )
    return finalize(
        raw,
        source,
        step_key=step_key,
        rank_key=rank_key,
        overrides=options.metric_overrides,
        owned=True,
        in_rank_order=in_rank_order,
    )


def axis_keys(columns: list[str], options: ReadOptions) -> tuple[str | None, str | None]:
    """The step key and the rank key among a log's keys: the ones named, else the aliases."""
    step_key = options.step_key or aliases.find_key(columns, aliases.STEP_KEYS)
    rank_key = options.rank_key or aliases.find_key(columns, aliases.RANK_KEYS)
    return step_key, rank_key


def blank(data: bytes) -> bool:
    """Nothing but whitespace: stops at the first other byte, where `strip` copies it all."""
    return not data or data.isspace()


def strip_truncated_tail(
    data: bytes, limits: InputLimits | None = None
) -> tuple[bytes, int | None]:
    """Drop a final line that has no newline and is not complete JSON.

    Returns the data to parse and the 1-based number of the dropped line. A
    last line that ends in a newline was written whole: if it is bad, it is a
    malformed line like any other, not a cut-off one. A last line too long or
    too deep to parse is left for the screen to reject with that reason.
    """
    if not data or data.endswith(b"\n"):
        return data, None
    cut = data.rfind(b"\n")
    last = data[cut + 1 :]
    if (
        not last.strip()
        or bounded.line_fault(last, limits or limits_in_force()) is not None
        or _is_json(last)
    ):
        return data + b"\n", None
    return data[: cut + 1], data.count(b"\n", 0, cut + 1) + 1


def _is_json(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
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


# polars types a JSON value it cannot hold in a number column as one of these: never a step
_NOT_AXIS = (pl.List, pl.Struct, pl.Array, pl.Boolean, pl.Binary, pl.Object)


def fast_parse(
    data: bytes,
    *,
    screened: bool = False,
    axes: tuple[str, ...] = (),
    newlines: int | None = None,
    colons: int | None = None,
) -> pl.DataFrame | None:
    """Every line through polars or pyarrow, or None when the per-line pass must decide.

    `screened`: the caller has already taken out the lines no parser may see
    (`bounded.screen_lines`); else any such line sends the whole buffer to the
    per-line pass. `axes`: keys named as step or rank besides the usual ones.
    `newlines`, `colons`: the buffer's newline and `:` bytes, when the screen has
    counted them.
    """
    if not screened and bounded.screen_lines(data, limits_in_force()).bad:
        return None
    frame = _polars_parse(data, colons)
    if frame is None:
        try:
            frame = _arrow_parse(data)
        except Exception:
            frame = None
    try:
        if frame is None and not any(token in data for token in _NONFINITE_TOKENS):
            # pyarrow fixes a column's type in the first block and refuses a later block
            # that disagrees (an integer column that turns fractional); polars infers the
            # type over every line, at twice the cost
            frame = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
    except (Exception, pl.exceptions.PanicException):
        # a panic in polars' reader derives from BaseException: it too means "not clean
        # input", which the per-line pass then names line by line
        return None
    if frame is None:
        return None
    if newlines is None:
        newlines = count_byte(data, b"\n")
    if newlines + (not data.endswith(b"\n")) == frame.height:
        rows = np.arange(1, frame.height + 1, dtype=np.int64)  # one row per line, none blank
    else:
        # blank lines between rows, or a line the parser made two rows of (`{..}{..}`,
        # which pyarrow reads): number the rows by line, or let the per-line pass judge
        rows = _line_numbers(data)
        if rows.size != frame.height:
            return None
    if any(
        _is_axis(name, axes) and isinstance(dtype, _NOT_AXIS)
        for name, dtype in frame.schema.items()
    ):
        return None  # a step or rank that is a list, object or bool: named line by line
    if ROW in frame.columns:  # the log's own `_row` key: kept, not overwritten by the line
        frame = frame.rename({ROW: LOGGED_ROW})
    return frame.with_columns(plain_numpy.series(rows, ROW))


def _polars_parse(data: bytes, colons: int | None = None) -> pl.DataFrame | None:
    """polars' reader with its schema taken from the first lines: the fastest parse, and
    exact whenever it returns a frame; None sends the buffer to the readers that see it all.

    Inferred from the first lines, the schema can miss a key that first appears
    later, and polars drops that key without a word. Every key with a value
    holds exactly one `:` outside quotes, so when the buffer holds as many `:`
    bytes as the frame has non-null cells, no key was dropped; a null value, a
    nested object or a `:` inside a string breaks the tie and sends the buffer on
    (slower, never wrong). A later value of another type (an integer column
    that turns fractional, NaN or Infinity tokens) makes polars raise, with the
    same result. Text columns go on too: pyarrow reads a timestamp string as a
    timestamp, and the two paths must give the same frame. `colons`: the buffer's `:`
    bytes, when the screen has counted them.
    """
    try:
        frame = pl.read_ndjson(io.BytesIO(data))
    except (Exception, pl.exceptions.PanicException):
        return None
    if any(dtype in (pl.String, pl.Utf8) for dtype in frame.schema.values()):
        return None
    cells = sum(frame.select(pl.all().count()).row(0)) if frame.width else 0
    if colons is None:
        colons = count_byte(data, b":")
    return frame if colons == cells else None


# bytes compared per numpy pass in `count_byte`: the compare's result (a bool a byte) then
# stays in the CPU's cache, written over in one scratch array, where one compare of a 16 MB
# piece wrote a 16 MB temporary and read it back (a count of `:` took 6 ms, now 3 ms)
_COUNT_BLOCK_BYTES = 256 << 10


def count_byte(data: bytes, byte: bytes) -> int:
    """How many times `byte` occurs in `data`: numpy compares at several times the speed
    of `bytes.count`, which on a large log is a second spent per pass."""
    buf = np.frombuffer(data, dtype=np.uint8)
    scratch = np.empty(min(buf.size, _COUNT_BLOCK_BYTES), dtype=bool)
    total = 0
    for start in range(0, buf.size, _COUNT_BLOCK_BYTES):  # loop over blocks, not bytes
        block = buf[start : start + _COUNT_BLOCK_BYTES]
        hits = scratch[: block.size]
        np.equal(block, ord(byte), out=hits)
        total += int(np.count_nonzero(hits))
    return total


def _arrow_parse(data: bytes) -> pl.DataFrame:
    """pyarrow's multi-threaded reader (NaN and Infinity tokens included), in blocks of up
    to 64 MB; new keys in later blocks become new columns."""
    import pyarrow.json as pa_json

    block = max(1 << 20, min(len(data) + 1, 64 << 20))
    table = pa_json.read_json(io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=block))
    return cast(pl.DataFrame, pl.from_arrow(table))  # a Table converts to a DataFrame


# only a run of 19 digits can be an integer past int64: the test that spares the rest
_LONG_DIGITS = re.compile(rb"\d{19}")
_AXIS_KEYS = frozenset(aliases.STEP_KEYS) | frozenset(aliases.RANK_KEYS)


def _is_axis(key: str, axes: tuple[str, ...]) -> bool:
    return key in axes or aliases.normalise_key(key) in _AXIS_KEYS


def _axis_fault(obj: dict, axes: tuple[str, ...]) -> str | None:
    """Why a record's step or rank can be no axis value (a list, an object, a bool), or None."""
    for key, value in obj.items():
        if isinstance(value, (list, dict, bool)) and _is_axis(key, axes):
            kind = {list: "list", dict: "object", bool: "bool"}[type(value)]
            return f"{key!r} is a JSON {kind}, not a number"
    return None


def _unicode_fault(record: dict) -> str | None:
    """A lone surrogate (`"\\ud800"`) decodes to a str that no UTF-8 column can hold.

    In a key it spoils the record (the key would name a metric); in a text value
    the value is dropped, as polars' reader drops it: text is never a metric.
    """
    for key in list(record):
        if not _encodable(key):
            return f"a lone surrogate in the key {key!a} (not valid Unicode)"
        value = record[key]
        if isinstance(value, str) and not _encodable(value):
            del record[key]
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def warn_rejected(source: SourceInfo) -> None:
    first = source.rejections[0]
    source.warnings.append(
        f"{source.rows_rejected} line(s) could not be read; first at line {first.line}: "
        f"{first.reason}"
    )


def slow_parse(
    data: bytes,
    source: SourceInfo,
    limits: InputLimits | None = None,
    *,
    axes: tuple[str, ...] = (),
    first_line: int = 1,
    whole: bool = True,
) -> pl.DataFrame | None:
    """Exact per-line pass: keeps scalar fields, names every line it cannot read.

    A piece of a larger log (`whole=False`) that holds no record gives None; a
    whole log with none is an error."""
    limits = limits or limits_in_force()
    records: list[dict] = []
    for number, line in enumerate(data.split(b"\n"), start=first_line):
        if not line.strip():
            continue
        fault = bounded.line_fault(line, limits)
        if fault is not None:
            source.reject(number, fault)
            continue
        try:
            obj = json.loads(line)
        except UnicodeDecodeError as err:
            # a byte the job wrote while dying (or a binary blob) spoils that line only
            source.reject(number, f"not UTF-8 text (byte {err.start + 1} of the line)")
            continue
        except json.JSONDecodeError as err:
            source.reject(number, _decode_reason(err))
            continue
        except ValueError as err:  # e.g. an integer too long for int()
            source.reject(number, f"not valid JSON ({err})")
            continue
        except RecursionError:  # screened above; kept so no nesting can end the read
            source.reject(number, "JSON nested too deeply to parse")
            continue
        if not isinstance(obj, dict):
            source.reject(number, f"a JSON {type(obj).__name__}, not an object")
            continue
        fault = _axis_fault(obj, axes)
        record = {k: v for k, v in obj.items() if isinstance(v, (int, float, str)) or v is None}
        # a lone surrogate comes from a `\\u` escape, or from its UTF-8 form (ED A0..BF ..),
        # which json.loads decodes with surrogatepass
        if fault is None and (b"\\u" in line or b"\xed" in line):
            fault = _unicode_fault(record)
        if _LONG_DIGITS.search(line) is not None:
            bounded.widen_ints(record)
        if fault is not None:
            source.reject(number, fault)
            continue
        if ROW in record:
            record[LOGGED_ROW] = record.pop(ROW)
        record[ROW] = number
        records.append(record)
    if not whole:
        return pl.DataFrame(records, infer_schema_length=None, strict=False) if records else None
    if not records:
        raise nothing_read(source)
    if source.rows_rejected:
        warn_rejected(source)
    return pl.DataFrame(records, infer_schema_length=None, strict=False)


def nothing_read(source: SourceInfo) -> StabInputError:
    return StabInputError(
        source.path,
        "no JSON object could be read"
        + (
            f" (first bad line {source.rejections[0].line}: {source.rejections[0].reason})"
            if source.rejections
            else ""
        ),
    )


def only_a_cut_line(source: SourceInfo, line: int) -> StabInputError:
    """The error for a log whose one line is not JSON and ends without a newline: cut off
    mid-write, or no JSON log at all (`garbage`); never "empty"."""
    return StabInputError(
        source.path,
        "no JSON object could be read: its one line is not JSON and ends without a newline",
        line=line,
    )


def _decode_reason(err: json.JSONDecodeError) -> str:
    # the parser's messages end "... at" before a position it appends itself
    return f"not valid JSON ({err.msg.removesuffix(' at')}, byte {err.pos + 1} of the line)"
