"""A directory of per-rank logs: one file (or one sub-folder) per rank.

Distributed jobs that log on every rank usually write one file per process.
The rank is taken from the file name. Recognised names (compressed `.gz` and
`.zst` variants too, `.ndjson` as well as `.jsonl`):

* `rank_7.jsonl`, `rank7.jsonl`, `rank-007.jsonl.gz`, `worker_7.jsonl`
* a rank token anywhere in the name between separators: `log.rank7.jsonl`,
  `metrics_rank_7.jsonl`, `node1-rank07.jsonl.zst`
* a sub-folder per rank: `rank_7/metrics.jsonl`, `worker-7/log.jsonl.gz`

`--rank-pattern RE` (`ReadOptions.rank_pattern`) overrides these: a regular
expression with one capture group, searched in each file's path relative to
the directory (`node(\\d+)_gpu` or `(\\d+)/metrics`).

Each file is parsed like a JSONL log (NaN and Infinity kept exactly), gets a
`rank` column, and all files go through `finalize` once, so restarts, sparse
rows and ranks that log at different steps or stop early are handled like any
per-rank log. The row accounting sums over files, and rejected lines are named
`file: reason` with the line number of that file.

Per-rank files in another format stab reads one file of - a table (`rank_0.csv`,
`rank_1/metrics.parquet`) or a training stdout log (`rank_3.log`) - count when
their name carries the rank the same way; each is read by its own reader and
the runs are stacked by rank (`_rank_logs`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Rejection, Restart, SourceInfo
from stabilitycli.frame import ROW, RunData, finalize
from stabilitycli.ingest import _rank_logs
from stabilitycli.ingest._rank_logs import RankFile
from stabilitycli.ingest.folders import list_folder
from stabilitycli.ingest.jsonl import parse as jsonl
from stabilitycli.ingest.jsonl.reader import read_bytes
from stabilitycli.ingest.options import ReadOptions

NAME = "rank_dir"
JSONL_SUFFIXES = (
    ".jsonl",
    ".ndjson",
    ".jsonl.gz",
    ".ndjson.gz",
    ".jsonl.zst",
    ".ndjson.zst",
)
# a rank token between separators (or at either end of the name)
# ranks are 1-9 ASCII digits: `\d` takes other scripts' digits, and a name of 300 digits is no
# rank an Int64 column can hold
_RANK_IN_NAME = re.compile(r"(?:^|[._-])(?:rank|worker)[_-]?([0-9]{1,9})(?=$|[._-])", re.IGNORECASE)
_RANK_FOLDER = re.compile(r"^(?:rank|worker)[_-]?([0-9]{1,9})$", re.IGNORECASE)
RECOGNISED = (
    "rank_7.jsonl, rank7.jsonl, rank-007.jsonl.gz, worker_7.jsonl, log.rank7.jsonl, "
    "rank_7/metrics.jsonl, rank_7.csv, rank_7.log (or give --rank-pattern with one capture group)"
)
_MAX_SCAN = 20_000  # entries looked at by sniff: a huge unrelated folder is not scanned whole


def _stem(name: str) -> str:
    lower = name.lower()
    for suffix in sorted(JSONL_SUFFIXES, key=len, reverse=True):
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _is_jsonl(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(JSONL_SUFFIXES)


def _is_rank_log(path: Path, folder: Path) -> bool:
    """A per-rank file in another log format: only a rank-named one is worth a sniff."""
    if not path.is_file() or "tfevents" in path.name or path.name.startswith("."):
        return False
    # one folder down, only inside a rank's own folder (rank_3/metrics.csv): a folder
    # of runs is not taken for a per-rank run because one of its runs logged per rank
    if path.parent != folder and not _RANK_FOLDER.match(path.parent.name):
        return False
    return default_rank(path, folder) is not None and _rank_logs.log_format(path) is not None


def holds_named_ranks(folder: Path) -> bool:
    """The folder is a per-rank directory itself, by names alone (rank_7.jsonl, rank_7/x.jsonl).

    A batch sweep asks this to keep such a folder one run; numbered files of one shape
    without a rank name could as well be separate runs, so they do not count.
    """
    for path in _candidates(folder):
        if default_rank(path, folder) is None:
            continue
        if path.parent == folder or _RANK_FOLDER.match(path.parent.name):
            return True
    return False


def _candidates(folder: Path) -> list[Path]:
    """JSONL files, and rank-named logs of other formats, at the top level and one
    sub-folder down, in name order."""
    found: list[Path] = []
    try:
        entries = list_folder(folder)
    except OSError:
        return []
    for entry in entries[:_MAX_SCAN]:
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            try:
                found.extend(
                    p for p in list_folder(entry) if _is_jsonl(p) or _is_rank_log(p, folder)
                )
            except OSError:
                continue
        elif _is_jsonl(entry) or _is_rank_log(entry, folder):
            found.append(entry)
    return found


def default_rank(path: Path, folder: Path) -> int | None:
    """The rank a recognised file name (or rank sub-folder) carries, else None."""
    match = _RANK_IN_NAME.search(_stem(path.name))
    if match:
        return int(match.group(1))
    if path.parent != folder:
        match = _RANK_FOLDER.match(path.parent.name)
        if match:
            return int(match.group(1))
    return None


def sniff(path: Path, head: bytes) -> bool:
    if not path.is_dir():
        return False
    files = _candidates(path)
    if any(default_rank(f, path) is not None for f in files):
        return True
    # several JSONL files named alike but for a number (node0_gpu0, node0_gpu1, ...):
    # per-rank logs under a custom name; `read` then asks for --rank-pattern
    names = [f.relative_to(path).as_posix() for f in files]
    numbered = [n for n in names if re.search(r"\d", n)]
    shapes = {re.sub(r"\d+", "#", n) for n in numbered}
    return len(numbered) >= 2 and len(shapes) == 1


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise StabUsageError(
            f"--rank-pattern {pattern!r} is not a valid regular expression: {err}"
        ) from None
    if compiled.groups < 1:
        raise StabUsageError(
            f"--rank-pattern {pattern!r} needs one capture group around the rank number"
        )
    return compiled


def rank_files(folder: Path, pattern: str | None) -> tuple[list[RankFile], list[str]]:
    """Per-rank files of a directory, and the JSONL files that carry no rank."""
    compiled = _compile(pattern) if pattern else None
    files: list[RankFile] = []
    unranked: list[str] = []
    for path in _candidates(folder):
        rel = path.relative_to(folder).as_posix()
        rank = _rank_of(path, folder, compiled)
        if rank is None:
            unranked.append(rel)
        else:
            files.append(RankFile(path, rel, rank))
    return files, unranked


def _rank_of(path: Path, folder: Path, compiled: re.Pattern[str] | None) -> int | None:
    if compiled is None:
        return default_rank(path, folder)
    match = compiled.search(path.relative_to(folder).as_posix())
    digits = re.sub(r"\D", "", match.group(1)) if match and match.group(1) else ""
    return int(digits) if digits else None


def read_joined(folder: Path, chunks: dict[Path, bytes], options: ReadOptions) -> RunData | None:
    """Whole JSONL lines of several rank files (`chunks`, by path) in one parse, read as
    `read` reads them as files of their own: a watch's tail of every rank, whose per-file
    cost would otherwise outweigh its few lines. None when a file is not JSONL or a line
    needs the per-line pass (then the caller reads them as files)."""
    compiled = _compile(options.rank_pattern) if options.rank_pattern else None
    used: list[RankFile] = []
    datas: list[bytes] = []
    for path in sorted(chunks):
        rank = _rank_of(path, folder, compiled)
        if not _is_jsonl(path) or not chunks[path].endswith(b"\n"):
            return None
        if rank is not None:
            used.append(RankFile(path, path.relative_to(folder).as_posix(), rank))
            datas.append(chunks[path])
    raw = jsonl.fast_parse(b"".join(datas)) if used else None
    if raw is None:
        return None
    ends = np.cumsum([jsonl.count_byte(data, b"\n") for data in datas])
    rows = raw[ROW].to_numpy()
    index = np.searchsorted(ends, rows, side="left")  # file i holds lines ends[i-1]+1..ends[i]
    starts = np.concatenate(([0], ends[:-1]))
    ranks = np.array([item.rank for item in used], dtype=np.int64)
    rank_keys = [c for c in raw.columns if aliases.normalise_key(c) in aliases.RANK_KEYS]
    raw = raw.drop(rank_keys).with_columns(
        pl.Series("_file_row", rows - starts[index]),
        pl.Series("_file", index.astype(np.int32)),
        pl.Series("rank", ranks[index]),
    )
    source = SourceInfo(path=str(folder), format=NAME, run=folder.name or None)
    return _finish([raw.drop(ROW)], used, source, options)


def read(path: Path, options: ReadOptions) -> RunData:
    folder = Path(path)
    files, unranked = rank_files(folder, options.rank_pattern)
    if not files:
        how = (
            f"--rank-pattern {options.rank_pattern!r} matched no file"
            if options.rank_pattern
            else (f"no per-rank log file; recognised names: {RECOGNISED}")
        )
        raise StabInputError(str(folder), how)
    source = SourceInfo(path=str(folder), format=NAME, run=folder.name or None)
    if unranked:
        shown = ", ".join(unranked[:5]) + (" ..." if len(unranked) > 5 else "")
        source.warnings.append(
            f"{len(unranked)} JSONL file(s) without a rank in the name were not read: {shown}"
        )
    _warn_duplicate_ranks(files, source)
    if not all(_is_jsonl(item.path) for item in files):
        return _rank_logs.read_files(files, source, options)

    parts: list[pl.DataFrame] = []
    used: list[RankFile] = []  # files that gave rows, indexed by the `_file` column
    empty: list[str] = []
    cut: list[str] = []
    for item in files:
        raw = _parse_file(item, source, empty, cut)
        if raw is None:
            continue
        parts.append(raw.with_columns(pl.lit(len(used), dtype=pl.Int32).alias("_file")))
        used.append(item)
    if cut:
        shown = ", ".join(cut[:5]) + (" ..." if len(cut) > 5 else "")
        source.warnings.append(
            f"{len(cut)} file(s) end in a line cut off mid-write (the job died while writing): "
            f"{shown}; kept everything before it"
        )
    if empty:
        source.warnings.append(
            f"{len(empty)} per-rank file(s) hold no rows: {', '.join(empty[:5])}"
        )
    if not parts:
        raise StabInputError(str(folder), "every per-rank file is empty")
    return _finish(parts, used, source, options)


def _warn_duplicate_ranks(files: list[RankFile], source: SourceInfo) -> None:
    seen: dict[int, list[str]] = {}
    for item in files:
        seen.setdefault(item.rank, []).append(item.rel)
    for rank, names in seen.items():
        if len(names) > 1:
            source.warnings.append(
                f"rank {rank} comes from {len(names)} files ({', '.join(names[:4])}); "
                "read in name order"
            )


def _reject(source: SourceInfo, rel: str, line: int | None, reason: str) -> None:
    """Count a rejected line under its plain reason; keep the file in the example."""
    source.rows_rejected += 1
    source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + 1
    if len(source.rejections) < 5:
        source.rejections.append(Rejection(line, f"{rel}: {reason}"))


def _parse_file(
    item: RankFile, source: SourceInfo, empty: list[str], cut: list[str]
) -> pl.DataFrame | None:
    """One file's raw rows with `rank`, `_file_row` (its own line number) columns."""
    data = read_bytes(item.path)
    data, cut_line = jsonl.strip_truncated_tail(data)
    if cut_line is not None:
        cut.append(f"{item.rel}:{cut_line}")
        _reject(source, item.rel, cut_line, jsonl.TRUNCATED_REASON)
    if not data.strip():
        empty.append(item.rel)
        return None
    raw = jsonl.fast_parse(data)
    if raw is None:
        local = SourceInfo(path=str(item.path), format=NAME)
        try:
            raw = jsonl.slow_parse(data, local)
        except StabInputError:
            raw = None
        for reason, count in local.rejection_counts.items():
            source.rows_rejected += count
            source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + count
        for rejection in local.rejections:
            if len(source.rejections) < 5:
                source.rejections.append(
                    Rejection(rejection.line, f"{item.rel}: {rejection.reason}")
                )
        if local.rows_rejected:
            first = local.rejections[0]
            source.warnings.append(
                f"{item.rel}: {local.rows_rejected} line(s) could not be read; first at line "
                f"{first.line}: {first.reason}"
            )
        if raw is None:
            return None
    # a rank field inside the file must agree with the name; the name wins
    for key in [c for c in raw.columns if aliases.normalise_key(c) in aliases.RANK_KEYS]:
        values = raw[key].cast(pl.Int64, strict=False).drop_nulls().unique().to_list()
        if values and values != [item.rank]:
            source.warnings.append(
                f"{item.rel}: field {key!r} says rank {values[:3]} but the name says {item.rank}; "
                "using the name"
            )
        raw = raw.drop(key)
    return raw.rename({ROW: "_file_row"}).with_columns(
        pl.lit(item.rank, dtype=pl.Int64).alias("rank")
    )


def _finish(
    parts: list[pl.DataFrame], used: list[RankFile], source: SourceInfo, options: ReadOptions
) -> RunData:
    """Concatenate every file and finalize once; map global rows back to file lines."""
    raw = pl.concat(parts, how="diagonal_relaxed")
    raw = raw.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(pl.Int64))
    file_rows = raw["_file_row"].to_numpy()
    file_index = raw["_file"].to_numpy()
    raw = raw.drop("_file_row", "_file")
    source.rows_read = raw.height + source.rows_rejected
    step_key = options.step_key or aliases.find_key(raw.columns, aliases.STEP_KEYS)
    if options.step_key and options.step_key not in raw.columns:
        raise StabInputError(
            source.path, f"--step-key {options.step_key!r} is not a key in any per-rank file"
        )
    kept_before = len(source.rejections)
    run = finalize(
        raw, source, step_key=step_key, rank_key="rank", overrides=options.metric_overrides
    )

    def where(global_row: int) -> tuple[RankFile, int]:
        return used[int(file_index[global_row - 1])], int(file_rows[global_row - 1])

    # finalize named rows by their place in the concatenation: name the file and line instead
    for i in range(kept_before, len(source.rejections)):
        rejection = source.rejections[i]
        if rejection.line is not None:
            item, line = where(rejection.line)
            source.rejections[i] = Rejection(line, f"{item.rel}: {rejection.reason}")
    source.restarts = [
        Restart(where(r.at_row)[1], r.resumed_from_step, r.last_step_before, r.rank)
        for r in source.restarts
    ]
    source.notes.append(
        f"{len(used)} per-rank file(s), {source.ranks} rank(s); rank from the "
        + ("--rank-pattern" if options.rank_pattern else "file name")
    )
    return run
