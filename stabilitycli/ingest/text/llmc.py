"""llm.c `main.log`: one short record per line, written by `train_gpt2.cu`.

    s:0 tel:11.0095                           validation loss   -> eval_loss
    s:0 trl:11.0116 lr:0.000001 norm:14.96    train loss, lr, grad norm
    s:250 eval:0.2437                         HellaSwag accuracy -> hellaswag_acc

The writer ends every record with a newline and flushes, so a last line
without one was cut off (a job that died, or a copy that stopped there): its
last field could be a prefix of the real one (`3.2` of `3.2813`) and is dropped;
the fields a blank follows are whole and kept, with a warning (the line is
dropped when none with a value is left). Lines are parsed
with one vectorised regex over the whole file; a line that is not a record is
rejected with its number.
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import textlog as tl

NAME = "llmc"
_SNIFF = re.compile(r"(?m)^s:\d+ (?:trl|tel):\S+")
_RECORD = (
    r"^s:(?P<step>\d+)\s+(?:trl:(?P<trl>\S+)(?:\s+lr:(?P<lr>\S+))?(?:\s+norm:(?P<norm>\S+))?"
    r"|tel:(?P<tel>\S+)|eval:(?P<eval>\S+))\s*$"
)


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_text_log(path, head):
        return False
    return _SNIFF.search(head.decode("utf-8", "replace")) is not None


def read(path: Path, options: ReadOptions):
    import polars as pl

    from stabilitycli.frame import ROW, finalize

    source = SourceInfo(path=str(path), format=NAME, run=path.parent.name or None)
    lines, cut, _too_long = tl.read_log(path, source, options.limits)
    whole = _whole_fields(lines[-1]) if cut and lines else None
    if whole is not None:  # the fields a blank follows are whole: kept
        lines[-1], last = whole
        where = tl.NO_FINAL_NEWLINE
        source.warnings.append(tl.cut_kept_warning(len(lines), "the last record", last, where))
    elif cut:
        source.warnings.append(tl.truncation_warning(len(lines), "the last record"))
        source.reject(len(lines), "last line cut off mid-write")
        lines = lines[:-1]
    # typed, since a log of one cut line leaves no line to infer a type from
    table = pl.DataFrame({"line": lines}, schema={"line": pl.String}).with_row_index(ROW, offset=1)
    table = table.with_columns(pl.col(ROW).cast(pl.Int64)).filter(
        pl.col("line").str.strip_chars() != ""
    )
    parts = table.with_columns(pl.col("line").str.extract_groups(_RECORD).alias("m")).unnest("m")
    bad = parts.filter(pl.col("step").is_null())
    for row in bad[ROW].head(5).to_list():
        source.reject(row, "not an llm.c record (s:N trl:/tel:/eval:)")
    if bad.height > 5:
        reason = "not an llm.c record (s:N trl:/tel:/eval:)"
        source.rows_rejected += bad.height - 5
        source.rejection_counts[reason] += bad.height - 5
    good = parts.filter(pl.col("step").is_not_null())
    if good.height == 0:
        first = source.rejections[0] if source.rejections else None
        raise StabInputError(
            source.path,
            "no llm.c record (`s:N trl:X` / `s:N tel:X`) found"
            + (f"; line {first.line}: {first.reason}" if first else ""),
        )
    raw = good.select(
        pl.col(ROW),
        # digits past the Int64 range are no step: null, and `finalize` rejects the row
        pl.col("step").cast(pl.Int64, strict=False),
        pl.col("trl"),
        pl.col("lr"),
        pl.col("norm"),
        pl.col("tel"),
        pl.col("eval").alias("hellaswag_acc"),
    )
    # a field present but not a number (`trl:abc`) is a bad record, not a missing value
    unreadable = raw.filter(
        pl.any_horizontal(
            [
                pl.col(c).is_not_null() & pl.col(c).cast(pl.Float64, strict=False).is_null()
                for c in ("trl", "lr", "norm", "tel", "hellaswag_acc")
            ]
        )
    )
    for row in unreadable[ROW].to_list():
        source.reject(row, "a field of the record is not a number")
    raw = raw.filter(~pl.col(ROW).is_in(unreadable[ROW].implode()))
    if bad.height:
        first = bad[ROW][0]
        source.warnings.append(f"{bad.height} line(s) are not llm.c records; first at line {first}")
    source.notes.append(
        "llm.c `trl` is the loss of one step (no averaging); `tel` is the validation loss"
    )
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", overrides=options.metric_overrides)


def _whole_fields(line: str) -> tuple[str, str] | None:
    """A cut last line without its last token (which may be a prefix: `3.2` of `3.2813`), and
    the key of its last whole field; None when no record with a value is left."""
    text = line if line[-1:].isspace() else line[: max(line.rfind(" "), line.rfind("\t"), 0)]
    text = text.rstrip()
    if re.fullmatch(_RECORD, text) is None:
        return None
    return text, text.split()[-1].partition(":")[0]
