"""Every input format, and the one entry point that picks the right reader.

Each reader module provides what `ingest.base.Reader` describes: `NAME`,
`sniff(path, head) -> bool` and `read(path, options) -> RunData` (plus
`sniff_uri(text)` for a `UriReader`). Readers are imported lazily so that
`stab --help` does not pay for polars, and detection imports only the readers
that a path could be for (each reader's `Takes`, gathered in `ingest.formats`).

The readers live in family packages (`text/`, `jsonl/`, `tabular/`, `mlflow/`,
`tensorboard/`, `wandb/`); what they all use (bounded reading, limits, options,
folders, per-rank folders, remote sources) is here at the `ingest` level.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import cast

from stabilitycli.core.errors import (
    NOT_ERRORS,
    StabInputError,
    StabUsageError,
    from_the_input,
    input_error_from,
)
from stabilitycli.ingest.base import Takes, UriReader
from stabilitycli.ingest.dtype import dtype_from
from stabilitycli.ingest.fallback import TEXT_FAMILIES, read_text_log
from stabilitycli.ingest.folders import list_folder
from stabilitycli.ingest.formats import ENTRIES, READERS, SUPPORTED, reader
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions

# what callers take from `stabilitycli.ingest`; the rest is its own or its modules'
__all__ = [
    "FORMATS_HINT",
    "NOT_LOGS",
    "READERS",
    "STDIN",
    "STDIN_NAME",
    "SUPPORTED",
    "choose_reader",
    "detect_format",
    "read",
    "read_stdin_spool",
    "reader",
    "stdin_spool_name",
]


def detect_format(path: Path) -> str:
    head = b""
    if path.is_file():
        with open(path, "rb") as handle:
            head = handle.read(8192)
    is_folder, name = path.is_dir(), path.name.lower()
    for entry in ENTRIES:
        if not _may_take(entry.takes, path, is_folder, head, name):
            continue
        if reader(entry.name).sniff(path, head):
            return entry.name
    raise StabInputError(str(path), f"not a log stab reads ({FORMATS_HINT})")


def _may_take(takes: Takes, path: Path, is_folder: bool, head: bytes, name: str) -> bool:
    if takes.may_take(is_folder, head, name):
        return True
    if is_folder or not takes.text_log:
        return False
    # asked only when a text reader's turn comes: the sniffs before it never ask
    from stabilitycli.ingest.text.textlog import is_text_log

    return is_text_log(path, head)


FORMATS_HINT = "`stab analyze --help` lists the formats"
# files that sit beside a log and are never one (a README quoting a log, a config, a script)
NOT_LOGS: tuple[str, ...] = (
    *(".md", ".rst", ".html", ".htm", ".py", ".ipynb", ".yaml", ".yml", ".toml", ".cfg"),
    *(".ini", ".sh", ".lock", ".pt", ".ckpt", ".bin", ".safetensors"),
)


def _only_log(folder: Path, limits: InputLimits | None = None) -> Path:
    """The one log a folder holds (`runs/latest/metrics.jsonl`): a folder of one log is that log."""
    logs: list[Path] = []
    seen = 0
    for entry in list_folder(folder, limits):
        if entry.name.startswith(".") or not entry.is_file():
            continue
        seen += 1
        if entry.name.lower().endswith(NOT_LOGS):
            continue
        try:
            detect_format(entry)
        except NOT_ERRORS:
            raise
        except BaseException:
            # a file no sniff accepts (or that a sniff fails on) is not a log; the
            # error below counts it among the files seen
            continue
        logs.append(entry)
    if len(logs) == 1:
        return logs[0]
    if not logs:
        folders = [e for e in list_folder(folder, limits) if e.is_dir() and e.name[:1] != "."]
        if folders:
            # a folder of run folders (a sweep): each is its own run, `-r` reads them all
            raise StabInputError(
                str(folder),
                f"no log in this folder itself, but {len(folders)} sub-folder(s): to analyse "
                f"every run below it, `stab analyze -r {folder}`",
            )
        raise StabInputError(
            str(folder), f"no log stab reads in this folder ({seen} file(s); {FORMATS_HINT})"
        )
    shown = ", ".join(p.name for p in logs[:5]) + (" ..." if len(logs) > 5 else "")
    raise StabInputError(
        str(folder),
        f"{len(logs)} logs in this folder ({shown}): analyse one with `stab analyze "
        f"{logs[0]}`, or each with `stab analyze -r {folder}`",
    )


# raised on as they are by the read boundary: already the user's message, or not an error
_NOT_WRAPPED: tuple[type[BaseException], ...] = (StabInputError, StabUsageError, *NOT_ERRORS)


def read(target: str | Path, options: ReadOptions | None = None):
    """Read one run from a path or URI into the canonical `RunData`.

    The one error boundary of reading: whatever fails while a path is sniffed or
    read (a decoder, a native panic, the file system) comes out as a
    `StabInputError` naming the path. A usage error (a bad `--rank-pattern`), Ctrl-C and
    exits pass through as they are.
    """
    options = options or ReadOptions()
    text = str(target)
    if text == STDIN:
        return _read_stdin(options)
    # only a URI is an object URI (`remote.is_object_uri` asks for its `://`): a path's read
    # does not import the module of object stores (#40)
    if "://" in text:
        from stabilitycli.ingest import remote

        if remote.is_object_uri(text):
            local = remote.file_uri_path(text)
            if local is None:  # s3:// or gs://: read from a private local copy
                return remote.read_staged(text, options, read)
            text = str(local)
    try:
        return _read(text, options)
    except _NOT_WRAPPED:
        raise
    except BaseException as err:
        if not from_the_input(err):
            raise  # a bug in stab: the command reports it as an internal error
        # reached only when sniffing or choosing a reader failed: a reader's own
        # failure is already named by its format in _read
        raise input_error_from(text, err, "input") from err


def choose_reader(text: str, options: ReadOptions) -> tuple[str, str, ReadOptions]:
    """(reader name, target, options) as `read` picks them for a local path or URI: a run
    named with --tracking-uri, --format-in, --pattern, the sniffs, a folder of one log.
    `stab watch` follows what this picks, so that it reads what `stab analyze` would."""
    path = Path(text)
    is_uri = "://" in text
    if options.tracking_uri and not is_uri and not path.exists():
        # `stab analyze RUN --tracking-uri URI`: the target names a run of that store
        uri = options.tracking_uri
        options = replace(options, run=options.run or text)
        text = uri
        path, is_uri = Path(text), "://" in text
    if not is_uri and not path.exists():
        raise StabInputError(text, "no such file or directory")
    if options.format_in:
        if options.format_in not in READERS:
            raise StabInputError(
                text,
                f"unknown --format-in {options.format_in!r}; choose one of {', '.join(READERS)}",
            )
        name = options.format_in
    elif options.pattern and not is_uri and path.is_file():
        name = "kvlog"  # --pattern reads any text log line by line
    elif is_uri:
        name = _detect_uri(text)
    else:
        try:
            name = detect_format(path)
        except StabInputError:
            if not path.is_dir():
                raise
            path = _only_log(path, options.limits)
            text, name = str(path), detect_format(path)
    return name, text, options


def _read(text: str, options: ReadOptions):
    name, text, options = choose_reader(text, options)
    path, is_uri = Path(text), "://" in text
    detected = not (options.format_in or options.pattern or is_uri)
    try:
        module = reader(name)
        if detected and name in TEXT_FAMILIES and _is_text_log(path):
            # another text family may read what the one that claimed the log cannot
            run = read_text_log(path, name, options)
        elif is_uri:
            # a URI goes as given: only a UriReader's sniff_uri (or --format-in) picks its reader
            run = cast(UriReader, module).read(text, options)
        else:
            run = module.read(path, options)
    except _NOT_WRAPPED:
        raise
    except BaseException as err:
        if not from_the_input(err):
            raise  # a bug in the reader: the command reports it as an internal error
        raise input_error_from(text, err, name) from err
    _apply_dtype(run, path, options)
    if not is_uri and path.is_file() and _is_paste(path):
        _reword_cut(run.source, PASTE_CUT)
    return run


def _is_text_log(path: Path) -> bool:
    """A text file of no structured format (a `.log`, `.txt`, stdin): what any text family may
    read, so that the others may try it when the one that claimed it cannot (`fallback`)."""
    from stabilitycli.ingest.text.textlog import is_text_log

    with open(path, "rb") as handle:
        return is_text_log(path, handle.read(8192))


# A cut last line is read as a job that died while writing it, unless the input says otherwise:
# standard input, or a paste whose last line carries a Markdown quote marker (`> `, as a log
# copied into a GitHub issue has), was cut where the text it came from ends.
STDIN_CUT = "standard input ends there"
PASTE_CUT = "a paste (its lines carry Markdown quote markers) cut where the copied text ends"
_TAIL_BYTES = 4096


def _is_paste(path: Path) -> bool:
    """The file's last line is quoted as Markdown quotes a paste (`> ...`)."""
    with path.open("rb") as handle:
        handle.seek(max(path.stat().st_size - _TAIL_BYTES, 0))
        tail = handle.read().rstrip(b"\r\n")
    last = tail.rsplit(b"\n", 1)[-1].lstrip()
    return last.startswith(b">")


def _reword_cut(source, why: str) -> None:
    """Say why the last line is cut from what the input is, not from a job that died."""

    def reword(text: str) -> str:
        for died in ("the job died while writing it", "the job died while writing"):
            text = text.replace(died, why)
        return text.replace("cut off mid-write", "cut off mid-line")

    source.warnings[:] = [reword(w) for w in source.warnings]
    source.notes[:] = [reword(n) for n in source.notes]
    source.rejections[:] = [replace(r, reason=reword(r.reason)) for r in source.rejections]
    source.rejection_counts = {reword(k): v for k, v in source.rejection_counts.items()}


STDIN = "-"
STDIN_NAME = "<stdin>"


def _read_stdin(options: ReadOptions):
    """`stab analyze -`: standard input, sniffed and read exactly as the same bytes in a file.

    The bytes are spooled to a private temporary file as they arrive (every reader
    takes a path, and sniffing needs to look twice), counted on the way: past
    max_input_bytes the read stops there, holding no more than one chunk. Errors
    and the source name say `<stdin>`, never the temporary path.
    """
    import sys
    import tempfile

    if sys.stdin.isatty():  # nothing piped in: reading would wait for the user to type a log
        raise StabInputError(STDIN_NAME, "standard input is a terminal; pipe a log into it")
    with tempfile.TemporaryDirectory(prefix="stab-stdin-") as folder:
        spool = Path(folder) / "stdin"
        head, blank = _spool_stdin(sys.stdin.buffer, spool, options.limits)
        if blank:
            raise StabInputError(STDIN_NAME, "nothing on standard input")
        path = spool.rename(spool.with_name(stdin_spool_name(head)))
        return read_stdin_spool(path, options)


def stdin_spool_name(head: bytes) -> str:
    """The name standard input's bytes are spooled under (`stdin.log`, `stdin.csv`...)."""
    return f"stdin{_stdin_suffix(head)}"


def read_stdin_spool(path: Path, options: ReadOptions):
    """The run in a spool of standard input's bytes, named and worded as standard input."""
    run, failed = None, None
    try:
        run = read(path, options)
    except StabInputError as err:
        failed = err
    if path.suffix != ".log" and not options.format_in and (run is None or _no_loss(run)):
        # lines that only look like a table (`iter 0: loss 2.5, time 101ms` has as many
        # commas on every line): read as the text log they may be, as a `.log` would be
        path = path.rename(path.with_suffix(".log"))
        try:
            as_text = read(path, options)
        except StabInputError:
            as_text = None
        if as_text is not None and (run is None or not _no_loss(as_text)):
            run = as_text
    if run is None:
        assert failed is not None  # no run is read only when its read failed
        raise StabInputError(
            STDIN_NAME, failed.reason, line=failed.line, record=failed.record
        ) from None
    run.source.path, run.source.run = STDIN_NAME, "stdin"
    _reword_cut(run.source, STDIN_CUT)
    run.source.warnings[:] = [w.replace(str(path), STDIN_NAME) for w in run.source.warnings]
    return run


def _no_loss(run) -> bool:
    return "loss" not in run.frame.columns


_STDIN_CHUNK_BYTES = 1 << 20
_STDIN_HEAD_BYTES = 65536  # what `_stdin_suffix` looks at


def _spool_stdin(stream, spool: Path, limits: InputLimits) -> tuple[bytes, bool]:
    """Copy `stream` to `spool`, stopping with an input error once it is past
    max_input_bytes: (its first bytes, whether it held only whitespace)."""
    from stabilitycli.ingest.limits import limit_hit

    head = b""
    blank = True
    total_bytes = 0
    with open(spool, "wb") as sink:
        while chunk := stream.read(_STDIN_CHUNK_BYTES):
            total_bytes += len(chunk)
            if total_bytes > limits.max_input_bytes:
                raise limit_hit(
                    STDIN_NAME,
                    "standard input goes on past the limit (stopped reading there)",
                    "max_input_bytes",
                    limits.max_input_bytes,
                )
            if len(head) < _STDIN_HEAD_BYTES:
                head += chunk[: _STDIN_HEAD_BYTES - len(head)]
            blank = blank and chunk.isspace()
            sink.write(chunk)
    return head, blank


def _stdin_suffix(data: bytes) -> str:
    """The file name the bytes would have: readers of tables go by it, text logs by content.

    A table's first lines all hold the same number of commas (or tabs) and more
    than none; anything else is a text log (`.log`), which Parquet, Arrow and
    JSON lines are still sniffed from by their content.
    """
    head = [line for line in data[:65536].decode("utf-8", "replace").split("\n")[:5] if line]
    if len(head) < 2 or any(c in line for line in head for c in "{[|\r"):
        return ".log"  # dicts, progress bars, Megatron's `|` records: a text log
    for sep, suffix in ((",", ".csv"), ("\t", ".tsv")):
        counts = {line.count(sep) for line in head}
        if len(counts) == 1 and counts.pop() > 0:
            return suffix
    return ".log"


def _detect_uri(text: str) -> str:
    for name in READERS:
        module = reader(name)
        if isinstance(module, UriReader) and module.sniff_uri(text):
            return name
    raise StabInputError(text, f"not a tracking URI stab reads ({FORMATS_HINT})")


def _apply_dtype(run, path: Path, options: ReadOptions) -> None:
    """dtype regime, in order: the flag, a manifest.json beside the log, the reader's own."""
    source = run.source
    if options.dtype:
        # ReadOptions has already turned the flag into fp32 / fp16 / bf16, or refused it
        source.dtype, source.dtype_origin = options.dtype, "--dtype flag"
        return
    folder = path if path.is_dir() else path.parent
    manifest = folder / "manifest.json"
    if manifest.is_file():
        from stabilitycli.ingest.bounded import depth_fault

        try:
            data = manifest.read_bytes()
            # a sidecar says the dtype at most: too deep to parse, it is skipped, never the log
            too_deep = depth_fault(data, options.limits)
            if too_deep is not None:
                source.warnings.append(f"{manifest}: {too_deep}; dtype not taken from it")
                return
            meta = json.loads(data)
        except (OSError, ValueError, RecursionError):
            source.warnings.append(f"{manifest}: not readable JSON; dtype not taken from it")
            return
        if not isinstance(meta, dict):
            return
        found = dtype_from((manifest.name, meta))
        if found is not None:
            source.dtype, source.dtype_origin = found
        if isinstance(meta.get("vocab_size"), int):
            source.vocab_size = meta["vocab_size"]
