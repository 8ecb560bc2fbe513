"""Plain tables: CSV / TSV, Parquet, Arrow IPC (Feather): a step column and metric columns.

Read with polars (CSV with `infer_schema_length=None`, so a column whose
first rows are empty is still typed from all its rows; `nan`, `inf`, `NaN`,
`-Infinity` parse as floats). The step column is `--step-key` or the first
of the usual names (`step`, `global_step`, `iteration`, `_step`...), a rank
column likewise (`rank`, `global_rank`...).

CSV is text written row by row, so it gets the text-log treatment: a last
line without a newline was cut off mid-write and is dropped with a warning,
a line with the wrong number of fields, a cell that is not a number, a row
over `max_line_bytes` or one the CSV parser cannot split is rejected with its
line number (line 1 is the header), and reading goes on. A header naming a
column twice is an error: which of the two is meant cannot be told.

Parquet and Arrow files carry their own footer: a truncated one cannot be
read at all and says so. They are read and fully validated by pyarrow before
polars sees them, since polars' own readers can panic on damaged bytes (a
Rust panic, which no `except Exception` catches). Damaged data that still
validates is caught by its steps: negative or fractional steps are rejected
by `finalize`, and a step column that jumps back and forth or holds steps far
beyond the rest is warned about.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import cast

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest import bounded
from stabilitycli.ingest.limits import InputLimits, limit_hit, limits_in_force
from stabilitycli.ingest.options import ReadOptions

NAME = "tabular"
CSV_SUFFIXES = (".csv", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
PARQUET_MAGIC = b"PAR1"
ARROW_MAGIC = b"ARROW1"
# cells that are empty on purpose in a sparse table
_EMPTY = ("", "null", "None", "NA")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES + ARROW_SUFFIXES):
        return True
    return head.startswith((PARQUET_MAGIC, ARROW_MAGIC))


def read(path: Path, options: ReadOptions):
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    keep = tuple(k for k in (options.step_key, options.rank_key) if k)
    raw = load_table(path, source, options.limits, keep=keep)
    return finish(raw, source, options)


def load_table(
    path: Path,
    source: SourceInfo,
    limits: InputLimits | None = None,
    *,
    keep: tuple[str, ...] = (),
):
    """A raw polars frame with a `_row` column, from any of the table formats. A Parquet
    file's clock columns (epoch, timestamps), never a metric, are not read, but those
    named in `keep` (a step or rank key the user gave)."""
    import polars as pl

    from stabilitycli.frame import ROW, one_chunk_frame, unread_columns
    from stabilitycli.frame.spill import spill_wanted

    limits = limits or limits_in_force()
    bounded.refuse_oversize(path, path.stat().st_size, limits)
    name = path.name.lower()
    with open(path, "rb") as handle:
        head = handle.read(8)
    if name.endswith(PARQUET_SUFFIXES) or head.startswith(PARQUET_MAGIC):
        kind = "parquet"

        def reader(path: Path, limits: InputLimits):
            return _read_parquet(path, limits, lambda names: unread_columns(names, keep))

    elif name.endswith(ARROW_SUFFIXES) or head.startswith(ARROW_MAGIC):
        kind, reader = "Arrow IPC", _read_ipc
    else:
        separator = "\t" if name.endswith(".tsv") else ","
        return read_csv(path, source, separator=separator, limits=limits)
    if kind == "parquet" and spill_wanted(lambda: _parquet_bytes(path, keep)):
        from stabilitycli.ingest.tabular import spilled

        try:
            names = _parquet_names(path)
            return spilled.read_parquet_spilled(path, limits, set(unread_columns(names, keep)))
        except spilled.UNSPILLABLE:
            pass
    # a chunk per row group or record batch: made one chunk a column at a time here, with
    # the list the only holder, or `finalize` copies every column at once beside them
    frame = one_chunk_frame([_binary(path, kind, reader, limits)])
    if frame.height == 0:
        raise StabInputError(str(path), "the table has no rows")
    frame = _keep_own_row_column(frame, source)
    # row numbers in 32 bits while they fit: half the column on a long table
    row_type = pl.Int32 if frame.height < 2**31 else pl.Int64
    return frame.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(row_type))


def _parquet_bytes(path: Path, keep: tuple[str, ...]) -> int:
    """About what a Parquet table's columns hold once read: 8 bytes a value of each column
    read and of the row numbers (0 where its footer cannot be read: the plain read then
    names the damage)."""
    import pyarrow.parquet as pq

    from stabilitycli.frame import unread_columns

    try:
        table = pq.ParquetFile(str(path))
    except _native_errors():
        return 0
    names = table.schema_arrow.names
    return table.metadata.num_rows * 8 * (len(names) - len(unread_columns(names, keep)) + 1)


def _parquet_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(str(path)).schema_arrow.names
    except _native_errors():
        from stabilitycli.ingest.tabular.spilled import UNSPILLABLE

        raise UNSPILLABLE from None


def _keep_own_row_column(frame, source: SourceInfo):
    """A table's own `_row` column, under another name: stab numbers the rows in `_row`."""
    from stabilitycli.frame import ROW

    if ROW not in frame.columns:
        return frame
    source.notes.append(f"column {ROW!r} read as '{ROW} (as logged)': stab numbers rows in it")
    return frame.rename({ROW: f"{ROW} (as logged)"})


def _native_errors() -> tuple[type[BaseException], ...]:
    """What a native reader raises on damaged bytes: exceptions, and Rust panics, which
    pyo3 derives from BaseException so that `except Exception` lets them through."""
    from polars.exceptions import PanicException

    return (Exception, PanicException)


def _read_ipc(path: Path, limits: InputLimits):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open(path, "rb") as handle:
        is_file_format = handle.read(6) == ARROW_MAGIC
    # the IPC *file* format opens with ARROW1 and has a footer; a *stream* has neither
    if is_file_format:
        reader = ipc.open_file(str(path))
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        schema = reader.schema
    else:
        stream = ipc.open_stream(str(path))
        batches, schema = iter(stream), stream.schema
    # batch by batch, so that compressed buffers inflating past the limit stop there
    kept, held = [], 0
    for batch in batches:
        held += batch.nbytes
        if held > limits.max_input_bytes:
            raise limit_hit(
                str(path),
                "the table inflates past its size on disk",
                "max_input_bytes",
                limits.max_input_bytes,
            )
        kept.append(batch)
    return pa.Table.from_batches(kept, schema=schema)


def _read_parquet(path: Path, limits: InputLimits, unread):
    """The table without the columns `unread(names)` names (all of them when that would
    leave none), read a row group at a time: pyarrow's whole-file read holds its
    decompression buffers for every column at once, about half the table again."""
    import pyarrow as pa

    from stabilitycli.ingest.tabular.spilled import opened_parquet

    parquet = opened_parquet(path, limits)
    meta = parquet.metadata
    names = parquet.schema_arrow.names
    skipped = set(unread(names))
    columns = [n for n in names if n not in skipped] if len(skipped) < len(names) else []
    groups = [
        parquet.read_row_group(i, columns=columns or None) for i in range(meta.num_row_groups)
    ]
    if not groups:
        empty = parquet.schema_arrow.empty_table()
        return empty.select(columns) if columns else empty
    return pa.concat_tables(groups)


def _binary(path: Path, kind: str, reader, limits: InputLimits):
    """A Parquet or Arrow file through pyarrow, validated, then as a polars frame."""
    import polars as pl

    if path.stat().st_size == 0:
        raise StabInputError(str(path), "the file is empty")
    try:
        table = reader(path, limits)
        # full validation looks at every offset and buffer, so damaged bytes that still
        # parse as a footer are refused here and never reach polars' readers
        table.validate(full=True)
    except StabInputError:
        raise
    except MemoryError as err:  # pyarrow's ArrowMemoryError: the memory, not the bytes
        from stabilitycli.core.errors import input_error_from

        raise input_error_from(str(path), err, kind) from None
    except _native_errors() as err:
        raise StabInputError(
            str(path), f"cannot read as {kind} (truncated or corrupt): {_first_line(err)}"
        ) from None
    if table.nbytes > limits.max_input_bytes:
        raise limit_hit(
            str(path),
            f"the table holds {table.nbytes} bytes once read",
            "max_input_bytes",
            limits.max_input_bytes,
        )
    try:
        frame = pl.from_arrow(table)
    except _native_errors() as err:
        raise StabInputError(
            str(path), f"cannot read as {kind}: a column polars cannot hold ({_first_line(err)})"
        ) from None
    assert isinstance(frame, pl.DataFrame)  # a Table comes back as a frame
    return frame


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def read_csv(
    path: Path, source: SourceInfo, separator: str = ",", limits: InputLimits | None = None
):
    """CSV into a raw frame: cut-off last line dropped, bad lines and cells rejected by line."""
    import polars as pl

    from stabilitycli.frame import ROW

    limits = limits or limits_in_force()
    data = bounded.read_plain(path, limits)
    # Excel and PowerShell open a CSV with a byte-order mark; it is no part of the first name
    data = data.removeprefix(b"\xef\xbb\xbf")
    if not data.strip():
        raise StabInputError(str(path), "the file is empty")
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        if cut < 0:
            raise StabInputError(str(path), "only a header line, cut off mid-write")
        line = data.count(b"\n") + 1
        source.warnings.append(
            f"line {line}: last line cut off mid-write (no newline at the end of the file); "
            "kept everything before it"
        )
        source.reject(line, "last line cut off mid-write")
        data = data[: cut + 1]
    header = _header(data, separator, source.path, limits)
    frame = None
    if _plain(data, separator, len(header), limits.max_line_bytes):
        try:
            frame = pl.read_csv(io.BytesIO(data), separator=separator, infer_schema_length=None)
        except _native_errors():
            frame = None
    if frame is not None and frame.columns == header:
        lines = list(range(2, frame.height + 2))
    else:
        frame, lines = _slow_csv(data, separator, source, limits)
    if frame.height == 0:
        first = source.rejections[0] if source.rejections else None
        raise StabInputError(
            str(path),
            "the table has a header but no rows"
            + (f" it can read (line {first.line}: {first.reason})" if first else ""),
        )
    frame = _keep_own_row_column(frame, source)
    frame = frame.with_columns(pl.Series(ROW, lines, dtype=pl.Int64))
    return reject_bad_cells(frame, source)


def _header(data: bytes, separator: str, path: str, limits: InputLimits) -> list[str]:
    """The column names; a name given twice is an error (which column is the loss?)."""
    first = data[: min(len(data), limits.max_line_bytes + 1)].split(b"\n", 1)[0]
    if len(first) > limits.max_line_bytes:
        raise limit_hit(
            path, "the header line is longer", "max_line_bytes", limits.max_line_bytes, line=1
        )
    text = first.decode("utf-8", "replace").rstrip("\r")
    try:
        names = next(csv.reader([text], delimiter=separator), [])
    except csv.Error:  # a stray carriage return: the line-by-line reader says what is wrong
        names = text.split(separator)
    _refuse_duplicates(names, path)
    return names


def _refuse_duplicates(names: list[str], path: str) -> None:
    seen: dict[str, int] = {}
    for field_no, name in enumerate(names, start=1):
        if not name.strip():
            continue  # an unnamed column (a pandas index) is never the step or a metric
        if name in seen:
            raise StabInputError(
                path,
                f"the header names column {name[:40]!r} twice (fields {seen[name]} and "
                f"{field_no}): which one holds the values cannot be told",
                line=1,
            )
        seen[name] = field_no


def _plain(data: bytes, separator: str, fields: int, max_line: int) -> bool:
    """Whether polars' fast reader gives the same rows as the line-by-line one would.

    It does for a file without quotes or blank lines (those shift line numbers)
    whose every line holds the header's number of fields and fits in
    `max_line_bytes`; polars fills a short row with nulls instead of refusing it.
    """
    import numpy as np

    if b'"' in data or b"\n\n" in data or b"\n\r\n" in data:
        return False
    buffer = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buffer == 10)
    if ends.size and int(np.diff(ends, prepend=-1).max()) > max_line:
        return False
    cuts = np.flatnonzero(buffer == ord(separator))
    per_line = np.diff(np.searchsorted(cuts, ends), prepend=0)
    return bool((per_line == fields - 1).all())


def _slow_csv(data: bytes, separator: str, source: SourceInfo, limits: InputLimits):
    import polars as pl

    physical = _Lines(data.decode("utf-8", "replace"))
    reader = csv.reader(physical, delimiter=separator)
    rows: list[list[str]] = []
    lines: list[int] = []
    header: list[str] | None = None
    # the csv module's own cap (128 KiB a cell) is no bound stab sets: a cell may take
    # a whole line, and a longer one rejects its row below instead of the whole file
    before = csv.field_size_limit(limits.max_line_bytes)
    try:
        while True:
            start = physical.next_index + 1
            try:
                record = next(reader)
                problem = None
            except StopIteration:
                break
            except csv.Error as err:
                if header is None:
                    raise StabInputError(
                        source.path, f"the header is not readable CSV ({err})", line=start
                    ) from None
                record, problem = [], f"not a readable CSV row ({err})"
            line = physical.next_index
            if header is None:
                # a quote left open can carry the header over several lines
                _refuse_duplicates(record, source.path)
                header = record
                continue
            if problem is None and line > start and _swallowed_rows(record, separator):
                problem = "a quote opened on this line is not closed"
            if problem is None:
                if not record or all(not c.strip() for c in record):
                    continue
                if len(record) != len(header):
                    problem = f"{len(record)} fields where the header has {len(header)}"
                elif sum(map(len, record)) > limits.max_line_bytes:
                    problem = f"row over max_line_bytes ({limits.max_line_bytes} bytes)"
            if problem is None:
                rows.append(record)
                lines.append(line)
                continue
            if line > start:
                # a quote left open in one cell swallows the lines after it into one record:
                # reject the line that opened it and read the others again as rows
                source.reject(
                    start, f"{problem} (one record ran to line {line}); lines after it read again"
                )
                physical.next_index = start
                continue
            source.reject(start, problem)
    finally:
        csv.field_size_limit(before)
    if header is None:
        raise StabInputError(source.path, "no header line")
    # unnamed columns (empty header cells) get a name each: two of them were one dict key
    header = [n if n.strip() else f"(unnamed column {i})" for i, n in enumerate(header, 1)]
    columns = {name: [r[i] for r in rows] for i, name in enumerate(header)}
    frame = pl.DataFrame(columns, schema={name: pl.String for name in header})
    # numbers come back as numbers; text columns stay text
    casts = []
    for name in header:
        values = frame[name].str.strip_chars()
        present = ~values.is_in(list(_EMPTY))
        # whole numbers stay Int64, so that a step beyond 2**53 keeps every digit
        for kind in (pl.Int64, pl.Float64):
            as_number = values.cast(kind, strict=False)
            if (as_number.is_not_null() | ~present).all():
                casts.append(as_number.alias(name))
                break
    if casts:
        frame = frame.with_columns(casts)
    return frame, lines


def _swallowed_rows(record: list[str], separator: str) -> bool:
    """A cell over several lines that holds the separator: rows an open quote took in.

    A metric log's cells are numbers and names; a real multi-line text cell
    with the separator in it is rarer than a damaged quote, and reading it as
    rows rejects only the line that opened it, counted.
    """
    return any(("\n" in cell or "\r" in cell) and separator in cell for cell in record)


class _Lines:
    """The physical lines of a CSV for `csv.reader`, which can be sent back to a line.

    `next_index` is the number of lines handed out: after a record, the line it
    ended on (1-based). Setting it lower makes the reader read those lines again.
    """

    def __init__(self, text: str) -> None:
        # StringIO with newline="" splits where the csv module expects (\n, \r\n, \r)
        self.lines = list(io.StringIO(text, newline=""))
        self.next_index = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        if self.next_index >= len(self.lines):
            raise StopIteration
        self.next_index += 1
        return self.lines[self.next_index - 1]


def reject_bad_cells(frame, source: SourceInfo, keep_text: tuple[str, ...] = ()):
    """Text cells in an otherwise numeric column reject their row, by line number.

    A column where most cells are numbers and a few are not (`1.2`, `oops`,
    `3.4`) holds damaged rows; a column with no number at all is a text
    column (a run name, a timestamp) and is left alone.
    """
    import polars as pl

    from stabilitycli.frame import ROW

    bad_rows: dict[int, str] = {}
    for name, dtype in frame.schema.items():
        if name == ROW or name in keep_text or dtype not in (pl.String, pl.Utf8):
            continue
        values = frame[name].str.strip_chars()
        as_float = values.cast(pl.Float64, strict=False)
        present = values.is_not_null() & ~values.is_in(list(_EMPTY))
        numeric = int(as_float.is_not_null().sum())
        wrong = present & as_float.is_null()
        if numeric == 0 or not wrong.any() or int(wrong.sum()) > numeric:
            continue
        bad_lines = frame.filter(wrong)[ROW].to_list()
        for line, cell in zip(bad_lines, values.filter(wrong).to_list(), strict=True):
            bad_rows.setdefault(line, f"cell {cell[:20]!r} in column {name!r} is not a number")
    for line in sorted(bad_rows):
        source.reject(line, bad_rows[line])
    if bad_rows:
        source.warnings.append(
            f"{len(bad_rows)} row(s) with a non-numeric cell; first at line {min(bad_rows)}"
        )
        frame = frame.filter(~pl.col(ROW).is_in(list(bad_rows)))
    return frame


def finish(raw, source: SourceInfo, options: ReadOptions):
    """Pick the step and rank columns and hand the raw table to `finalize`, which takes it
    over (`raw` is left empty): a per-rank table is then sorted by rank a column at a
    time with each unsorted column let go, not held whole beside its sorted copy."""
    from stabilitycli.frame import finalize

    columns = [c for c in raw.columns if c != "_row"]
    if options.step_key and options.step_key not in columns:
        raise StabInputError(
            source.path,
            f"--step-key {options.step_key!r} is not a column (columns: {', '.join(columns[:15])})",
        )
    step_key = options.step_key or aliases.find_key(columns, aliases.STEP_KEYS)
    rank_key = options.rank_key or aliases.find_key(columns, aliases.RANK_KEYS)
    source.rows_read = raw.height + source.rows_rejected
    if step_key is not None:
        _step_order_warnings(raw, step_key, source)
    return finalize(
        raw,
        source,
        step_key=step_key,
        rank_key=rank_key,
        overrides=options.metric_overrides,
        owned=True,
    )


# A logger writes a table in step order: a resume goes back once or twice, but a step
# column that goes back on more rows than this is more likely damaged bytes than resumes.
_BACKWARDS_MAX = 3
_BACKWARDS_SHARE = 0.01
# a step this many times the typical step of the table stands out from any real schedule
_FAR_FACTOR = 1 << 20


def _step_order_warnings(raw, step_key: str, source: SourceInfo) -> None:
    """Warn when the steps look like damaged data rather than a log.

    Damaged Arrow or Parquet bytes can still validate and read as steps near
    -8.4e18 or 6.5e18 among steps 0-200; the rows are not rejected (a step is
    data, and a real one may be large), but the reading says the file looks
    damaged instead of passing it as restarts.
    """
    import polars as pl

    column = raw[step_key]
    if not (column.dtype.is_numeric() or column.dtype in (pl.String, pl.Utf8)):
        return
    if _sorted_whole_steps(column):
        return _far_steps_in_order(raw, column, source)
    table = raw.select(pl.col("_row"), column.cast(pl.Float64, strict=False).alias("s"))
    table = table.filter(pl.col("s").is_finite())
    if table.height < 3:
        return
    back = table.filter(pl.col("s") < pl.col("s").shift(1))
    if back.height > max(_BACKWARDS_MAX, _BACKWARDS_SHARE * table.height):
        source.warnings.append(
            f"the step column goes back on {back.height} of {table.height} rows (first at "
            f"row {back['_row'][0]}); a logger writes steps in order, so the file may be "
            "damaged and its values with it"
        )
    typical = max(float(table["s"].abs().median() or 0.0), 1024.0)
    far = table.filter(pl.col("s").abs() > typical * _FAR_FACTOR)
    if far.height:
        _warn_far(source, far.height, far["_row"][0], far["s"][0])


def _warn_far(source: SourceInfo, count: int, row: int, step: float) -> None:
    source.warnings.append(
        f"{count} row(s) with a step far beyond the others (first at row "
        f"{row}: step {step:.4g}); the file may be damaged"
    )


def _sorted_whole_steps(column) -> bool:
    """Whole, non-negative steps in order, none missing: the table as a logger writes it,
    and the one shape that is checked without a float copy of the steps (and the
    median's copy of that) beside the table."""
    import numpy as np

    if column.dtype not in _numpy_integers() or column.null_count() or column.len() < 3:
        return False
    steps = column.to_numpy()
    if steps[0] < 0:
        return False
    for first in range(0, steps.size - 1, _ORDER_CHUNK_ROWS):  # loop over chunks, not rows
        part = steps[first : first + _ORDER_CHUNK_ROWS + 1]
        if not bool(np.all(part[1:] >= part[:-1])):
            return False
    return True


_ORDER_CHUNK_ROWS = 1 << 20


def _numpy_integers() -> frozenset:
    """The integer types numpy holds (not Int128, which a damaged table can carry)."""
    import polars as pl

    return frozenset(
        (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)
    )


def _far_steps_in_order(raw, column, source: SourceInfo) -> None:
    """`_step_order_warnings` for sorted, whole, non-negative steps: none goes back, the
    median is read at the middle, and the far steps are the last ones (the same numbers
    as the general path, which takes them from the steps as floats)."""
    import numpy as np
    import polars as pl

    steps = column.to_numpy()
    middle = steps[(steps.size - 1) // 2 : steps.size // 2 + 1].astype(np.float64)
    typical = max(float(cast("float | None", pl.Series(middle).median()) or 0.0), 1024.0)
    bar = typical * _FAR_FACTOR
    # every step at or below the bar as an integer is at or below it as a float too
    start = int(np.searchsorted(steps, int(min(bar, 2.0**62)), side="right"))
    tail = steps[start:].astype(np.float64)
    far = np.flatnonzero(tail > bar)
    if far.size:
        first = start + int(far[0])
        _warn_far(source, far.size, int(raw["_row"][first]), float(steps[first]))
