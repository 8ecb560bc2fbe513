"""Trainer stdout made of `key: value` / `key=value` / `key value` records, one per line.

nanoGPT, modded-nanogpt, torchtitan, MLX-LM, litgpt, Keras `fit`, NeMo's
progress bar, fairseq's simple format and any other `step ... loss ...` line
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

from stabilitycli.errors import StabInputError, StabUsageError
from stabilitycli.ingest import _kvfamilies as kfam
from stabilitycli.ingest import _kvfields as kf
from stabilitycli.ingest import _textline as tx
from stabilitycli.ingest import _textlog as tl
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

NAME = "kvlog"
# a log may open with a printed training script or an argument dump before its first record
SNIFF_CHARS = 256 << 10
SNIFF_RECORDS = 2
# a step and `key: something` after it: a record whose numbers could not be read
_LOOKS_LIKE_RECORD = re.compile(r"[A-Za-z_]\w*\s*[:=]\s*\S")


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_text_log(path, head):
        return False
    text = tl.peek(path, head)[:SNIFF_CHARS]
    scan = _Scan()
    for number, line in enumerate(text.split("\n"), start=1):
        scan.line(number, line.rstrip("\r"))
        # lines with a loss but no step anywhere: a bare `loss: 2.31` log, read in line order
        if len(scan.records) >= SNIFF_RECORDS or len(scan.stepless) > SNIFF_RECORDS:
            return True
    return False


class _Scan:
    """Lines in, records out: the state is the Keras epoch a bar line belongs to."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, dict[str, float]]] = []  # (line, step, fields)
        self.stepless: list[tuple[int, dict[str, float]]] = []
        self.rejected: list[tuple[int, str]] = []
        self.skipped_fields: dict[str, int] = {}
        self.record_text: list[str] = []  # the first record lines, to name the trainer
        self.epoch: int | None = None
        self.lines_with_record = 0

    def line(self, number: int, raw: str) -> None:
        before = len(self.records) + len(self.stepless)
        for segment in tx.logical_lines(raw):
            self.segment(number, segment)
        if len(self.records) + len(self.stepless) > before:
            self.lines_with_record += 1

    def segment(self, number: int, text: str) -> None:
        found = kf.fields(text)
        step = found.step()
        epoch = found.axes.get(kf.EPOCH_KEY)
        if step is None and epoch is not None:
            if not found.metrics:  # Keras `Epoch 3/10`: the bars below belong to it
                self.epoch = int(epoch[0])
                return
            step = int(epoch[0])
        if found.metrics:
            step = step if step is not None else self.epoch
            if step is None:
                if any("loss" in k.lower() for k in found.metrics):
                    self.stepless.append((number, found.metrics))
                return
            self.records.append((number, step, found.metrics))
            for key in found.skipped:  # on records only: a table's `N/A` is no field of a run
                self.skipped_fields[key] = self.skipped_fields.get(key, 0) + 1
            if len(self.record_text) < 50:
                self.record_text.append(text)
        elif step is not None and _LOOKS_LIKE_RECORD.search(text):
            self.rejected.append((number, "a record with a step but no readable number"))


def read(path: Path, options: ReadOptions):
    lines, cut = tl.read_lines(path)
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    if options.pattern:
        return _read_pattern(lines, cut, source, options)
    scan = _Scan()
    for number, text in enumerate(lines, start=1):
        scan.line(number, text)
    records = scan.records
    step_from = "the step written on each line"
    if not records and scan.stepless:
        records = [(n, i, f) for i, (n, f) in enumerate(scan.stepless)]
        step_from = "line order (no line carries a step): 0, 1, 2, ..."
    if not records:
        if scan.rejected:
            line, reason = scan.rejected[0]
            raise StabInputError(source.path, f"no record could be read ({reason})", line=line)
        raise StabInputError(source.path, "no `step ... loss ...` record found")
    family = kfam.family_of(scan.record_text)
    if family.name == "Keras fit":
        step_from = "the `Epoch N/M` line before each record"
    for line, reason in scan.rejected:
        source.reject(line, reason)
    rows = _rows(records, family, cut, len(lines), source)
    _notes(source, family, step_from, scan, len(lines))
    return tl.finish_records(rows, source, options.metric_overrides)


def _rows(records: list, family: kfam.Family, cut: bool, last_line: int, source: SourceInfo):
    if cut and records[-1][0] == last_line:
        # the trainer ends every record with a newline: the last number may be a prefix
        source.warnings.append(tl.truncation_warning(last_line, "the last record"))
        source.reject(last_line, "last record cut off mid-write")
        records = records[:-1]  # a bar redrawn on that line keeps its earlier records
    # progress bars redrawn on one physical line hold several records: number them apart,
    # so that a row number orders the records as they were printed
    lines = [r[0] for r in records]
    by_record = len(set(lines)) != len(lines)
    if by_record:
        source.notes.append("rows are numbered by record (a progress bar holds several a line)")
    rename = family.rename
    rows = []
    for index, (line, step, values) in enumerate(records, start=1):
        row = {rename.get(k, k): v for k, v in values.items()}
        row["_row"], row["step"] = (index if by_record else line), step
        rows.append(row)
    return rows


def _notes(source: SourceInfo, family: kfam.Family, step_from: str, scan: _Scan, total: int):
    text_lines = total - scan.lines_with_record - len(scan.rejected)
    source.lines_skipped = text_lines
    source.notes.append(
        f"read as {family.name} stdout; steps from {step_from}; {scan.lines_with_record} of "
        f"{total} lines are records, {text_lines} other lines (banners, tables, progress bars, "
        "blank lines) skipped as text"
    )
    if family.note:
        source.notes.append(family.note)
    for key, count in sorted(scan.skipped_fields.items(), key=lambda kv: -kv[1])[:5]:
        source.notes.append(
            f"field {key!r} skipped on {count} line(s): its value is not a number stab reads"
        )


def _read_pattern(lines: list[str], cut: bool, source: SourceInfo, options: ReadOptions):
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
            records.append((number, int(step_text) if step_text else order, values))
            order += 1
    if not records:
        raise StabInputError(source.path, "no line matches --pattern")
    rows = _rows(records, kfam.Family("--pattern", regex), cut, len(lines), source)
    how = "its `step` group" if "step" in regex.groupindex else "line order (no `step` group)"
    source.lines_skipped = len(lines) - len({r[0] for r in records} | rejected)
    source.notes.append(
        f"read with --pattern; steps from {how}; {len(records)} of {len(lines)} lines matched"
    )
    return tl.finish_records(rows, source, options.metric_overrides)
