"""Megatron-LM stdout (also Megatron-DeepSpeed, GPT-NeoX and other Megatron forks).

The training line, printed every `--log-interval` iterations:

    iteration     1200/  500000 | consumed samples: 614400 |
    elapsed time per iteration (ms): 1234.5 | learning rate: 1.5E-04 | global batch size: 512 |
    lm loss: 2.3456E+00 | loss scale: 1.0 | grad norm: 0.876 | number of skipped iterations: 0 |
    number of nan iterations: 0 |

(one line in a real log). How real logs differ from that, and what is done:

* launcher prefixes (`[default7]:`, `[rank3]:`, `0: `, timestamps): the record
  is found with a search, not at the line start;
* hard-wrapped records (a captured terminal, a copy into Markdown): a record
  that does not end with `|` is joined with up to three following lines until
  it does; one that never does is rejected as cut off, never half-read;
* `nan`/`inf`/`NAN`/`INF` are numbers (Python `float` reads all of them);
* a missing `lm loss`: Megatron prints a loss only when its interval mean is
  >= 0 (older code: > 0), so a complete record without it - while other
  records have it - means the mean was NaN/Inf: the loss is recorded as NaN
  and a note names the iteration. When no record has it at all (a run NaN
  from its first logged iteration), the same holds once some record shows
  the NaN elsewhere (a non-finite grad norm, a NaN-iteration count); without
  such a sign the log is left without a loss rather than guessed NaN.
  Exception: when every iteration of the interval was skipped (`number of
  skipped iterations` equals the interval), there is no mean at all, and the
  loss is left empty (also noted);
* validation lines `validation loss at iteration N | lm loss value: X |` give
  `eval_loss` (the test-set variant keeps a `test ` prefix);
* `elapsed time per iteration (s)` (BLOOM's fork) is converted to ms;
* DeepSpeed's loss-scale messages in the same log (Megatron-DeepSpeed prints
  `[deepscale] OVERFLOW! Rank 0 Skipping step...`) become overflow events
  (see `_dsmessages`), placed at the iteration line that follows them;
* the dtype, from what fixes it, strongest first: the argument dump
  (`fp16 .... True`; `fp16` and `bf16` both False is fp32), the banner
  `using torch.bfloat16 for parameters`, DeepSpeed's config dump in the same
  log (`bfloat16_enabled .... True`), a `--fp16` / `--bf16` in an echoed launch
  command; failing those, a `loss scale` other than 1 or DeepSpeed overflow
  messages mean fp16. A constant `loss scale: 1.0` fixes nothing: Megatron
  prints it for bf16 and fp32 runs too, so the dtype stays unknown;
* the argument dump also gives `seq_length` (tokens = consumed samples x
  seq_length when the log has no `consumed tokens`) and `log_interval`;
* everything else (`time (ms)` timer tables, `[Rank N] memory (MB)` lines,
  banners, warnings) is not a row.

The missing loss, tokens and dtype are worked out in `_megatron_derive`.
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import _dsmessages as dsm
from stabilitycli.ingest.text import _megatron_derive as derive
from stabilitycli.ingest.text import textlog as tl

NAME = "megatron"

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_VALIDATION = re.compile(r"validation loss at (?:iteration\s+(\d+)|the end of training)([^|]*)\|")
_ARG = re.compile(
    r"(?:^|[\s:])(fp16|bf16|seq_length|log_interval|fp16_enabled|bfloat16_enabled|bf16_enabled)"
    r"\s+\.{3,}\s+(\S+)\s*$"
)
# `--bf16` in an echoed launch command; not `--bf16-foo` nor `--fp16-lm-cross-entropy`
_DTYPE_FLAG = re.compile(r"(?<![\w-])--(fp16|bf16)(?![\w-])")
_USING_DTYPE = re.compile(r"using torch\.(float16|bfloat16|float32) for parameters")
# a line that begins another record, so a wrapped record cannot swallow it
_RECORD_START = re.compile(
    r"\biteration\s+\d+\s*/|validation loss at|^\s*\[\d{4}-\d{2}-\d{2}|\[Rank \d+\]"
)
# fields only an iteration or validation record has: a line holding them is a record
_RECORD_FIELD = re.compile(
    r"(?:\blm loss(?: value)?|\blearning rate|\bconsumed samples|\bglobal batch size)\s*:"
)
MAX_CONTINUATION_LINES = 3


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_text_log(path, head):
        return False
    return ITERATION.search(tl.peek(path, head)) is not None


def read(path: Path, options: ReadOptions):
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    lines, cut, too_long = tl.read_log(path, source, options.limits)
    return parse_lines(lines, cut, source, options, rejected_lines=too_long)


def parse_lines(
    lines: list[str],
    cut: bool,
    source: SourceInfo,
    options: ReadOptions,
    rejected_lines: int = 0,
):
    """`rejected_lines`: lines the caller already rejected (too long), left empty here."""
    import polars as pl

    from stabilitycli.frame import finalize

    scan = _Scan(lines, cut, source, rejected_lines)
    index = 0
    while index < len(lines):
        index = scan.line(index)
    records = scan.records
    if not records and not scan.validation:
        if source.rows_rejected:
            first = source.rejections[0]
            raise StabInputError(
                source.path, f"no iteration record could be read ({first.reason})", line=first.line
            )
        raise StabInputError(source.path, "no Megatron `iteration N/ T |` line found")
    if source.rows_rejected:
        first = source.rejections[0]
        source.warnings.append(
            f"{source.rows_rejected} record(s) could not be read; first at line {first.line}: "
            f"{first.reason}"
        )
    derive.stated_dtype(scan.args, scan.arg_rows, scan.stated, source)
    derive.missing_loss(records, scan.args, source)
    derive.tokens_and_time(records, scan.args, source)
    anchors = [
        dsm.Anchor(r["_row"], r["_step"], tl.timestamp(r.pop("_time")) if scan.mentions else None)
        for r in records
    ]
    events = dsm.place(scan.mentions, anchors)
    event_rows = dsm.frame_rows(events, "loss scale")
    source.notes.extend(dsm.summary(scan.mentions, events))
    source.line_order_steps.update(dsm.order_numbered(events))
    derive.dtype_from_scale(records, events, source)
    derive.reading_notes(scan, len(lines), source)
    for r in records:
        r.pop("_time", None)
    rows = records + scan.validation + event_rows
    raw = pl.DataFrame(rows, infer_schema_length=None).rename({"_step": "step"})
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", overrides=options.metric_overrides)


class _Scan:
    """One pass over a Megatron log: its records, and what the text around them says."""

    def __init__(self, lines: list[str], cut: bool, source: SourceInfo, rejected_lines: int):
        self.lines, self.cut, self.source = lines, cut, source
        self.args: dict[str, str] = {}
        self.arg_rows: dict[str, int] = {}
        self.stated: dict[str, tuple[str, str]] = {}  # "banner" / "command" -> (dtype, origin)
        self.records: list[dict] = []
        self.validation: list[dict] = []
        self.mentions: list[dsm.Mention] = []
        self.state: dict = {}  # what `dsm.scan_line` carries from one line to the next
        self.memory_lines = 0
        # lines that are (part of) a record, read or rejected; the rest is text
        self.record_lines = rejected_lines
        self.layouts = _Layouts()

    def line(self, index: int) -> int:
        """Read the line at `index` (with the lines a wrapped record takes); the next index."""
        line = self.lines[index]
        row = index + 1
        index += 1
        if "iteration" in line and (m := ITERATION.search(line)) is not None:
            return self._iteration(line, row, index, m)
        if "validation loss at" in line and (m := _VALIDATION.search(line)) is not None:
            self.record_lines += 1
            self._validation(line, row, m)
        elif "|" in line and line.count("|") >= 2 and _RECORD_FIELD.search(line):
            # a record whose `iteration N/ T |` was damaged (a flipped byte, a cut in the
            # middle): said, not dropped as text (and not read as a loss-scale message)
            self.record_lines += 1
            self.source.reject(row, "an iteration record without a readable `iteration N/ T |`")
        elif "verflow" in line or "loss scale" in line:
            found = dsm.scan_line(row, line, tl.timestamp(line), self.state)
            self.record_lines += bool(found)
            self.mentions.extend(found)
        elif "...." in line and (m := _ARG.search(line)) is not None:
            self.args.setdefault(m.group(1), m.group(2))
            self.arg_rows.setdefault(m.group(1), row)
        else:
            self._text(line, row)
        return index

    def _iteration(self, line: str, row: int, index: int, m: re.Match[str]) -> int:
        text, index = self._unwrapped(line[m.end() :], index)
        # a record on the unfinished last line is cut even when it stops after a `|`:
        # Megatron ends every record with a newline, and the fields after the cut are lost
        on_cut_line = self.cut and index == len(self.lines)
        cut = on_cut_line or not text.rstrip().endswith("|")
        iteration = tl.whole(m.group(1))
        if iteration is None:
            self.source.reject(row, tl.STEP_RANGE_REASON)
            return index
        if cut:
            # the fields before the last `|` are whole: kept, so that a field missing among
            # them still shows (a missing `lm loss` is Megatron's NaN); a record that never
            # closed keeps only its own line, the lines joined to it may be another's text
            record = _cut_record(text if on_cut_line else line[m.end() :], row, on_cut_line, self)
        else:
            record = self.layouts.parse(text, row, self.source)
        if record is not None:
            record["_row"], record["_step"] = row, iteration
            record["_time"] = line  # turned into a timestamp only if DeepSpeed messages need it
            self.records.append(record)
        return index

    def _unwrapped(self, text: str, index: int) -> tuple[str, int]:
        """A hard-wrapped record joined with the lines after it until it ends with `|` (at
        most MAX_CONTINUATION_LINES, never a line that starts another record)."""
        joined = 0
        while (
            not text.rstrip().endswith("|")
            and joined < MAX_CONTINUATION_LINES
            and index < len(self.lines)
        ):
            follow = self.lines[index]
            if _RECORD_START.search(follow):
                break
            text += " " + follow
            index += 1
            joined += 1
        self.record_lines += 1 + joined
        return text, index

    def _validation(self, line: str, row: int, m: re.Match[str]) -> None:
        fields = _fields(line[m.end() :], row, self.source, self.layouts.skipped)
        if fields is None:
            return
        records = self.records
        step = tl.whole(m.group(1)) if m.group(1) else (records[-1]["_step"] if records else 0)
        if not m.group(1) and step is not None:
            self.source.notes.append(
                f"line {row}: the validation at the end of training prints no iteration; "
                + (f"placed at the last iteration read ({step})" if records else "placed at 0")
            )
        if step is None:
            self.source.reject(row, tl.STEP_RANGE_REASON)
            return
        prefix = "test " if "test" in m.group(2) else ""
        rec = {f"{prefix}{k}": v for k, v in fields.items()}
        rec["_row"], rec["_step"] = row, step
        self.validation.append(rec)

    def _text(self, line: str, row: int) -> None:
        """A line of no record: memory lines are counted, a banner or a launch command may
        state the dtype."""
        if "memory (MB)" in line:
            self.memory_lines += 1
        elif "using torch." in line and (m := _USING_DTYPE.search(line)):
            dtype = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[m.group(1)]
            origin = f"Megatron banner: using torch.{m.group(1)} for parameters (line {row})"
            self.stated.setdefault("banner", (dtype, origin))
        elif (
            ("--fp16" in line or "--bf16" in line)
            and (flags := set(_DTYPE_FLAG.findall(line)))
            and len(flags) == 1  # a command naming both says nothing
        ):
            (flag,) = flags
            self.stated.setdefault("command", (flag, f"launch command: --{flag} (line {row})"))


def _cut_record(text: str, row: int, at_end: bool, scan: _Scan) -> dict | None:
    """The whole fields of a cut record (`derive.CUT` holds the last one), or None (rejected)."""
    whole = text[: text.rfind("|") + 1]
    out = _fields(whole, row, scan.source, scan.layouts.skipped) if whole.strip() else None
    if out is None:
        if not whole.strip():
            why = (
                "last iteration record cut off mid-write"
                if at_end
                else "iteration record without its closing `|` (cut or wrapped)"
            )
            if at_end:
                scan.source.warnings.append(tl.truncation_warning(row, "the last iteration record"))
            scan.source.reject(row, why)
        return None
    last = _field_keys(whole)[-1]
    out[derive.CUT] = last
    where = tl.NO_FINAL_NEWLINE if at_end else "no closing `|` on its line"
    scan.source.warnings.append(tl.cut_kept_warning(row, "iteration record", last, where))
    return out


_KEYS: dict[str, str] = {}  # raw key text -> normalised key (keys repeat on every line)


class _Layouts:
    """Fast path: records of one run repeat the same keys in the same order.

    The first record of a layout is read field by field (`_fields`); its keys
    then make one regex that reads every later record of that layout in a
    single match. A record that does not fit (another layout, a bad value)
    goes the slow way. A field whose value is not a number (GPT-NeoX's
    `approx flops per GPU: 5.7TFLOPS`, ms-swift's `elapsed time: 1d 6h 54m`)
    is skipped, not the record: `skipped` counts them per key for a note.
    """

    def __init__(self) -> None:
        self.regex: re.Pattern[str] | None = None
        self.keys: tuple[str, ...] = ()
        self.skipped_keys: tuple[str, ...] = ()
        self.skipped: dict[str, int] = {}

    def parse(self, text: str, row: int, source: SourceInfo) -> dict | None:
        if self.regex is not None and (m := self.regex.fullmatch(text)) is not None:
            try:
                values = dict(zip(self.keys, map(float, m.groups()), strict=True))
            except ValueError:
                pass  # a value that is not a number: the slow path skips that field
            else:
                for key in self.skipped_keys:
                    self.skipped[key] = self.skipped.get(key, 0) + 1
                if "elapsed time per iteration (s)" in values:
                    values["elapsed time per iteration (ms)"] = (
                        values.pop("elapsed time per iteration (s)") * 1000.0
                    )
                return values
        out = _fields(text, row, source, self.skipped)
        if out is not None:
            keys = _field_keys(text)
            pattern = "".join(
                r"\s*"
                + r"\s+".join(map(re.escape, k.split()))
                + (r"\s*:([^|]*)\|" if k in out or k == _SECONDS else r"\s*:(?:[^|]*)\|")
                for k in keys
            )
            self.regex = re.compile(pattern + r"\s*")
            self.keys = tuple(k for k in keys if k in out or k == _SECONDS)
            self.skipped_keys = tuple(k for k in keys if k not in self.keys)
        return out


_SECONDS = "elapsed time per iteration (s)"


def _field_keys(text: str) -> list[str]:
    return [_KEYS[key] for key, sep, _ in (p.rpartition(":") for p in text.split("|")) if sep]


def _fields(text: str, row: int, source: SourceInfo, skipped: dict[str, int]) -> dict | None:
    """`key: value |` pairs as floats; a value that is not a number skips its field only.

    None (and a rejection) when a part has no `key:` at all (the record is
    not one Megatron wrote whole) or when the loss itself is not a number.
    """
    out: dict = {}
    for part in text.split("|"):
        key, sep, value = part.rpartition(":")
        if not sep:
            if part.strip():
                source.reject(row, f"unreadable field {part.strip()[:40]!r}")
                return None
            continue
        name = _KEYS.get(key)
        if name is None:
            name = _KEYS[key] = " ".join(key.split())
        if not name or name == "step" or name.startswith("_"):
            # no Megatron field is named so; the row's own step and bookkeeping are
            source.reject(row, f"unreadable field {part.strip()[:40]!r}")
            return None
        try:
            out[name] = float(value)  # float() takes the padding, `nan`, `INF`, `1.0E+00`
        except ValueError:
            if (aliases.canonical_for(name) or ("", 0))[0] == "loss":
                # a garbled loss is not an omitted one: skipping it would read it as NaN below
                source.reject(row, f"field {name!r}: {value.strip()[:30]!r} is not a number")
                return None
            skipped[name] = skipped.get(name, 0) + 1
    if not out:
        source.reject(row, "no field of the record is a number")
        return None
    if _SECONDS in out:
        out["elapsed time per iteration (ms)"] = out.pop(_SECONDS) * 1000.0
    return out
