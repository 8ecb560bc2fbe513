"""Per-rank files that are not JSONL: `rank_0.csv`, `rank_3.log`, `rank_1/metrics.parquet`.

A callback that writes one table (or one stdout log) per process leaves the
same layout as per-rank JSONL, in another format. Each file is read whole by
the reader of its format, exactly as `stab analyze FILE` would read it, and
the runs are stacked with the rank the file name gives. The row accounting,
rejections (named `file: reason` with the file's own line), restarts and
warnings of every file are carried over, so nothing read is lost from view.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import Rejection, Restart, SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.options import ReadOptions

if TYPE_CHECKING:
    from stabilitycli.frame import RunData

# formats of one file holding one process's log; stores and event-file folders
# (MLflow, TensorBoard, W&B runs) have their own per-rank layouts
FILE_FORMATS = ("tabular", "llmc", "megatron", "deepspeed", "jsonl")
# text families whose sniff accepts much of any stdout: asked only of a rank-named text log
# no format above claims (rank_3.log of a nanoGPT loop, grepped Trainer dicts, OLMo blocks)
TEXT_ONLY_FORMATS = ("blocklog", "dictlog", "kvlog")
_SIDE_FILES = (".md", ".txt", ".yaml", ".yml", ".json", ".py", ".sh", ".toml", ".cfg", ".ini")


@dataclass(frozen=True)
class RankFile:
    """One rank's log in a per-rank folder (`rank_dir` finds them, every format reads them)."""

    path: Path
    rel: str  # path relative to the directory, as shown in messages
    rank: int


def log_format(path: Path) -> str | None:
    """The reader of a one-process log file, or None when it is no log stab reads."""
    from stabilitycli.ingest.formats import reader

    if not path.is_file() or path.name.lower().endswith(_SIDE_FILES):
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(8192)
    except OSError:
        return None
    for name in FILE_FORMATS:
        if reader(name).sniff(path, head):
            return name
    if not _is_text_log(path, head):
        return None
    for name in TEXT_ONLY_FORMATS:
        if reader(name).sniff(path, head):
            return name
    return None


def _is_text_log(path: Path, head: bytes) -> bool:
    from stabilitycli.ingest.text.textlog import is_text_log

    return is_text_log(path, head)


def _read_one(path: Path, name: str, options: ReadOptions) -> RunData:
    """One rank's file as `stab analyze FILE` reads it: a text log that the family which
    claimed it cannot read goes to the other text families (`ingest.fallback`)."""
    from stabilitycli.ingest.fallback import TEXT_FAMILIES, read_text_log
    from stabilitycli.ingest.formats import reader

    if name in TEXT_FAMILIES:
        with open(path, "rb") as handle:
            if _is_text_log(path, handle.read(8192)):
                return read_text_log(path, name, options)
    return reader(name).read(path, options)


def read_files(files: list[RankFile], source: SourceInfo, options: ReadOptions) -> RunData:
    """Every per-rank file read by its own reader, stacked into one per-rank run."""
    import polars as pl

    from stabilitycli.frame import SEGMENT, RunData

    frames: list[pl.DataFrame] = []
    abandoned: list[pl.DataFrame] = []
    formats: set[str] = set()
    for item in files:
        name = log_format(item.path)
        if name is None:
            source.warnings.append(f"{item.rel}: not a log stab reads; skipped")
            continue
        try:
            run = _read_one(item.path, name, options)
        except StabInputError as err:
            # the file's own line or record stays in the message
            raise StabInputError(
                str(item.path), err.reason, line=err.line, record=err.record
            ) from None
        formats.add(run.source.format)
        frame = _with_rank(run.frame, item, source)
        frames.append(frame)
        if run.abandoned.height:
            abandoned.append(_with_rank(run.abandoned, item, source))
        _carry(run.source, item, source)
    if not frames:
        raise StabInputError(source.path, "no per-rank file could be read")
    frame = pl.concat(frames, how="diagonal_relaxed").sort(["rank", "step"])
    metrics = [c for c in frame.columns if c not in ("step", "rank")]
    frame = frame.select(["step", "rank", *metrics])
    first, last = frame.select(
        pl.col("step").min().alias("a"), pl.col("step").max().alias("b")
    ).row(0)
    source.first_step, source.last_step = int(first), int(last)
    source.ranks = int(frame["rank"].n_unique())
    set_aside = (
        pl.concat(abandoned, how="diagonal_relaxed").sort(["rank", SEGMENT, "step"])
        if abandoned
        else pl.DataFrame()
    )
    source.notes.append(
        f"{len(frames)} per-rank {'/'.join(sorted(formats))} file(s), {source.ranks} rank(s); "
        "each read as its own log, the rank from the file name"
    )
    return RunData(frame=frame, source=source, abandoned=set_aside)


def _with_rank(frame, item: RankFile, source: SourceInfo):
    """The file's rows under the rank its name gives (a rank inside the file must agree)."""
    import polars as pl

    if "rank" in frame.columns:
        inside = frame["rank"].drop_nulls().unique().to_list()
        if len(inside) > 1:
            raise StabInputError(
                str(item.path),
                f"holds {len(inside)} ranks but its name says rank {item.rank}; "
                "give the file itself to read its ranks",
            )
        if inside and inside != [item.rank]:
            source.warnings.append(
                f"{item.rel}: the log says rank {inside[0]} but the name says {item.rank}; "
                "using the name"
            )
        frame = frame.drop("rank")
    return frame.with_columns(pl.lit(item.rank, dtype=pl.Int64).alias("rank"))


def _carry(part: SourceInfo, item: RankFile, source: SourceInfo) -> None:
    """One file's accounting, rejections, restarts and remarks, named by the file."""
    source.rows_read += part.rows_read
    source.rows_used += part.rows_used
    source.rows_rejected += part.rows_rejected
    source.rows_rewritten += part.rows_rewritten
    for reason, count in part.rejection_counts.items():
        source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + count
    for rejection in part.rejections:
        if len(source.rejections) < 5:
            source.rejections.append(Rejection(rejection.line, f"{item.rel}: {rejection.reason}"))
    source.restarts.extend(
        Restart(r.at_row, r.resumed_from_step, r.last_step_before, item.rank) for r in part.restarts
    )
    source.warnings.extend(f"{item.rel}: {w}" for w in part.warnings)
    source.notes.extend(n for n in part.notes if n not in source.notes)
    for key, raw_key in part.metrics.items():
        if source.metrics.setdefault(key, raw_key) != raw_key:
            source.warnings.append(
                f"{item.rel}: {key} is {raw_key!r} here but {source.metrics[key]!r} in an "
                "earlier rank file"
            )
    if source.dtype is None and part.dtype is not None:
        source.dtype, source.dtype_origin = part.dtype, f"{item.rel}: {part.dtype_origin}"
    source.vocab_size = source.vocab_size or part.vocab_size
