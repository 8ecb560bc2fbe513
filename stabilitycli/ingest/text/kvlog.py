"""Trainer stdout made of `key: value` / `key=value` / `key value` records, one per line.

nanoGPT, modded-nanogpt, torchtitan, MLX-LM, litgpt, Keras `fit`, NeMo's and
Lightning's progress bars, fairseq's simple format and any other `step ... loss ...` line
(`_kvfamilies` names each and says what its keys mean). What surrounds a
record - quote markers, timestamps, launcher tags, ANSI colours, progress
bars redrawn with carriage returns - is taken away by `_textline`; the fields
are found by `_kvfields`.

A line is a *record* when it holds a step (`step`, `iter`, `iteration`,
`global_step`, `num_updates`; for Keras the `Epoch N/M` line before it) and
at least one number. A line with a step whose fields are not numbers is a
*rejected* record (named with its line). Every other line (banners, tables,
blank lines, bars) is *skipped text*: counted, not a row. A field whose value
is not a number (`5.7TFLOPS`, `1d 6h 54m`) is skipped, not the line.
When no line holds a step, lines with a loss are numbered in order (a note
says so).

`--pattern REGEX` reads anything else: each line the regex matches is a
record; its named groups are the fields (`step` is the step).
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import _kvfamilies as kfam
from stabilitycli.ingest.text import _kvfields as kf
from stabilitycli.ingest.text import _kvscan as ks
from stabilitycli.ingest.text import _kvwrap as kw
from stabilitycli.ingest.text import _textline as tx
from stabilitycli.ingest.text import textlog as tl

NAME = "kvlog"
# a log may open with a printed training script or an argument dump before its first record
SNIFF_CHARS = 256 << 10
SNIFF_RECORDS = 2


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_generic_text_log(path, head):
        return False
    text = tl.peek(path, head)[:SNIFF_CHARS]
    records = stepless = 0
    opened = False  # a Keras `Epoch N/M` line seen: the bare numbers below it are records
    for line in text.split("\n"):
        for segment in tx.logical_lines(line.rstrip("\r")):
            what, _ = ks.kind(found := kf.fields(segment))
            opened = opened or what == "context"
            if what == "record" or (what == "needs" and opened):
                records += 1
            elif what == "needs" and any("loss" in k.lower() for k in found.metrics):
                stepless += 1  # a bare `loss: 2.31` log, read in line order
        if records >= SNIFF_RECORDS or stepless > SNIFF_RECORDS:
            return True
    return False


def read(path: Path, options: ReadOptions):
    import polars as pl

    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    lines, cut, too_long = tl.read_log(path, source, options.limits)
    if options.pattern:
        return _read_pattern(lines, cut, source, options, too_long)
    found = ks.scan(lines)
    frame, wrapped, joined_texts = kw.join_wrapped(found.frame, lines)
    if wrapped:
        source.notes.append(
            f"{len(wrapped)} continuation line(s) of records a terminal hard-wrapped, "
            "joined back to their record"
        )
    records = frame.filter(pl.col(ks.KIND) == "record")
    step_from = "the step written on each line"
    if records.height == 0:
        lossy = [c for c in frame.columns if "loss" in c.lower() and not c.startswith("_")]
        # no loss key at all leaves nothing to number (and polars no columns to fold)
        records = (
            frame.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in lossy))
            if lossy
            else frame.clear()
        )
        records = records.with_columns(pl.int_range(pl.len()).alias(ks.STEP))
        step_from = "line order (no line carries a step): 0, 1, 2, ..."
    for number, reason in found.rejected:
        source.reject(number, reason)
    if records.height == 0:
        if source.rejections:
            first = source.rejections[0]
            raise StabInputError(
                source.path, f"no record could be read ({first.reason})", line=first.line
            )
        raise StabInputError(source.path, "no `step ... loss ...` record found")
    family = kfam.family_of([found.texts[n] for n in sorted(found.texts)[:50]])
    source.writer = None if family is kfam.GENERIC else family.name
    if family.name == "Keras fit":
        step_from = "the `Epoch N/M` line before each record"
    elif family.name == "Lightning progress bar":
        step_from = "the bar's epoch and count"
        records = _last_draw_of_each_step(records)
    ranks = (
        records[ks.RANK].drop_nulls().unique().sort().to_list()
        if ks.RANK in records.columns
        else []
    )
    per_rank = len(ranks) > 1
    # a cut last line that continues a wrapped record cuts that record
    cut_at = records[ks.LINE][-1] if cut and len(lines) in wrapped else len(lines)
    # ...and its whole fields are read from the joined text, as an unwrapped line's are
    cut_text = (lines[-1] if cut_at == len(lines) else joined_texts.get(cut_at)) if cut else None
    raw = _rows(records, family, cut, cut_at, source, per_rank=per_rank, cut_text=cut_text)
    if per_rank:
        source.notes.append(
            f"records of {len(ranks)} ranks ({_span(ranks)}), told apart by their launcher tags"
        )
    record_lines = records[ks.LINE].n_unique() + len(wrapped)
    rejected_lines = len({n for n, _ in found.rejected}) + too_long
    _notes(source, family, step_from, found, record_lines, rejected_lines, len(lines))
    return tl.finish_records(
        raw, source, options.metric_overrides, rank_key="rank" if per_rank else None
    )


def _last_draw_of_each_step(records):
    """A bar drawn again at the same step (its postfix set after its count): the last draw."""
    import polars as pl

    keys = [ks.STEP, ks.RANK] if ks.RANK in records.columns else [ks.STEP]
    same_as_next = pl.all_horizontal(pl.col(k).eq_missing(pl.col(k).shift(-1)) for k in keys)
    return records.filter(~same_as_next)


def _whole_fields(records, text: str):
    """The records with the cut last one keeping only its whole fields (those that something
    follows on the line), and the key of its last one; None when none with a value is left."""
    import polars as pl

    segments = tx.logical_lines(text)
    segment = segments[-1] if segments else ""
    matches = list(kf.FIELD.finditer(segment))
    if matches and not segment[matches[-1].end() :].strip():
        segment = segment[: matches[-1].start()]  # nothing follows it: maybe a prefix
    found = kf.fields(segment)
    row = records.row(records.height - 1, named=True)
    # the step must be the line's own (or, with no axis on the line, the `Epoch N/M` line's
    # above it): an epoch left where the step key was cut off is no step
    own_step = found.step() == row[ks.STEP] if found.axes else _context_step(records)
    if not own_step:
        return None
    columns = [c for c in records.columns if not c.startswith("_") and c not in (ks.STEP, "rank")]
    kept = [c for c in found.metrics if c in columns and row[c] is not None]
    if not kept:
        return None
    lost = [pl.lit(None, dtype=records.schema[c]).alias(c) for c in columns if c not in kept]
    last = records.tail(1).with_columns(lost)
    return pl.concat([records.head(records.height - 1), last]), kept[-1]


def _context_step(records) -> bool:
    """The last record took its step from a context line above it (Keras' `Epoch N/M`)."""
    return ks.EPOCH in records.columns and records[ks.EPOCH][-1] == records[ks.STEP][-1]


def _span(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 4 else f"{ranks[0]}-{ranks[-1]}"


def _rows(
    records,
    family: kfam.Family,
    cut: bool,
    last_line: int,
    source: SourceInfo,
    *,
    per_rank=False,
    cut_text: str | None = None,
):
    import polars as pl

    if cut and records[ks.LINE][-1] == last_line:
        # the trainer ends every record with a newline: the last number may be a prefix; the
        # fields something follows on the line are whole, and kept
        kept = _whole_fields(records, cut_text) if cut_text is not None else None
        if kept is not None:
            records, last = kept
            where = tl.NO_FINAL_NEWLINE
            source.warnings.append(tl.cut_kept_warning(last_line, "the last record", last, where))
        else:
            source.warnings.append(tl.truncation_warning(last_line, "the last record"))
            source.reject(last_line, "last record cut off mid-write")
            records = records.head(records.height - 1)  # a bar redrawn there keeps the rest
    # progress bars redrawn on one physical line hold several records: number them apart,
    # so that a row number orders the records as they were printed
    if records[ks.LINE].n_unique() != records.height:
        source.notes.append("rows are numbered by record (a progress bar holds several a line)")
        records = records.with_columns(pl.int_range(1, pl.len() + 1).alias(ks.LINE))
    metrics = [c for c in records.columns if not c.startswith("_") and c not in (ks.STEP, "rank")]
    taken = {"_row", ks.STEP, "rank"}
    columns = []
    for key in metrics:
        if not records[key].is_not_null().any():
            continue
        # a family's name for a key (`Train loss` -> `loss`) may be a key of its own on a
        # damaged line: the first keeps the name, the other its key as written (marked
        # when even that is taken), so no value is dropped
        name = family.rename.get(key, key)
        name = name if name not in taken else key
        name = name if name not in taken else f"{key} (as logged)"
        taken.add(name)
        columns.append(pl.col(key).alias(name))
    return records.select(
        pl.col(ks.LINE).alias("_row"),
        pl.col(ks.STEP),
        *([pl.col(ks.RANK).alias("rank")] if per_rank else []),
        *columns,
    )


def _notes(source, family, step_from, found, record_lines, rejected_lines, total) -> None:
    source.lines_skipped = total - record_lines - rejected_lines
    source.notes.append(
        f"read as {family.name} stdout; steps from {step_from}; {record_lines} of "
        f"{total} lines are records, {source.lines_skipped} other lines (banners, tables, "
        "progress bars, blank lines) skipped as text"
    )
    if family.note:
        source.notes.append(family.note)
    for key, count in sorted(found.skipped_fields.items(), key=lambda kv: -kv[1])[:5]:
        source.notes.append(
            f"field {key!r} skipped on {count} line(s): its value is not a number stab reads"
        )


def _read_pattern(
    lines: list[str], cut: bool, source: SourceInfo, options: ReadOptions, too_long: int = 0
):
    try:
        regex = re.compile(options.pattern or "")
    except re.error as err:
        raise StabUsageError(f"--pattern: not a regular expression ({err})") from None
    groups = [g for g in regex.groupindex if g != "step"]
    if not groups:
        raise StabUsageError("--pattern needs a named group per metric, e.g. (?P<loss>\\S+)")
    records: list[tuple[int, int, dict[str, float | None]]] = []
    rejected: set[int] = set()
    order = 0
    for number, line in enumerate(lines, start=1):
        for segment in tx.logical_lines(line):
            match = regex.search(segment)
            if match is None:
                continue
            values: dict[str, float | None] = {}
            for name in groups:
                text = match.group(name)
                try:
                    values[name] = tx.value(text) if text is not None else None
                except ValueError:
                    values[name] = None
            step_text = match.groupdict().get("step")
            if not any(v is not None for v in values.values()) or (
                step_text is not None and not step_text.strip().isdigit()
            ):
                source.reject(number, f"--pattern matched but no number was read: {segment[:40]!r}")
                rejected.add(number)
                continue
            step = tl.whole(step_text) if step_text else order
            if step is None:
                source.reject(number, tl.STEP_RANGE_REASON)
                rejected.add(number)
                continue
            records.append((number, step, values))
            order += 1
    if not records:
        raise StabInputError(source.path, "no line matches --pattern")
    import polars as pl

    frame = pl.DataFrame(
        [{ks.LINE: n, ks.STEP: step, **values} for n, step, values in records],
        infer_schema_length=None,
    )
    rows = _rows(frame, kfam.Family("--pattern", regex), cut, len(lines), source)
    how = "its `step` group" if "step" in regex.groupindex else "line order (no `step` group)"
    source.lines_skipped = len(lines) - len({r[0] for r in records} | rejected) - too_long
    source.notes.append(
        f"read with --pattern; steps from {how}; {len(records)} of {len(lines)} lines matched"
    )
    return tl.finish_records(rows, source, options.metric_overrides)
