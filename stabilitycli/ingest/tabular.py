"""Plain tables: CSV / TSV, Parquet, Arrow IPC (Feather): a step column and metric columns.

Read with polars (CSV with `infer_schema_length=None`, so a column whose
first rows are empty is still typed from all its rows; `nan`, `inf`, `NaN`,
`-Infinity` parse as floats). The step column is `--step-key` or the first
of the usual names (`step`, `global_step`, `iteration`, `_step`...), a rank
column likewise (`rank`, `global_rank`...).

CSV is text written row by row, so it gets the text-log treatment: a last
line without a newline was cut off mid-write and is dropped with a warning,
a line with the wrong number of fields or a cell that is not a number is
rejected with its line number (line 1 is the header). Parquet and Arrow
files carry their own footer: a truncated one cannot be read at all and says
so.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from stabilitycli import aliases
from stabilitycli.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

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
    raw = load_table(path, source)
    return finish(raw, source, options)


def load_table(path: Path, source: SourceInfo):
    """A raw polars frame with a `_row` column, from any of the table formats."""
    import polars as pl

    from stabilitycli.frame import ROW

    name = path.name.lower()
    with open(path, "rb") as handle:
        head = handle.read(8)
    if name.endswith(PARQUET_SUFFIXES) or head.startswith(PARQUET_MAGIC):
        frame = _binary(path, source, "parquet", pl.read_parquet)
    elif name.endswith(ARROW_SUFFIXES) or head.startswith(ARROW_MAGIC):
        frame = _binary(path, source, "Arrow IPC", _read_ipc)
    else:
        return read_csv(path, source, separator="\t" if name.endswith(".tsv") else ",")
    if frame.height == 0:
        raise StabInputError(str(path), "the table has no rows")
    return frame.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(pl.Int64))


def _read_ipc(path: Path):
    import polars as pl

    with open(path, "rb") as handle:
        is_file_format = handle.read(6) == ARROW_MAGIC
    # the IPC *file* format opens with ARROW1 and has a footer; a *stream* has neither
    return pl.read_ipc(path) if is_file_format else pl.read_ipc_stream(path)


def _binary(path: Path, source: SourceInfo, kind: str, reader):
    if path.stat().st_size == 0:
        raise StabInputError(str(path), "the file is empty")
    try:
        return reader(path)
    except Exception as err:
        raise StabInputError(
            str(path),
            f"cannot read as {kind} (truncated or corrupt: its footer is missing?): "
            f"{str(err).splitlines()[0][:200]}",
        ) from None


def read_csv(path: Path, source: SourceInfo, separator: str = ","):
    """CSV into a raw frame: cut-off last line dropped, bad lines and cells rejected by line."""
    import polars as pl

    from stabilitycli.frame import ROW

    data = path.read_bytes()
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
    try:
        frame = pl.read_csv(io.BytesIO(data), separator=separator, infer_schema_length=None)
        lines = None
    except Exception:
        frame, lines = _slow_csv(data, separator, source)
    if frame.height == 0:
        raise StabInputError(str(path), "the table has a header but no rows")
    if lines is None:
        if b"\n\n" in data or b'"' in data:
            frame, lines = _slow_csv(
                data, separator, source
            )  # blank lines / quoted newlines shift numbers
        else:
            lines = list(range(2, frame.height + 2))
    frame = frame.with_columns(pl.Series(ROW, lines, dtype=pl.Int64))
    return reject_bad_cells(frame, source)


def _slow_csv(data: bytes, separator: str, source: SourceInfo):
    import polars as pl

    reader = csv.reader(
        io.StringIO(data.decode("utf-8", "replace"), newline=""), delimiter=separator
    )
    rows: list[list[str]] = []
    lines: list[int] = []
    header: list[str] | None = None
    for record in reader:
        line = reader.line_num
        if header is None:
            header = record
            continue
        if not record or all(not c.strip() for c in record):
            continue
        if len(record) != len(header):
            source.reject(line, f"{len(record)} fields where the header has {len(header)}")
            continue
        rows.append(record)
        lines.append(line)
    if header is None:
        raise StabInputError(source.path, "no header line")
    columns = {name: [r[i] for r in rows] for i, name in enumerate(header)}
    frame = pl.DataFrame(columns, schema={name: pl.String for name in header})
    # numbers come back as numbers; text columns stay text
    casts = []
    for name in header:
        values = frame[name].str.strip_chars()
        as_float = values.cast(pl.Float64, strict=False)
        present = ~values.is_in(list(_EMPTY))
        if (as_float.is_not_null() | ~present).all():
            casts.append(as_float.alias(name))
    if casts:
        frame = frame.with_columns(casts)
    return frame, lines


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
    """Pick the step and rank columns and hand the raw table to `finalize`."""
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
    return finalize(
        raw, source, step_key=step_key, rank_key=rank_key, overrides=options.metric_overrides
    )
