"""Trainer stdout whose records are Python-dict or JSON-object lines.

* Hugging Face Trainer prints each log as a dict (`print(output)` / `tqdm.write`):
  `{'loss': 2.0491, 'grad_norm': 1.2, 'learning_rate': 0.000196, 'epoch': 0.28}`
  (`nan`, `inf` as Python writes them), an eval dict (`{'eval_loss': ...}`) and a
  final summary (`{'train_runtime': ..., 'train_loss': ...}`: the mean of the
  whole run, rejected as in `hf_trainer`). The dicts carry no step: it is taken
  from the tqdm bar of the training loop (`380/2724 [`): the one `tqdm.write`
  draws again right below the dict (`\r` opening the next line), which shows
  the count when the dict was written, else the last one printed before the
  dict on the same or an earlier line (which can be older: tqdm skips draws);
  never the nested evaluation bar, which tqdm follows with a cursor-up `ESC[A`
  (the bar shows the steps done, which is the `global_step` the Trainer logs
  at), else from line order; a note says which.
* fairseq / metaseq `--log-format json`: `... | train_inner | {"epoch": 1, "loss":
  "13.7", ..., "num_updates": "100"}` (numbers as strings); `valid` lines are
  evaluations, `train` lines the epoch summary (rejected: a mean over the epoch).

DeepSpeed's fp16 messages glued to the bars (`... 378/2724 [...][...] [deepspeed]
OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32`) become
overflow events at the step of the bar on their line (`_dsmessages` reads them).
Only flat dicts are read; a dict line without its closing brace is a rejected
record (cut or wrapped), but for the last line of a log cut mid-line, whose pairs a
comma follows are whole and kept when the dict has a step (its key, or a bar). Dict
lines are read by shape, vectorised (`_dictline`); bars are located vectorised; lines
with messages or redrawn bars one by one.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame.step_fraction import planned_note
from stabilitycli.ingest import bounded
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import _dictline as dl
from stabilitycli.ingest.text import _dsmessages as dsm
from stabilitycli.ingest.text import _textline as tx
from stabilitycli.ingest.text import textlog as tl

NAME = "dictlog"
_OPEN = re.compile(r"\{\s*['\"][\w/.-]+['\"]\s*:")
_SNIFF = re.compile(r"""\{[^{}\n]*?['"][\w/.-]*loss[\w/.-]*['"]\s*:""")
# tqdm: `380/2724 [13:58:09<86:18:35, 132.44s/it]`
_BAR = re.compile(r"(\d+)/(\d+) \[")
# a nested bar (the Trainer's evaluation bar, `2/2 [00:00<00:00]` under the training bar):
# tqdm moves the cursor back up after drawing it (ESC[A); its count is not the step
_NESTED_BAR = r"\d+/\d+ \[[^\]\r\n]*\]\x1b\[A"
# `tqdm.write` clears the bar, prints the line and draws the bar again at once, on the next
# line, from a carriage return: that bar shows the count when the line was written (the bar
# above may be older: tqdm skips draws between `miniters`)
_RESTORED_BAR = r"^\r[^\r\n]*?(\d+)/\d+ \[[^\]\r\n]*\](?:$|[^\x1b])"
_MESSAGE = r"verflow|loss scale"
_ONE_BY_ONE = r"verflow|loss scale|[\r\x08\x1b]"
STEPS_FROM = {
    "key": "the step key of each dict",
    "bar": "the tqdm progress bar printed before each dict",
    "order": "line order (no step key and no progress bar): 0, 1, 2, ...",
    "buffered": "the order of the training dicts (1, 2, 3, ...; an eval dict takes the step of "
    "the training dict before it): stdout was block-buffered, the dicts came after the bars",
}
BUFFERED_WARNING = (
    "{n} training dicts share their progress bar with the one before them: stdout was "
    "block-buffered (the dicts "
    "reached the log after the bars), so the bar does not give their steps; they are numbered "
    "in order (1, 2, 3, ...: the step only with logging_steps=1). Run with `python -u` or "
    "PYTHONUNBUFFERED=1 to keep them with their bar"
)


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_generic_text_log(path, head):
        return False
    text = tl.peek(path, head)[: 256 << 10]
    # a file of bare JSON objects is JSONL, read by `jsonl`; one of Python dicts printed
    # with repr (`{'loss': 2.5, ...}`, what `grep "{'loss'" train.log` leaves) is this family's
    return re.match(r"\s*\{\s*[\"}]", text) is None and _SNIFF.search(text) is not None


def read(path: Path, options: ReadOptions):
    import polars as pl

    limits = options.limits
    bounded.refuse_oversize(path, path.stat().st_size, limits)
    lines, cut = tl.read_lines(path)
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    reader = _Reader(source)
    for number, reason in _oversized(lines, limits.max_line_bytes):
        reader.reject(number, False, reason)
    frame = _lines_to_read(lines)
    one_by_one = pl.col("text").str.contains(_ONE_BY_ONE) | (
        pl.lit(cut) & (pl.col("_line") == len(lines))
    )
    plain = frame.filter(~one_by_one & pl.col("text").str.contains("{", literal=True))
    restored = dict(
        frame.filter(pl.col("_restore").is_not_null()).select("_line", "_restore").rows()
    )
    plain = plain.with_columns(pl.coalesce("_restore", "_bar").alias("_bar")).drop("_restore")
    shaped, left, rejected = dl.vectorised(plain)
    for number, reason in rejected:
        reader.reject(number, False, reason)
    one_by_one_rows = frame.filter(one_by_one).drop("_restore").rows()
    for number, line, bar in sorted([*one_by_one_rows, *left]):
        reader.bar = bar
        reader.restored = restored.get(number)
        reader.line(number, line, cut and number == len(lines))
    records = _records([f for f in (shaped, _frame(reader.rows)) if f is not None])
    if records is not None:
        records = _unbuffered_steps(records, source)
    if records is None:
        if source.rows_rejected:
            first = source.rejections[0]
            raise StabInputError(
                source.path, f"no dict record could be read ({first.reason})", line=first.line
            )
        raise StabInputError(source.path, "no dict line with a metric found")
    events = dsm.place(reader.mentions, [])
    overflow = dsm.frame_rows(events, "loss scale")
    for row in overflow:
        row["step"] = row.pop("_step")
    source.notes.extend(dsm.summary(reader.mentions, events))
    source.line_order_steps.update(dsm.order_numbered(events))
    reader.record_lines.update(records["_row"].to_list())
    hows = sorted(set(records["_how"].to_list()))
    reader.notes(len(lines), [STEPS_FROM[h] for h in hows])
    if source.dtype is None and events:
        source.dtype, source.dtype_origin = "fp16", "inferred: DeepSpeed fp16 loss-scale messages"
    raw = _planned_length(records.drop("_how"), source)
    if overflow:
        raw = pl.concat([raw, pl.DataFrame(overflow)], how="diagonal_relaxed")
    return tl.finish_records(raw, source, options.metric_overrides)


def _whole_pairs(text: str) -> dl.Parsed | None:
    """A dict cut before its closing brace, read without its last pair (its value may be a
    prefix): the pairs a comma follows are whole. None when none with a number is left."""
    start = text.rfind("{")
    keys = [m.start() for m in re.finditer(r"""[,{]\s*['"]""", text[start:])]
    if len(keys) < 2:
        return None
    return dl.parse(text[: start + keys[-1]] + "}")


def _oversized(lines: list[str], limit: int) -> list[tuple[int, str]]:
    """Lines over max_line_bytes, emptied in place: a dict among them is a rejected record.

    The shape grouping and the regexes downstream cost seconds on a line of
    tens of MiB; no trainer prints one, so it is damage (or a binary dump).
    """
    if not lines or max(map(len, lines)) * 4 <= limit:
        return []  # no line can be over the limit even at 4 bytes a char
    out = []
    for index, line in enumerate(lines):
        if len(line) * 4 > limit and len(line.encode("utf-8", "surrogatepass")) > limit:
            lines[index] = ""
            if "{" in line:
                reason = f"line of {len(line):,} chars, over max_line_bytes = {limit:,}"
                out.append((index + 1, reason))
    return out


def _frame(rows: list[dict]):
    import polars as pl

    return pl.DataFrame(rows, infer_schema_length=None) if rows else None


def _planned_length(records, source: SourceInfo):
    """The records without the `N/M` steps' planned lengths, which a note keeps."""
    import polars as pl

    for column in [c for c in records.columns if c.startswith(dl.PLANNED)]:
        first = records.filter(pl.col(column).is_not_null()).row(0, named=True)
        planned = records[column].drop_nulls().cast(pl.Int64).unique(maintain_order=True)
        example = f"{int(first['step'])}/{int(first[column])}"
        source.notes.append(planned_note(column[len(dl.PLANNED) :], example, planned.to_list()))
        records = records.drop(column)
    return records


def _unbuffered_steps(records, source: SourceInfo):
    """Training dicts that follow the same bar: stdout buffered; number them in order instead.

    A Trainer writes its dicts to stdout and its bar to stderr: with stdout
    block-buffered (no `python -u`), the dicts reach the file in chunks after
    the bars, and consecutive training dicts get the same bar step. The bar
    steps are then no use; the dicts are numbered in order, as they were
    logged, and an eval dict takes the number of the training dict before it.
    """
    import polars as pl

    if "loss" not in records.columns:
        return records
    by_bar = pl.col("_how") == "bar"
    train = by_bar & pl.col("loss").is_not_null()
    trains = records.filter(train)
    same = trains["step"].eq_missing(trains["step"].shift(1)).sum()
    if not same:
        return records
    source.warnings.append(BUFFERED_WARNING.format(n=same))
    order = train.cast(pl.Int64).cum_sum()
    return records.with_columns(
        pl.when(by_bar).then(order).otherwise(pl.col("step")).alias("step"),
        pl.when(by_bar).then(pl.lit("buffered")).otherwise(pl.col("_how")).alias("_how"),
    )


def _records(frames: list):
    """Every record in line order; a record with no step from its dict or a bar gets its order."""
    import polars as pl

    if not frames:
        return None
    records = pl.concat(frames, how="diagonal_relaxed").sort("_row")
    order = pl.int_range(pl.len()).cast(pl.Float64)
    no_step = pl.col("step").is_null()
    return records.with_columns(
        # a step past int64 (a damaged digit run) becomes null: rejected by finalize, named
        pl.when(no_step)
        .then(order)
        .otherwise(pl.col("step"))
        .cast(pl.Int64, strict=False)
        .alias("step"),
        pl.when(no_step).then(pl.lit("order")).otherwise(pl.col("_how")).alias("_how"),
    )


def _lines_to_read(lines: list[str]):
    """The lines that can hold a record or a message, each with the last bar position above it.

    A log is mostly progress bars: their positions are taken vectorised, and
    only the lines with a dict or a loss-scale message are read.
    """
    import polars as pl

    frame = pl.DataFrame({"text": lines}).with_row_index("_line", offset=1)
    bars = pl.col("text").str.replace_all(_NESTED_BAR, "")
    last_bar = bars.str.extract_all(_BAR.pattern).list.last().str.extract(r"^(\d+)")
    # strict=False: a bar count past int64 is damage, not a position
    restore = pl.col("text").str.extract(_RESTORED_BAR).cast(pl.Int64, strict=False)
    frame = frame.with_columns(
        last_bar.cast(pl.Int64, strict=False).forward_fill().shift(1).alias("_bar"),
        restore.shift(-1).alias("_restore"),
        pl.col("_line").cast(pl.Int64),
    )
    wanted = pl.col("text").str.contains(r"\{|" + _MESSAGE)
    return frame.filter(wanted).select("_line", "text", "_bar", "_restore")


class _Reader:
    """The lines read one by one: messages, redrawn bars, dicts that fit no shape."""

    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.rows: list[dict] = []
        self.mentions: list[dsm.Mention] = []
        self.bar: int | None = None
        self.restored: int | None = None  # the bar tqdm.write drew again below the line
        self.record_lines: set[int] = set()
        self.state: dict = {}
        self.rejected_lines: set[int] = set()

    def line(self, number: int, raw: str, cut: bool) -> None:
        before = len(self.mentions)
        if "\x1b[A" in raw:
            raw = re.sub(_NESTED_BAR, "", raw)
        for text in tx.logical_lines(raw):
            self.segment(number, text, cut)
        if len(self.mentions) > before:
            self.record_lines.add(number)

    def segment(self, number: int, text: str, cut: bool) -> None:
        if "[" in text:
            for bar in _BAR.finditer(text):
                if len(bar.group(1)) < 19:  # past int64 it is damage, not a position
                    self.bar = int(bar.group(1))
        if "verflow" in text or "loss scale" in text:
            for m in dsm.scan_line(number, text, tl.timestamp(text), self.state):
                if self.bar is not None:
                    m = replace(m, step=self.bar, placed_by="the progress bar on their line")
                self.mentions.append(m)
        parsed = dl.parse(text)
        if parsed is None and cut and _OPEN.search(text):
            parsed = _whole_pairs(text)
        if parsed is None:
            if _OPEN.search(text):
                self.reject(number, cut, "dict record without its closing brace (cut or wrapped)")
            return
        at = self.restored if self.restored is not None else self.bar
        if parsed.rejected is not None or (cut and parsed.step is None and at is None):
            # a cut dict with no step of its own nor a bar: its step key may be what was cut
            self.reject(number, cut, parsed.rejected or "")
            return
        if cut:
            last = list(parsed.values)[-1] if parsed.values else str(parsed.step_key)
            where = tl.NO_FINAL_NEWLINE
            self.source.warnings.append(
                tl.cut_kept_warning(number, "the last dict record", last, where)
            )
        how = "key" if parsed.step is not None else "bar"
        step = parsed.step if parsed.step is not None else at
        row = {"_row": number, "step": step, "_how": how, **parsed.values}
        if parsed.planned is not None:
            row[dl.PLANNED + str(parsed.step_key)] = parsed.planned
        self.rows.append(row)

    def reject(self, number: int, cut: bool, reason: str) -> None:
        if cut:
            self.source.warnings.append(tl.truncation_warning(number, "the last dict record"))
            reason = "last record cut off mid-write"
        self.source.reject(number, reason)
        self.rejected_lines.add(number)

    def notes(self, total: int, steps_from: list[str]) -> None:
        records = len(self.record_lines)
        self.source.lines_skipped = total - len(self.record_lines | self.rejected_lines)
        self.source.notes.append(
            f"read as dict lines; steps from {' and '.join(steps_from)}; "
            f"{records} of {total} lines are records, "
            f"{self.source.lines_skipped} other lines skipped as text"
        )
