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

An output dir holding only `checkpoint-N/` folders is read from the highest
N, whose state holds the history up to N.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from stabilitycli.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

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
    for child in folder.iterdir():
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
    text = state_path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise StabInputError(str(state_path), "the file is empty")
    state, history = _load(text, source)
    records: list[dict] = []
    for number, entry in enumerate(history, start=1):
        if not isinstance(entry, dict):
            source.reject(number, f"log entry is a JSON {type(entry).__name__}, not an object")
            continue
        if "loss" not in entry and any(k in entry for k in SUMMARY_KEYS):
            source.reject(number, SUMMARY_REASON)
            continue
        if not isinstance(entry.get("step"), (int, float)):
            source.reject(number, "log entry without a step")
            continue
        record = {
            k: v
            for k, v in entry.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        record["_row"] = number
        records.append(record)
    if not records:
        raise StabInputError(str(state_path), "log_history holds no train or eval entry")
    _notes(state, records, state_path, source)
    raw = pl.DataFrame(records, infer_schema_length=None)
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", overrides=options.metric_overrides)


def _load(text: str, source: SourceInfo) -> tuple[dict, list]:
    try:
        state = json.loads(text)
    except json.JSONDecodeError as err:
        return {}, _salvage(text, err, source)
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise StabInputError(source.path, "not a Trainer state: no `log_history` list")
    return state, state["log_history"]


def _salvage(text: str, err: json.JSONDecodeError, source: SourceInfo) -> list:
    """The whole log entries of a file cut off mid-write."""
    start = text.find('"log_history"')
    bracket = text.find("[", start) if start >= 0 else -1
    if bracket < 0:
        raise StabInputError(source.path, f"not valid JSON ({err.msg})", line=err.lineno)
    decoder = json.JSONDecoder()
    entries: list = []
    pos = bracket + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            line = text.count("\n", 0, pos) + 1
            source.warnings.append(
                f"line {line}: the file is cut off inside log entry {len(entries) + 1} "
                "(the job died while writing it); kept the entries before it"
            )
            source.reject(len(entries) + 1, "log entry cut off mid-write")
            break
        entries.append(entry)
    if not entries:
        raise StabInputError(
            source.path, f"not valid JSON and no whole log entry ({err.msg})", line=err.lineno
        )
    return entries


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
