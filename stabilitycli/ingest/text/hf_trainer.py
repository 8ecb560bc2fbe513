"""Hugging Face Trainer `trainer_state.json` (a file, a checkpoint dir, or an output dir).

`log_history` is a time-ordered list of entries with no type tag; they are
told apart by their keys:

* train entries: `loss`, `grad_norm`, `learning_rate`, `epoch`, `step`, and
  whatever else was logged (`num_tokens`, `mean_token_accuracy`...);
* eval entries: `eval_loss`, `eval_<metric>`, runtimes, and no `loss`;
* the final summary (`train_loss`, `train_runtime`, `total_flos`...): the mean
  loss of the whole run, which must never become a loss point. It is rejected
  with that reason.

The file is read with the stdlib `json`, which accepts the bare `NaN` and
`Infinity` that `json.dumps` writes (a NaN `grad_norm` is the usual sign of
trouble). A file cut off mid-write keeps every log entry that decodes whole.
A file damaged elsewhere (a bad byte, a NUL, nesting past `max_json_depth`) is
read entry by entry: every `log_history` object that still parses is kept,
before and after the damage, and the damaged entries are rejected with the
byte and line where they are. Only damage that runs to the end of the file is
called a cut-off.

An output dir holding only `checkpoint-N/` folders is read from the highest
N, whose state holds the history up to N.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.ingest import bounded
from stabilitycli.ingest.folders import list_folder
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions

NAME = "hf_trainer"
FILE_NAME = "trainer_state.json"
SUMMARY_KEYS = ("train_runtime", "train_loss", "total_flos", "train_samples_per_second")
SUMMARY_REASON = (
    "final summary entry (train_loss is the mean over the whole run, not a step's loss)"
)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return find_state(path) is not None
    name = path.name.lower()
    return name == FILE_NAME or (name.endswith(".json") and b'"log_history"' in head)


def find_state(folder: Path) -> Path | None:
    """trainer_state.json in a folder, or in its highest checkpoint-N folder."""
    direct = folder / FILE_NAME
    if direct.is_file():
        return direct
    best: tuple[int, Path] | None = None
    for child in list_folder(folder):
        match = _CHECKPOINT.match(child.name)
        if (
            match
            and (child / FILE_NAME).is_file()
            and (best is None or int(match.group(1)) > best[0])
        ):
            best = (int(match.group(1)), child / FILE_NAME)
    return best[1] if best else None


def read(path: Path, options: ReadOptions):
    import polars as pl

    from stabilitycli.frame import finalize

    state_path = find_state(path) if path.is_dir() else path
    if state_path is None:
        raise StabInputError(
            str(path), f"no {FILE_NAME} in this folder or its checkpoint-N folders"
        )
    source = SourceInfo(path=str(state_path), format=NAME, run=state_path.parent.name or None)
    if path.is_dir() and state_path.parent != path:
        source.notes.append(f"read {state_path.relative_to(path)} (the latest state in {path})")
    loaded = bounded.read_input(state_path, options.limits)
    source.warnings.extend(loaded.warnings)
    if not loaded.data.strip():
        raise StabInputError(str(state_path), "the file is empty")
    state, history = _load(loaded.data, source, options.limits)
    records: list[dict] = []
    for number, entry in enumerate(history, start=1):
        if isinstance(entry, _Damaged):
            source.reject(number, entry.reason)
            continue
        if not isinstance(entry, dict):
            source.reject(number, f"log entry is a JSON {type(entry).__name__}, not an object")
            continue
        if "loss" not in entry and any(k in entry for k in SUMMARY_KEYS):
            source.reject(number, SUMMARY_REASON)
            continue
        step = entry.get("step")
        if isinstance(step, (bool, list, dict)):
            kind = {bool: "bool", list: "list", dict: "object"}[type(step)]
            source.reject(number, f"log entry whose step is a JSON {kind}, not a number")
            continue
        if not isinstance(step, (int, float)):
            source.reject(number, "log entry without a step")
            continue
        record = {
            k: v
            for k, v in entry.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        damaged = next((k for k in record if not _valid_unicode(k)), None)
        if damaged is not None:  # a `\ud800` escape: no column can be named by it
            source.reject(number, f"a lone surrogate in the key {damaged!a} (not valid Unicode)")
            continue
        bounded.widen_ints(record)
        record["_row"] = number
        records.append(record)
    if not records:
        raise StabInputError(str(state_path), "log_history holds no train or eval entry")
    _notes(state, records, state_path, source)
    raw = pl.DataFrame(records, infer_schema_length=None)
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", overrides=options.metric_overrides)


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class _Damaged:
    """A log entry that could not be read, in its place in the history."""

    reason: str
    line: int | None = None
    # the entry runs to the end of the file: a cut-off if nothing whole follows it
    unclosed: bool = False


def _load(data: bytes, source: SourceInfo, limits: InputLimits) -> tuple[dict, list]:
    """The state and its log history; a damaged document is read entry by entry."""
    fault = _document_fault(data, limits)
    if fault is None:
        decoded = data.decode("utf-8")  # checked by _document_fault
        try:
            state = json.loads(decoded)
        except json.JSONDecodeError as err:
            fault = (len(decoded[: err.pos].encode()), err.msg.removesuffix(" at"))
        except ValueError as err:  # an integer too long to convert, for one
            fault = (-1, str(err))  # no position: the entries say where
        else:
            return state, _history_of(state, source)
    # surrogateescape: each byte that is not UTF-8 stays one char, so offsets map back
    text = data.decode("utf-8", "surrogateescape")
    where, what = fault
    line = data.count(b"\n", 0, max(where, 0)) + 1
    at_end = where >= len(data.rstrip())
    try:
        return {}, _salvage(text, _Fault(where, line, what, at_end), source, limits)
    finally:
        _PLACES.clear()  # its checkpoints hold the whole text


def _history_of(state: object, source: SourceInfo) -> list:
    """The log_history list; under a damaged key name, the one list of objects the state holds."""
    if not isinstance(state, dict):
        raise StabInputError(source.path, "not a Trainer state: no `log_history` list")
    if isinstance(state.get("log_history"), list):
        return state["log_history"]
    lists = [k for k, v in state.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
    if len(lists) != 1:
        raise StabInputError(source.path, "not a Trainer state: no `log_history` list")
    source.warnings.append(
        f"no `log_history` key: read the list under {lists[0]!r}, the only list of log entries "
        "in the file (the key looks damaged)"
    )
    return state[lists[0]]


def _document_fault(data: bytes, limits: InputLimits) -> tuple[int, str] | None:
    """(byte offset, what) of damage no parser should meet: a non-UTF-8 byte, deep nesting."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start, "a byte that is not UTF-8"
    deep = bounded.deeper_than(data, limits.max_json_depth)
    if deep is not None:
        return deep, f"nesting deeper than max_json_depth = {limits.max_json_depth}"
    return None


# a log entry starts at a `{` that opens an array item: after `[` or `,`
# (the Trainer writes each entry on lines of its own: a `{` opening a line starts one too,
# which finds the entries even when the `[` or the commas around them are damaged)
_ENTRY_START = re.compile(r"(?:[\[,]|^)[ \t\r\n]*(\{)", re.MULTILINE)
_HISTORY_KEY = re.compile(r'"log_history"\s*:\s*\[?')
# what moves nesting: a string, or a bracket. JSON text never holds a raw newline inside a
# string, so a string token stops at one: a broken quote spoils its own line, not the file
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|"|[\[\]{}]')
# an entry not closed within this many chars (or 16 times the longest whole one) is damaged:
# without a bound, each broken brace would rescan the rest of the file
_ENTRY_SCAN = 1 << 20
_ARRAY_OF_OBJECTS = re.compile(r"\[\s*\{")
_HISTORY_END = re.compile(r"[ \t\r\n,]*\]")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


@dataclass(frozen=True)
class _Fault:
    """Where the document stopped parsing as a whole."""

    byte: int
    line: int
    what: str
    at_end: bool  # nothing but whitespace after it: where a cut-off ends

    def at_byte(self) -> str:
        return f" at byte {self.byte}" if self.byte >= 0 else ""


def _salvage(text: str, fault: _Fault, source: SourceInfo, limits: InputLimits) -> list:
    """Every log entry that parses, in order, with the damaged ones in their places.

    Entries are found by where they start (a `{` after `[` or `,`, or opening a
    line), each measured by a scan that counts brackets outside strings without
    recursing, then parsed alone; after damage, reading picks up at the next
    entry that parses.
    """
    bracket = _history_start(text)
    if bracket < 0:
        raise StabInputError(
            source.path, f"not valid JSON ({fault.what}{fault.at_byte()})", line=fault.line
        )
    out: list = []
    scan = _ENTRY_SCAN
    pos = bracket + 1  # where the last whole entry ended
    counted = False  # the damage since the last whole entry is already in `out`
    for start in (m.start(1) for m in _ENTRY_START.finditer(text, bracket)):
        if start < pos:
            continue  # inside an entry already read
        entry = _entry(text, start, scan, limits)
        if isinstance(entry, _Damaged):
            out.append(entry)
            counted = True
            continue
        if not counted:
            _gap(text, pos, start, out)
        counted = False
        out.append(entry[0])
        scan = max(scan, 16 * (entry[1] - start))
        pos = entry[1]
        if _HISTORY_END.match(text, pos) is not None:
            break  # the end of log_history
    else:
        if not counted:
            _gap(text, pos, len(text), out)
    _account(fault, out, source)
    return out


def _history_start(text: str) -> int:
    """Where entries are looked for from: the history's `[`, or where it should be, or -1."""
    key = _HISTORY_KEY.search(text)
    if key is not None:
        return key.end() - 1
    # the key itself damaged: the history is still the array of objects the file holds
    first = _ARRAY_OF_OBJECTS.search(text)
    return first.start() if first is not None else -1


def _entry(text: str, start: int, scan: int, limits: InputLimits) -> tuple[object, int] | _Damaged:
    """(the entry, where it ends) for the object at `start`, or why it cannot be read."""
    line = _line_at(text, start)
    end, depth, why = _extent(text, start, start + scan)
    if end is None:
        return _Damaged(f"log entry damaged: {why} (line {line})", line, why == _UNCLOSED)
    reason = _entry_fault(text, start, end, depth, limits)
    if reason is None:
        try:
            return json.loads(text[start:end]), end
        except json.JSONDecodeError as err:
            reason = f"{err.msg.removesuffix(' at')} at byte {_byte_at(text, start + err.pos)}"
        except ValueError as err:
            reason = str(err)
    return _Damaged(f"log entry damaged: {reason} (line {line})", line)


def _gap(text: str, pos: int, end: int, out: list) -> None:
    """Text between two whole entries where no entry start was found: one lost entry.

    A byte that broke an entry's opening brace leaves no start to try; the gap
    it leaves is still counted, so no entry disappears uncounted.
    """
    rest = text[pos:end].strip(" \t\r\n,")
    if rest and not rest.startswith("]"):
        out.append(
            _Damaged(
                f"log entry damaged beyond recognition at byte {_byte_at(text, pos)} "
                f"(line {_line_at(text, pos)})"
            )
        )


def _account(fault: _Fault, out: list, source: SourceInfo) -> None:
    """Say what happened: a cut-off only when the damage runs to the end of the file."""
    whole = [i for i, e in enumerate(out) if not isinstance(e, _Damaged)]
    if not whole:
        raise StabInputError(
            source.path,
            f"not valid JSON and no whole log entry ({fault.what}{fault.at_byte()})",
            line=fault.line,
        )
    tail = out[whole[-1] + 1 :]
    if tail and all(isinstance(e, _Damaged) and e.unclosed for e in tail):
        source.warnings.append(
            f"line {tail[0].line}: the file is cut off inside log entry {whole[-1] + 2} "
            "(the job died while writing it); kept the entries before it"
        )
        del out[whole[-1] + 1 :]
        out.append(_Damaged("log entry cut off mid-write"))
        return
    n_bad = sum(isinstance(e, _Damaged) for e in out)
    place = f"{fault.at_byte()} (line {fault.line})" if fault.byte >= 0 else ""
    if not n_bad and fault.at_end:
        source.warnings.append(
            f"line {fault.line}: the file is cut off after its log history (the job died while "
            "writing it); every log entry was read"
        )
        return
    source.warnings.append(
        f"the file is damaged{place}: {fault.what}; read "
        f"entry by entry: {len(whole)} log entries kept, {n_bad} damaged entries rejected"
    )


_UNCLOSED = "the file ends inside it"


def _extent(text: str, start: int, stop: int) -> tuple[int | None, int, str]:
    """(end, deepest nesting, why not) of the object opening at `start`, scanned to `stop`.

    End is None when the object does not close: the file ends first (a cut-off,
    if nothing whole follows), a string runs past its line, or `stop` is reached.
    """
    depth = deepest = 0
    for token in _TOKEN.finditer(text, start, min(stop, len(text))):
        char = token.group()[0]
        if char == '"':
            if token.group() == '"':  # no closing quote on its line
                if text.find("\n", token.start()) < 0:
                    return None, deepest, _UNCLOSED
                where = _byte_at(text, token.start())
                return None, deepest, f"a string that does not close on its line (byte {where})"
            continue
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
            if depth == 0:
                return token.end(), deepest, ""
    if stop < len(text):
        return None, deepest, "its brackets do not close"
    return None, deepest, _UNCLOSED


def _entry_fault(text: str, start: int, end: int, depth: int, limits: InputLimits) -> str | None:
    if depth > limits.max_json_depth:
        return f"nested {depth} deep, over max_json_depth = {limits.max_json_depth}"
    if end - start > limits.max_record_bytes:
        return f"{end - start:,} bytes, over max_record_bytes = {limits.max_record_bytes:,}"
    bad = _NOT_UTF8.search(text, start, end)
    if bad is not None:
        return f"a byte that is not UTF-8 at byte {_byte_at(text, bad.start())}"
    return None


def _byte_at(text: str, pos: int) -> int:
    """The byte offset in the file of a char offset in its decoded text."""
    return _places(text).at(pos)[1]


def _line_at(text: str, pos: int) -> int:
    return _places(text).at(pos)[0]


class _Places:
    """Line and byte of char offsets in one text, counted from the nearest checkpoint.

    A salvage asks for the place of every entry it tries, in file order; counting
    from the start each time would make a damaged file of many entries quadratic.
    """

    EVERY = 1 << 20  # chars between checkpoints

    def __init__(self, text: str) -> None:
        self.text = text
        self.marks: list[tuple[int, int, int]] = [(0, 1, 0)]  # (char, line, byte)
        self.last = self.marks[0]

    def at(self, pos: int) -> tuple[int, int]:
        import bisect

        index = bisect.bisect_right(self.marks, (pos, 1 << 62, 0)) - 1
        char, line, byte = self.marks[index]
        if char <= self.last[0] <= pos:
            char, line, byte = self.last  # the usual case: a little further than the last ask
        while char < pos:
            upto = min(pos, char + self.EVERY)
            piece = self.text[char:upto]
            line += piece.count("\n")
            byte += len(piece.encode("utf-8", "surrogateescape"))
            char = upto
            if char % self.EVERY == 0 and char > self.marks[-1][0]:
                self.marks.append((char, line, byte))
        self.last = (char, line, byte)
        return line, byte


_PLACES: list[_Places] = []  # the text being salvaged (one at a time)


def _places(text: str) -> _Places:
    if not _PLACES or _PLACES[0].text is not text:
        _PLACES[:] = [_Places(text)]
    return _PLACES[0]


def _notes(state: dict, records: list[dict], state_path: Path, source: SourceInfo) -> None:
    every = state.get("logging_steps")
    every_text = f"logging_steps={every}" if every else "logging_steps (not in the file)"
    if any("loss" in r for r in records):
        source.notes.append(
            f"HF `loss` is the mean over the last {every_text} optimizer steps, and NaN/Inf losses "
            "are left out of that mean (logging_nan_inf_filter, on by default): a non-finite "
            "grad_norm is then the visible symptom"
        )
    if state.get("global_step") is not None:
        source.notes.append(
            f"global_step {state['global_step']} (max_steps {state.get('max_steps')})"
        )
    scaler = state_path.parent / "scaler.pt"
    if scaler.is_file() and source.dtype is None:
        source.dtype = "fp16"
        source.dtype_origin = (
            "scaler.pt beside trainer_state.json (the Trainer saves a GradScaler only for fp16)"
        )
