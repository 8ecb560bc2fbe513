"""Trainer stdout whose records are Python-dict or JSON-object lines.

* Hugging Face Trainer prints each log as a dict (`print(output)` / `tqdm.write`):
  `{'loss': 2.0491, 'grad_norm': 1.2, 'learning_rate': 0.000196, 'epoch': 0.28}`
  (`nan`, `inf` as Python writes them), an eval dict (`{'eval_loss': ...}`) and a
  final summary (`{'train_runtime': ..., 'train_loss': ...}`: the mean of the
  whole run, rejected as in `hf_trainer`). The dicts carry no step: it is taken
  from the tqdm bar of the training loop (`380/2724 [`) printed before the dict
  on the same or an earlier line (the bar shows the steps done, which is the
  `global_step` the Trainer logs at), else from line order; a note says which.
* fairseq / metaseq `--log-format json`: `... | train_inner | {"epoch": 1, "loss":
  "13.7", ..., "num_updates": "100"}` (numbers as strings); `valid` lines are
  evaluations, `train` lines the epoch summary (rejected: a mean over the epoch).

DeepSpeed's fp16 messages glued to the bars (`... 378/2724 [...][...] [deepspeed]
OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64, reducing to 32`) become
overflow events at the step of the bar on their line (`_dsmessages` reads them).
Only flat dicts are read; a dict line without its closing brace is a rejected
record (cut or wrapped).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from stabilitycli.errors import StabInputError
from stabilitycli.ingest import _dsmessages as dsm
from stabilitycli.ingest import _textline as tx
from stabilitycli.ingest import _textlog as tl
from stabilitycli.ingest.hf_trainer import SUMMARY_KEYS, SUMMARY_REASON
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

NAME = "dictlog"
_DICT = re.compile(r"\{([^{}]*)\}")
_OPEN = re.compile(r"\{\s*['\"][\w/.-]+['\"]\s*:")
_PAIR = re.compile(r"""(['"])([^'"]+)\1\s*:\s*('[^']*'|"[^"]*"|[^,}\s]+)""")
_SNIFF = re.compile(r"""\{[^{}\n]*?['"][\w/.-]*loss[\w/.-]*['"]\s*:""")
# tqdm: `380/2724 [13:58:09<86:18:35, 132.44s/it]`
_BAR = re.compile(r"(\d+)/(\d+) \[")
_STEP_KEYS = ("step", "global_step", "num_updates", "train_num_updates", "valid_num_updates")
_FAIRSEQ_TAG = re.compile(r"\|\s*(train_inner|train|valid\w*)\s*\|\s*\{")
EPOCH_SUMMARY = "fairseq epoch summary (a mean over the epoch, not a step's value)"


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_generic_text_log(path, head):
        return False
    text = tl.peek(path, head)[: 256 << 10]
    # a file of bare JSON objects is JSONL, read by `jsonl`
    return not text.lstrip().startswith("{") and _SNIFF.search(text) is not None


def read(path: Path, options: ReadOptions):
    lines, cut = tl.read_lines(path)
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    reader = _Reader(source)
    for number, line, bar in _lines_to_read(lines):
        reader.bar = bar if bar is not None else reader.bar
        reader.line(number, line, cut and number == len(lines))
    if not reader.rows:
        if source.rows_rejected:
            first = source.rejections[0]
            raise StabInputError(
                source.path, f"no dict record could be read ({first.reason})", line=first.line
            )
        raise StabInputError(source.path, "no dict line with a metric found")
    events = dsm.place(reader.mentions, [])
    overflow_rows = dsm.frame_rows(events, "loss scale")
    for row in overflow_rows:
        row["step"] = row.pop("_step")
    rows = reader.rows + overflow_rows
    source.notes.extend(dsm.summary(reader.mentions, events))
    if events:
        source.notes.append(
            "overflow messages placed at the step of the progress bar on their line"
        )
    reader.notes(len(lines))
    if source.dtype is None and events:
        source.dtype, source.dtype_origin = "fp16", "inferred: DeepSpeed fp16 loss-scale messages"
    return tl.finish_records(rows, source, options.metric_overrides)


def _lines_to_read(lines: list[str]):
    """The lines that can hold a record or a message, each with the last bar position above it.

    A log is mostly progress bars: their positions are taken vectorised, and
    only the lines with a dict or a loss-scale message are read one by one.
    """
    import polars as pl

    frame = pl.DataFrame({"text": lines}).with_row_index("_line", offset=1)
    last_bar = pl.col("text").str.extract_all(_BAR.pattern).list.last().str.extract(r"^(\d+)")
    frame = frame.with_columns(
        last_bar.cast(pl.Int64).forward_fill().shift(1).alias("_bar"),
        pl.col("_line").cast(pl.Int64),
    )
    wanted = pl.col("text").str.contains(r"\{|verflow|loss scale")
    return frame.filter(wanted).select("_line", "text", "_bar").rows()


class _Reader:
    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.rows: list[dict] = []
        self.mentions: list[dsm.Mention] = []
        self.bar: int | None = None
        self.steps_from: set[str] = set()
        self.record_lines: set[int] = set()
        self.state: dict = {}
        self.rejected_lines: set[int] = set()

    def line(self, number: int, raw: str, cut: bool) -> None:
        before = len(self.rows) + len(self.mentions)
        for text in tx.logical_lines(raw):
            self.segment(number, text, cut)
        if len(self.rows) + len(self.mentions) > before:
            self.record_lines.add(number)

    def segment(self, number: int, text: str, cut: bool) -> None:
        if "[" in text:
            for bar in _BAR.finditer(text):
                self.bar = int(bar.group(1))
        if "verflow" in text or "loss scale" in text:
            for m in dsm.scan_line(number, text, tl.timestamp(text), self.state):
                self.mentions.append(replace(m, step=self.bar) if self.bar is not None else m)
        match = _DICT.search(text) if "{" in text else None
        if match is None:
            if _OPEN.search(text):
                self.reject(number, cut, "dict record without its closing brace (cut or wrapped)")
            return
        values = {}
        for _, key, value in _PAIR.findall(match.group(1)):
            try:
                values[key] = tx.value(value.strip("'\""))
            except ValueError:
                continue  # a string, True, None: not a metric
        if not values:
            return
        if cut:
            self.reject(number, cut, "")
            return
        tag = _FAIRSEQ_TAG.search(text)
        if tag is not None and tag.group(1) == "train":
            self.reject(number, False, EPOCH_SUMMARY)
            return
        if any(k in values for k in SUMMARY_KEYS):
            self.reject(number, False, SUMMARY_REASON)
            return
        step = next((values.pop(k) for k in _STEP_KEYS if k in values), None)
        if step is not None:
            self.steps_from.add("the step key of each dict")
        elif self.bar is not None:
            step = self.bar
            self.steps_from.add("the tqdm progress bar printed before each dict")
        else:
            step = len(self.rows)
            self.steps_from.add("line order (no step key and no progress bar): 0, 1, 2, ...")
        values["_row"], values["step"] = number, int(step)
        self.rows.append(values)

    def reject(self, number: int, cut: bool, reason: str) -> None:
        if cut:
            self.source.warnings.append(tl.truncation_warning(number, "the last dict record"))
            reason = "last record cut off mid-write"
        self.source.reject(number, reason)
        self.rejected_lines.add(number)

    def notes(self, total: int) -> None:
        records = len(self.record_lines)
        self.source.lines_skipped = total - len(self.record_lines | self.rejected_lines)
        self.source.notes.append(
            f"read as dict lines; steps from {' and '.join(sorted(self.steps_from))}; "
            f"{records} of {total} lines are records, "
            f"{self.source.lines_skipped} other lines skipped as text"
        )
