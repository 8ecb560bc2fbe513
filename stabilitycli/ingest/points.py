"""Per-key metric series (MLflow, TensorBoard) turned into the raw table `finalize` wants.

Trackers store one series per metric key: `(key, step, value)` points, each key
written on its own. JSONL logs, by contrast, hold one line per step with every
metric. To share `finalize` (aliases, restarts, sparse-row merging, accounting)
the points are pivoted into one row per step, with the metric keys as columns.

A restart (step going backwards) is decided per key and then carried across
keys in time order. Deciding it on the interleaved rows would turn an
`eval_loss` logged late at an earlier step into a fake restart; deciding it per
key only would split a metric first logged after a resume from its siblings.

One raw row is one `(rank, step)` of one trajectory, like a JSONL line; a point
re-logged at the same step becomes a second row, and `finalize` keeps the later
value.
"""

from __future__ import annotations

import re

import polars as pl

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import ROW, RunData, finalize
from stabilitycli.ingest.options import ReadOptions

# internal index names that no metric key can collide with
STEP_COL = "__step"
RANK_COL = "__rank"
_SEGMENT = "__seg"
_DUP = "__dup"

# `rank-3`, `rank_3`, `rank3`, `worker-3`, `gpu_3`, `train-rank-3` ...
RANK_NAME = re.compile(
    r"(?:^|[^a-z])(?:rank|worker|proc|process|gpu|device)[-_ ]?([0-9]{1,9})$", re.IGNORECASE
)


def rank_from_name(name: str, pattern: str | None = None) -> int | None:
    """The rank a run/folder name encodes (`--rank-pattern` regex first), or None."""
    if pattern:
        match = re.search(pattern, name)
        # ASCII digits only: "²".isdigit() is true and int() refuses it
        if match and match.groups() and re.fullmatch(r"[0-9]{1,18}", match.group(1) or ""):
            return int(match.group(1))
        return None
    match = RANK_NAME.search(name.strip())
    return int(match.group(1)) if match else None


def reject_many(source: SourceInfo, lines: list[int], reason: str, keep_first: int = 5) -> None:
    """Count every rejected line; name only the first few (like `finalize` does)."""
    for line in lines[:keep_first]:
        source.reject(line, reason)
    extra = max(0, len(lines) - keep_first)
    if extra:
        source.rows_rejected += extra
        source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + extra


def points_to_run(
    points: pl.DataFrame, source: SourceInfo, options: ReadOptions, *, per_rank: bool
) -> RunData:
    """Pivot long points into the canonical frame.

    `points` columns: `key` (String), `step` (Int64), `value` (Float64),
    `_order` (Int64, the order the points were written in: file order, or
    timestamp order across keys) and, when `per_rank`, `rank` (Int64).
    """
    if points.height == 0:
        raise StabInputError(source.path, "no metric points to read (the run logged no metrics)")
    # index columns get names no metric key uses, so a key called "step" stays a column
    rename = {"step": STEP_COL, "rank": RANK_COL} if per_rank else {"step": STEP_COL}
    points = points.rename(rename)
    # a key spelled like one of those columns would clash in the pivot: read under another name
    reserved = [STEP_COL, RANK_COL, _SEGMENT, _DUP, ROW]
    clash = points.filter(pl.col("key").is_in(reserved))["key"].unique().sort().to_list()
    if clash:
        points = points.with_columns(
            pl.when(pl.col("key").is_in(clash))
            .then(pl.col("key") + " (as logged)")
            .otherwise(pl.col("key"))
            .alias("key")
        )
        source.notes.append(
            f"key(s) {', '.join(map(repr, clash))} read as '<key> (as logged)': stab uses "
            "those names for its own bookkeeping"
        )
    keys = [RANK_COL] if per_rank else []
    by_key = [*keys, "key"]
    points = points.sort([*keys, "_order"])
    # 1. restarts within each key's own series, carried forward in time across keys
    went_back = (pl.col(STEP_COL) < pl.col(STEP_COL).shift(1)).fill_null(False).over(by_key)
    points = points.with_columns(went_back.cast(pl.Int64).alias("_back"))
    points = points.with_columns(pl.col("_back").cum_sum().over(by_key).alias("_kseg"))
    seg = pl.col("_kseg").cum_max()
    points = points.with_columns((seg.over(keys) if keys else seg).alias(_SEGMENT))
    # 2. a point re-logged at the same step of the same trajectory gets its own row:
    # number the repeats by position after a sort (a window per step is 30x slower)
    index = [*keys, _SEGMENT, STEP_COL]
    points = points.sort([*index, "key", "_order"]).with_row_index("_pos")
    repeat = pl.all_horizontal(pl.col(c) == pl.col(c).shift(1) for c in [*index, "key"]).fill_null(
        False
    )
    first_pos = pl.when(~repeat).then(pl.col("_pos")).forward_fill()
    points = points.with_columns((pl.col("_pos") - first_pos).cast(pl.Int64).alias(_DUP))
    names = points["key"].unique(maintain_order=True).to_list()
    if len(names) == 1:  # one metric: nothing to pivot
        wide = points.select([*index, _DUP, pl.col("value").alias(names[0])])
    else:
        wide = points.pivot(on="key", index=[*index, _DUP], values="value")
    wide = wide.sort([*index, _DUP]).drop(_SEGMENT, _DUP)
    wide = wide.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(pl.Int64))
    return finalize(
        wide,
        source,
        step_key=STEP_COL,
        rank_key=RANK_COL if per_rank else None,
        overrides=options.metric_overrides,
    )
