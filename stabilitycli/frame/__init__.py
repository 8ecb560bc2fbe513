"""The canonical run frame every ingester produces and every detector reads.

Shape (a polars DataFrame, Arrow-backed):

* `step`  Int64, the optimizer step;
* `rank`  Int64, only when the log has per-rank values;
* one Float64 column per metric. Canonical names (`loss`, `grad_norm`, `lr`,
  `loss_scale`, `act_norm/<layer>`, ...; see `aliases.py`) for known keys,
  the raw key for anything else. NaN/+Inf/-Inf are data and kept exactly;
  null means "not logged at this step" (a sparse eval column).

Rows are unique per (rank, step) and sorted. Beside the frame, `RunData.lines` holds the
file line of each row (`source_line`) for a line-based log (JSON Lines, text logs, CSV),
None for formats without lines: what annotations point at. An ingester hands `finalize` a raw
table (one row per record, a `_row` column with the 1-based line or record
number) and `finalize` does the rest once for every format: key aliasing,
casting, restarts, merging of sparse rows, and the row accounting.
"""

from __future__ import annotations

from dataclasses import field
from typing import cast

import numpy as np
import polars as pl

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import Restart, SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import step_fraction
from stabilitycli.frame.join import joined
from stabilitycli.frame.lines import SourceLines
from stabilitycli.frame.rank_sort import by_rank

ROW = "_row"
SEGMENT = "_segment"
SOURCE_LINE = "source_line"

# readers whose `_row` is the row's line in the file (JSON Lines, text logs, CSV): a finding
# can point at the line of its onset. Parquet, Arrow, TensorBoard, MLflow and W&B rows
# have no line; there `RunData.lines` is None and an output names the file only
LINE_FORMATS = frozenset(
    {"jsonl", "kvlog", "dictlog", "megatron", "deepspeed", "llmc", "textlog", "tabular"}
)
_BINARY_TABLES = (".parquet", ".arrow", ".feather", ".ipc")


@dataclass
class RunData:
    """One run: the canonical frame plus everything known about where it came from."""

    frame: pl.DataFrame
    source: SourceInfo
    # Rows a resume rewrote: the abandoned trajectory, same columns plus `_segment`.
    abandoned: pl.DataFrame = field(default_factory=pl.DataFrame)
    # for a line-based log, the file line of the first row read for each row of `frame`
    # (never a metric column), held compactly (`frame.lines`); else None. `lines` shows it
    # as a table, `lines_at` at a few steps
    line_index: SourceLines | None = None

    @property
    def lines(self) -> pl.DataFrame | None:
        """`step`, (`rank`,) `source_line` of every row, or None for a log without lines."""
        return None if self.line_index is None else self.line_index.frame()

    @lines.setter
    def lines(self, table: pl.DataFrame | None) -> None:
        self.line_index = None if table is None else SourceLines(table, SOURCE_LINE)

    def lines_at(self, steps: list[int]) -> pl.DataFrame | None:
        """`lines`' rows at `steps` only, without building the others; None without lines."""
        return None if self.line_index is None else self.line_index.at_steps(steps)

    @property
    def has_ranks(self) -> bool:
        return "rank" in self.frame.columns and self.frame["rank"].n_unique() > 1

    @property
    def metric_columns(self) -> list[str]:
        return [c for c in self.frame.columns if c not in ("step", "rank")]

    def pack_columns(self) -> None:
        """Make every column of the frame one contiguous chunk (see `one_chunk_frame`).

        numpy borrows polars' buffer only from a one-chunk column: a frame in many
        chunks would have every array the rules read copied and held beside it.
        """
        pieces = [self.frame]
        # the list holds the only reference, so each column's old chunks can go as it is copied
        self.frame = pl.DataFrame()
        self.frame = one_chunk_frame(pieces)

    def require_loss(self) -> RunData:
        """This run, if its loss series was read; else the one-line error every command gives.

        A run whose loss was not read is never analysed (and so never `healthy`);
        the error lists the numeric keys seen, so the user can name the loss.
        """
        if "loss" in self.frame.columns:
            return self
        metrics = self.source.metrics
        seen = [
            f"{metrics[c]!r} (read as {c})" if c in metrics else repr(c)
            for c in self.metric_columns
        ]
        listing = ", ".join(seen[:25]) or "none"
        if len(seen) > 25:
            listing += f", ... ({len(seen) - 25} more)"
        tried = (
            f"; the other text formats tried found none either: {', '.join(self.source.tried)}"
            if self.source.tried
            else ""
        )
        raise StabInputError(
            self.source.path,
            f"no loss series found (numeric keys: {listing}); name it with --metric loss=KEY"
            + tried,
        )


def _to_float(name: str, dtype: pl.DataType) -> pl.Expr | None:
    """A Float64 expression for a raw column, or None when it holds no numbers."""
    col = pl.col(name)
    if dtype.is_numeric():
        return col.cast(pl.Float64)
    if dtype == pl.Boolean:
        return col.cast(pl.Float64)
    if dtype in (pl.String, pl.Utf8):
        # numbers written as strings ("2.31", "NaN", "inf") are numbers
        return col.str.strip_chars().cast(pl.Float64, strict=False)
    return None  # lists, structs (a config dump), nulls


_RANK_MAX = 2**31 - 1
# keys that place a record in time but are never a step, a rank or a metric
CLOCK_KEYS = frozenset({"epoch", "_runtime", "_timestamp", "timestamp"})
# the working columns of `finalize` and `_merge_and_resume` (`step` and `rank` are axes:
# a raw column spelled so is never read as a metric)
_WORKING = frozenset({SEGMENT, "_has_metric", "_step_fault", "_n_rows", "_back", "_prev_max"})
_STEP_FAULTS = {
    "fraction": "metric record whose step is not a whole number",
    "negative": "metric record with a negative step",
}


def _require_scalar(column: pl.Series, role: str, path: str) -> None:
    """A step or rank column of lists, structs or bytes is no axis: one clear error naming it."""
    dtype = column.dtype
    if dtype.is_numeric() or dtype in (pl.String, pl.Utf8, pl.Null, pl.Boolean):
        return
    hint = " (name another one with --step-key)" if role == "step" else ""
    raise StabInputError(
        path, f"the {role} column {column.name!r} holds {dtype} values, not numbers{hint}"
    )


def _step_column(raw: pl.DataFrame, step_key: str, path: str) -> tuple[pl.Series, pl.Series | None]:
    """The step as Int64, and per row why a value that is there cannot be a step (or null);
    None for the second when every value that is there is a step.

    An integer column is cast directly: a trip through Float64 would round every
    step above 2**53 and lose the ones near 2**63. A float or text step is taken
    only when it is whole: `60.5` is no optimizer step, and truncating it would
    make a step out of nothing (and a restart of the next row).
    """
    column = raw[step_key]
    _require_scalar(column, "step", path)
    if column.dtype == pl.Boolean:
        column = column.cast(pl.Int64)
    if column.dtype.is_integer():
        exact = column.cast(pl.Int64, strict=False)
        if exact.null_count() == column.null_count() and not bool((exact < 0).any()):
            # the common case, whole and never negative: no float copy of the column and no
            # column of faults, which cost three times the step column itself on a long log
            return exact, None
    elif column.dtype in (pl.String, pl.Utf8):
        column = column.str.strip_chars()
        exact = column.cast(pl.Int64, strict=False)
    else:
        exact = pl.Series([None] * len(column), dtype=pl.Int64)
    parts = pl.DataFrame({"exact": exact, "number": column.cast(pl.Float64, strict=False)})
    number = pl.col("number")
    fraction = number.is_finite() & (number != number.floor())
    step = pl.col("exact").fill_null(
        pl.when(fraction).then(None).otherwise(number.cast(pl.Int64, strict=False))
    )
    out = parts.select(
        step.alias("step"),
        pl.when(fraction)
        .then(pl.lit("fraction"))
        .when(step < 0)
        .then(pl.lit("negative"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("_step_fault"),
    )
    return out["step"], out["_step_fault"]


def one_chunk_frame(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    """The pieces joined into one frame of one-chunk columns; empties `pieces`.

    A log read in pieces (or a Parquet file's row groups) arrives in many chunks,
    and polars rechunks every column at once when a one-chunk column meets them
    (a step column built from them, say): a second copy of the whole run while the
    first is still held. Several pieces are joined a column and a piece at a time
    (`join.joined`); one frame's columns are rewritten a column at a time, with the
    frame re-pointed after each, so each column's old chunks go before the next is
    copied. The caller must hold no other reference to the pieces, or nothing is freed.
    """
    if len(pieces) > 1:
        return joined(pieces)
    frame = pieces[0]
    pieces.clear()
    for name in frame.columns:
        if frame[name].n_chunks() > 1:
            frame = frame.with_columns(frame[name].rechunk())
    return frame


def unread_columns(columns: list[str], keep: tuple[str, ...] = ()) -> list[str]:
    """The columns `finalize` never reads (the clock keys: epoch, timestamps), but those
    in `keep` (a step or rank key the user named): a reader may drop them early."""
    return [c for c in columns if aliases.normalise_key(c) in CLOCK_KEYS and c not in keep]


def metrics_as_floats(raw: pl.DataFrame, keep: tuple[str, ...] = ()) -> pl.DataFrame:
    """`raw` with each column `finalize` reads as a metric already cast as it casts it
    (Float64), and without those that can hold no metric: no number type (text with no
    number, lists, objects, timestamps) or no value at all. A reader may do this to each
    piece of a log as it is read: a column of text, or a config object on every line,
    then costs nothing past its piece, and `finalize` finds the same metrics. The step,
    rank and clock keys, the line number, a step-like text key (`N/M`) and `keep` (keys
    the user named) are left as they are."""
    axis_names = set(aliases.STEP_KEYS) | set(aliases.RANK_KEYS) | CLOCK_KEYS
    cast: dict[str, pl.Expr] = {}
    never: list[str] = []
    for name, dtype in raw.schema.items():  # loop over columns, not rows
        if (
            name == ROW
            or name in keep
            or aliases.normalise_key(name) in axis_names
            or (dtype in (pl.String, pl.Utf8) and step_fraction.step_like(name))
        ):
            continue
        expr = _to_float(name, dtype)
        if expr is None:
            never.append(name)
        elif dtype != pl.Float64:
            cast[name] = expr.alias(name)
    raw = without_columns(raw, never)
    if cast:
        # the cast columns made apart and put in as Series: expressions in `with_columns`
        # would rechunk every column of the piece, a copy of it all that the join makes again
        raw = raw.with_columns(raw.select(list(cast.values())).get_columns())
    # a column with no value in this piece (a text key with no number in it) is no metric
    # here; another piece that has values brings the column back, with nulls for these rows
    counts = raw.select(pl.col(name).count() for name in cast).row(0) if cast else ()
    return without_columns(raw, [name for name, n in zip(cast, counts, strict=True) if n == 0])


def without_columns(frame: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """`frame.drop(names)` without its copy: `drop` (even of no column) rechunks every
    column that is left, where picking the others by name keeps their chunks."""
    if not names:
        return frame
    gone = set(names)
    return frame[[name for name in frame.columns if name not in gone]]


def finalize(
    raw: pl.DataFrame,
    source: SourceInfo,
    *,
    step_key: str | None,
    rank_key: str | None = None,
    overrides: dict[str, str] | None = None,
    owned: bool = False,
    in_rank_order: bool = False,
) -> RunData:
    """Turn one ingester's raw records into the canonical frame (see module doc).

    `owned`: the caller has no further use for `raw` and hands it over, left empty. A name
    the caller keeps for it would keep every raw column alive while the rows are sorted by
    rank, a second copy of the whole log at once (issue 15).

    `in_rank_order`: `raw`'s rows come sorted by rank already (`join.joined_by_rank`), not
    in file order; rejected rows are then named by their first lines in the file, as a
    frame in file order names them.
    """
    if owned:
        raw = _taken(raw)
    source.rows_read = max(source.rows_read, raw.height + source.rows_rejected)
    raw = _own_names(raw, source, step_key, rank_key)
    raw, step_key = step_fraction.split(raw, source, step_key)
    # 1. Every other column as Float64; columns with no number anywhere are not metrics.
    numeric, metric_keys = _numeric_columns(raw, step_key, rank_key)
    # 2. Aliases: which metric each numeric key is.
    out_cols = _metric_columns(metric_keys, dict(overrides or {}), source, rank_key is not None)
    # 3. Step and rank.
    table = numeric.select([pl.col(ROW), *out_cols])
    metric_names = [c for c in table.columns if c != ROW]
    table = _with_axes(table, raw, source, metric_names, step_key, rank_key)
    # from here `table` alone holds the columns, so the sort by rank can let each one go
    # as its sorted copy is made (`rank_sort.by_rank`)
    del raw, numeric
    # 4. Account for rows that cannot be used.
    has_rank = rank_key is not None
    table = _usable_rows(table, source, has_rank, in_rank_order)
    return _checked_frame(table, source, metric_names, metric_keys, has_rank)


def _own_names(
    raw: pl.DataFrame, source: SourceInfo, step_key: str | None, rank_key: str | None
) -> pl.DataFrame:
    """`raw` with its line numbers, and no logged key under a name finalize works with."""
    if ROW not in raw.columns:
        raw = raw.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(pl.Int64))
    # a logged key spelled like a column finalize works with would overwrite it (a TB tag
    # `_back` was a ColumnNotFoundError): it is read under another name, and said so
    clash = [c for c in raw.columns if c in _WORKING and c not in (step_key, rank_key)]
    if clash:
        raw = raw.rename({c: f"{c} (as logged)" for c in clash})
        source.notes.append(
            f"key(s) {', '.join(map(repr, clash))} read as '<key> (as logged)': stab uses "
            "those names for its own bookkeeping"
        )
    return raw


def _numeric_columns(
    raw: pl.DataFrame, step_key: str | None, rank_key: str | None
) -> tuple[pl.DataFrame, list[str]]:
    """The line number and every column but the axes as Float64, and the keys that hold
    a number somewhere (the metric keys)."""
    # the step and rank columns, and any other spelling of them, are axes, not metrics
    axis_names = set(aliases.STEP_KEYS) | set(aliases.RANK_KEYS) | CLOCK_KEYS
    skip_cols = {ROW, step_key, rank_key} | {
        c for c in raw.columns if aliases.normalise_key(c) in axis_names
    }
    exprs: dict[str, pl.Expr] = {}
    for name, dtype in raw.schema.items():  # loop over columns, not rows
        if name in skip_cols:
            continue
        expr = _to_float(name, dtype)
        if expr is not None:
            exprs[name] = expr
    if not exprs:
        return raw.select(ROW), []
    numeric = raw.select([ROW, *[e.alias(n) for n, e in exprs.items()]])
    counts = numeric.select([pl.col(n).is_not_null().sum().alias(n) for n in exprs])
    return numeric, [n for n in exprs if counts[n][0] > 0]


def _metric_columns(
    metric_keys: list[str], overrides: dict[str, str], source: SourceInfo, per_rank: bool
) -> list[pl.Expr]:
    """Each metric key under its canonical name (`loss`, `grad_norm`...) when it has one.

    Overrides must name a key that exists; the metrics found and how are noted in `source`.
    """
    for canonical, raw_key in overrides.items():
        if raw_key not in metric_keys:
            shown = ", ".join(sorted(metric_keys)[:20]) or "none"
            raise StabUsageError(
                f"--metric {canonical}={raw_key}: no numeric key {raw_key!r} in {source.path} "
                f"(numeric keys: {shown})"
            )
    resolution = aliases.resolve(metric_keys, overrides, per_rank=per_rank)
    mapping = resolution.mapping
    source.notes.extend(resolution.notes)
    source.metric_origin = dict(sorted(resolution.origin.items()))
    rename = {raw_key: canonical for canonical, raw_key in mapping.items()}
    out_cols: list[pl.Expr] = []
    used_names: set[str] = set()
    for key in metric_keys:
        name = rename.get(key, key)
        if name in used_names or (key not in rename and name in mapping):
            continue  # a raw key spelled like a canonical one that another key already fills
        used_names.add(name)
        out_cols.append(pl.col(key).alias(name))
    source.metrics = {c: r for c, r in sorted(mapping.items())}
    return out_cols


def _with_axes(
    table: pl.DataFrame,
    raw: pl.DataFrame,
    source: SourceInfo,
    metric_names: list[str],
    step_key: str | None,
    rank_key: str | None,
) -> pl.DataFrame:
    """`table` with `_has_metric`, `step` (and `_step_fault` when some step is unusable)
    and, per rank, `rank`."""
    step_series, step_fault = (
        _step_column(raw, step_key, source.path) if step_key is not None else (None, None)
    )
    has_metric = (
        pl.any_horizontal([pl.col(c).is_not_null() for c in metric_names])
        if metric_names
        else pl.lit(False)
    )
    table = table.with_columns(has_metric.alias("_has_metric"))
    if step_series is not None:
        table = table.with_columns(step_series.alias("step"))
        if step_fault is not None:
            table = table.with_columns(step_fault.alias("_step_fault"))
    else:
        # no step key at all: the metric records are numbered in file order
        source.warnings.append(
            "no step key found: steps are the order of metric records (0, 1, 2, ...)"
        )
        table = table.with_columns(
            (pl.col("_has_metric").cast(pl.Int64).cum_sum() - 1).alias("step")
        )
    if rank_key is not None:
        table = table.with_columns(_rank_column(raw, rank_key, source.path))
    return table


def _usable_rows(
    table: pl.DataFrame, source: SourceInfo, has_rank: bool, in_rank_order: bool
) -> pl.DataFrame:
    """The rows with a metric, a usable step and (per rank) a usable rank; the others
    rejected in `source`, with the working columns dropped."""
    # Most logs have none to reject, and each filter below copies every row: one pass asks
    # first
    if _all_usable(table, has_rank):
        return table.drop("_has_metric", *(["_step_fault"] if "_step_fault" in table else []))
    no_metric = table.filter(~pl.col("_has_metric"))
    _reject_rows(source, no_metric, "not a metric record (no numeric metric value)", in_rank_order)
    table = table.filter(pl.col("_has_metric"))
    if "_step_fault" in table.columns:
        for fault, reason in _STEP_FAULTS.items():
            faulty = table.filter(pl.col("_step_fault") == fault)
            _reject_rows(source, faulty, reason, in_rank_order)
        table = table.filter(pl.col("_step_fault").is_null()).drop("_step_fault")
    no_step = table.filter(pl.col("step").is_null())
    _reject_rows(source, no_step, "metric record without a usable step", in_rank_order)
    table = table.filter(pl.col("step").is_not_null()).drop("_has_metric")
    return _with_usable_rank(table, source, in_rank_order) if has_rank else table


def _with_usable_rank(table: pl.DataFrame, source: SourceInfo, in_rank_order: bool) -> pl.DataFrame:
    no_rank = table.filter(pl.col("rank").is_null())
    _reject_rows(source, no_rank, "per-rank record without a usable rank", in_rank_order)
    table = table.filter(pl.col("rank").is_not_null())
    # a rank numbers a process: below 0 or past any cluster it is damage, not a rank
    odd_rank = ~pl.col("rank").is_between(0, _RANK_MAX)
    _reject_rows(
        source,
        table.filter(odd_rank),
        f"per-rank record whose rank is no process index (below 0 or over {_RANK_MAX})",
        in_rank_order,
    )
    return table.filter(~odd_rank)


def _taken(frame: pl.DataFrame) -> pl.DataFrame:
    """A frame of `frame`'s columns, `frame` left empty in place: whoever else names it
    holds nothing any more (a clone shares the columns' buffers, it copies none)."""
    taken = frame.clone()
    for name in frame.columns:  # loop over columns, not rows
        frame.drop_in_place(name)
    return taken


def _rank_column(raw: pl.DataFrame, rank_key: str, path: str) -> pl.Series:
    """The rank as Int64 (null where a value is no rank): the digits of a text rank."""
    rank = raw[rank_key]
    _require_scalar(rank, "rank", path)
    if rank.dtype in (pl.String, pl.Utf8):
        rank = rank.str.extract(r"(\d+)", 1)
    return rank.cast(pl.Int64, strict=False).alias("rank")


def _all_usable(table: pl.DataFrame, has_rank: bool) -> bool:
    """Whether every row has a metric, a usable step and (per-rank) a usable rank."""
    usable = pl.col("_has_metric") & pl.col("step").is_not_null()
    if "_step_fault" in table.columns:
        usable &= pl.col("_step_fault").is_null()
    if has_rank:
        usable &= pl.col("rank").is_not_null() & pl.col("rank").is_between(0, _RANK_MAX)
    return bool(table.select(usable.all()).item())


def _checked_frame(
    table: pl.DataFrame,
    source: SourceInfo,
    metric_names: list[str],
    metric_keys: list[str],
    has_rank: bool,
) -> RunData:
    """The usable rows: refused when there are none, a warning when there is no loss."""
    if table.height == 0:
        first = source.rejections[0] if source.rejections else None
        raise StabInputError(
            source.path,
            "no usable metric rows (nothing with a step and a number)"
            + (f"; first rejected: row {first.line}, {first.reason}" if first else ""),
        )
    if "loss" not in metric_names:
        source.warnings.append(
            "no loss metric recognised; use --metric loss=KEY "
            f"(numeric keys: {', '.join(sorted(metric_keys)[:12])})"
        )

    return _merge_and_resume(table, source, metric_names, has_rank=has_rank)


def _reject_rows(
    source: SourceInfo, rows: pl.DataFrame, reason: str, in_rank_order: bool = False
) -> None:
    if rows.height == 0:
        return
    # rows sorted by rank: the first in the file are the lowest lines (a reader that sorts
    # numbers its rows by line)
    lines = rows[ROW].sort() if in_rank_order else rows[ROW]
    for line in lines.head(5).to_list():
        source.reject(line, reason)
    # the rest are counted without keeping their line numbers
    extra = rows.height - min(rows.height, 5)
    source.rows_rejected += extra
    source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + extra


def _merge_and_resume(
    table: pl.DataFrame, source: SourceInfo, metric_names: list[str], *, has_rank: bool
) -> RunData:
    """Restarts, then one row per (rank, step) where the resumed trajectory wins (spec 0)."""
    keys = ["rank"] if has_rank else []

    def per_rank(expr: pl.Expr) -> pl.Expr:
        return expr.over(keys) if keys else expr

    # Most logs never step back and never log a step twice: one vectorised check proves
    # it, and then there is no restart to find and nothing to merge. A stable sort by rank
    # alone keeps each rank's rows in file order, so the check runs on the sorted rows with
    # no window per rank, and when it holds the order is already (rank, step)
    if has_rank:
        table = by_rank(table)
    if _steps_only_forward(table, keys):
        source.rows_used = table.height
        frame = table.select(["step", *keys, *[pl.col(c).cast(pl.Float64) for c in metric_names]])
        no_rewrite = pl.DataFrame(
            schema={**{k: pl.Int64 for k in keys}, SEGMENT: pl.Int64, "step": pl.Int64}
            | {c: pl.Float64 for c in metric_names}
        )
        run = _described(frame, source, metric_names, has_rank, no_rewrite)
        run.lines = _lines(table, source, keys)
        return run

    # rows sorted by rank already sort by (rank, row) as the rows in file order do: a
    # rank's rows keep their file order, and row numbers are unique
    table = table.sort([*keys, ROW])
    prev_max = per_rank(pl.col("step").cum_max().shift(1))
    table = table.with_columns(prev_max.alias("_prev_max")).with_columns(
        # a restart is where the step drops below the row before it
        (pl.col("step") < per_rank(pl.col("step").shift(1))).fill_null(False).alias("_back")
    )
    table = table.with_columns(per_rank(pl.col("_back").cast(pl.Int64).cum_sum()).alias(SEGMENT))
    restart_rows = table.filter(pl.col("_back"))
    source.restarts = [
        Restart(
            at_row=int(r[ROW]),
            resumed_from_step=int(r["step"]),
            last_step_before=int(r["_prev_max"]),
            rank=int(r["rank"]) if has_rank else None,
        )
        for r in restart_rows.iter_rows(named=True)  # one per restart (and rank), a handful
    ]
    table = table.drop("_back", "_prev_max")

    # sparse rows of one step (train line + eval line) become one row; NaN is a
    # value, so `drop_nulls().last()` keeps a logged NaN over an absent value
    group = [*keys, SEGMENT, "step"]
    merged = table.group_by(group, maintain_order=True).agg(
        [pl.col(ROW).min(), pl.col(ROW).count().alias("_n_rows")]
        + [pl.col(c).drop_nulls().last().alias(c) for c in metric_names]
    )
    latest = pl.col(SEGMENT) == pl.col(SEGMENT).max().over([*keys, "step"])
    kept = merged.filter(latest)
    abandoned = merged.filter(~latest)
    if abandoned.height:
        source.rows_rewritten += int(abandoned["_n_rows"].sum())
    source.rows_used = int(kept["_n_rows"].sum())
    kept = kept.sort([*keys, "step"])
    frame = kept.select(["step", *keys, *[pl.col(c).cast(pl.Float64) for c in metric_names]])
    abandoned = abandoned.sort([*keys, SEGMENT, "step"]).drop("_n_rows", ROW)
    run = _described(frame, source, metric_names, has_rank, abandoned)
    run.lines = _lines(kept, source, keys)
    return run


def _lines(table: pl.DataFrame, source: SourceInfo, keys: list[str]) -> pl.DataFrame | None:
    """The file line of each kept row (a merged step: its first line), for a line-based log."""
    if source.format not in LINE_FORMATS or source.path.lower().endswith(_BINARY_TABLES):
        return None
    return table.select(["step", *keys, pl.col(ROW).alias(SOURCE_LINE)])


def _steps_only_forward(ordered: pl.DataFrame, keys: list[str]) -> bool:
    """Whether every rank's steps strictly increase in file order; `ordered` holds each
    rank's rows together, in file order (a stable sort by `keys`).

    Compared a chunk of rows at a time: whole, each difference was one more column of
    the log held at once. The columns have no nulls here (rows without a step or a rank
    were rejected), so numpy reads them in place.
    """
    columns = [ordered[name].to_numpy() for name in ("step", ROW, *keys)]
    step, row, ranks = columns[0], columns[1], columns[2:]
    for first in range(0, ordered.height - 1, _CHECK_ROWS):  # loop over chunks, not rows
        rows = slice(first, min(ordered.height, first + _CHECK_ROWS + 1))
        forward = _rises(step[rows]) & _rises(row[rows])
        for rank in ranks:  # a rank's first row follows another rank's rows: not a step back
            part = rank[rows]
            forward |= part[1:] != part[:-1]
        if not forward.all():
            return False
    return True


_CHECK_ROWS = 1 << 20


def _rises(values: np.ndarray) -> np.ndarray:
    return values[1:] > values[:-1]


def _described(
    frame: pl.DataFrame,
    source: SourceInfo,
    metric_names: list[str],
    has_rank: bool,
    abandoned: pl.DataFrame,
) -> RunData:
    """The canonical frame with its steps, ranks and (from a loss scale) dtype said."""
    # polars types min()/max() as any scalar; "step" is an integer column
    source.first_step = int(cast(int, frame["step"].min()))
    source.last_step = int(cast(int, frame["step"].max()))
    if has_rank:
        source.ranks = int(frame["rank"].n_unique())
    # only fp16 training applies a loss scale; a scale of 1 throughout is what bf16 and fp32
    # runs print too (Megatron does), so it leaves the dtype unknown rather than guessed
    if (
        source.dtype is None
        and "loss_scale" in metric_names
        and frame.select(
            (pl.col("loss_scale").is_finite() & (pl.col("loss_scale") != 1.0)).any()
        ).item()
    ):
        source.dtype = "fp16"
        source.dtype_origin = "inferred: a loss scale other than 1 (only fp16 training applies one)"
    return RunData(frame=frame, source=source, abandoned=abandoned)


def from_wide(
    frame: pl.DataFrame, source: SourceInfo, *, overrides: dict[str, str] | None = None
) -> RunData:
    """A frame a user built in Python (`analyze(frame)`): `step` plus metric columns."""
    step_key = aliases.find_key(frame.columns, aliases.STEP_KEYS)
    rank_key = aliases.find_key(frame.columns, aliases.RANK_KEYS)
    return finalize(frame, source, step_key=step_key, rank_key=rank_key, overrides=overrides)
