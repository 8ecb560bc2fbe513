"""Per-step cohort statistics over the long per-rank frame, and deviation runs.

The machinery behind `ranks.find_rank_outliers`, kept apart so the public
module reads as the rule. Everything is columnar over the whole long frame
(rank, step, value): two polars group-bys by step (median, then MAD), the
per-step numbers gathered back to the rows through a lookup table, one
division. No Python loop touches a rank or a step, so the cost is linear in
rows (measured: user CPU x4.3 for x4 rows, benchmarks/bench_ranks.py). Only
rows that deviate (few, in a healthy run) are looked at further, still as
frames.

Robust z of rank r at step t:

    z = (x[r,t] - median_t) / sigma_t
    sigma_t = max(1.4826 * MAD_t,                   the cohort's spread at t
                  rolling median of that over ~51 steps,  so one tight step is not a hair trigger
                  rank_rel_floor * |median_t|,       identical all-reduced values: MAD = 0
                  rank_rel_floor * typical |median|) a metric sitting at 0

A cohort needs 3 finite values for a median to outvote one bad rank; steps
with fewer are not judged by z (2-rank runs go through `rank_pair`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import polars as pl

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample times this estimates its sigma
# a rank stride is only used to align steps when ranks mostly log at different steps
MISALIGNED_FRACTION = 0.5


@dataclass
class Cohort:
    """A metric's rows with their cohort statistics.

    `rows`: rank, step, t (the step the cohort is taken at), x, med, sigma, n,
    n_fin, hi, z, i (row index in (rank, step) order). `steps`: one row per t
    with med, mad, sigma, n, n_fin, hi (`step_totals` gives the sums).
    """

    rows: pl.DataFrame
    steps: pl.DataFrame
    column: str
    stride: int | None  # steps were bucketed by this stride to align ranks


def long_rows(frame: pl.DataFrame, column: str, *, invert: bool = False) -> pl.DataFrame:
    """rank, step, x for the rows where `column` was logged, sorted by (rank, step)."""
    x = pl.col(column).cast(pl.Float64)
    if invert:  # a time per step becomes a rate, so "low" means "slow" for both
        x = 1.0 / x
    rows = (
        frame.lazy()
        .filter(pl.col(column).is_not_null())
        .select(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), x.alias("x"))
        .collect()
    )
    # `finalize` already sorts by (rank, step): checking is one pass, sorting is several
    ordered = rows.select(
        ((pl.col("rank").diff() > 0) | ((pl.col("rank").diff() == 0) & (pl.col("step").diff() > 0)))
        .fill_null(True)
        .all()
    ).item()
    return rows if ordered else rows.sort(["rank", "step"])


def _stride(rows: pl.DataFrame) -> int | None:
    """The typical step interval at which one rank logs (median positive difference)."""
    same_rank = pl.col("rank") == pl.col("rank").shift(1)
    diffs = rows.select(
        pl.when(same_rank).then(pl.col("step") - pl.col("step").shift(1)).alias("d")
    ).filter(pl.col("d") > 0)
    if diffs.height == 0:
        return None
    return int(cast(float, diffs["d"].median()))  # polars types a median as any scalar


def _step_stats(by_step: pl.DataFrame, *, distinct_ranks: bool) -> pl.DataFrame:
    """Per cohort step t: median and max of the finite values; ranks reporting; finite count.

    `by_step` is `step_major(rows)`: every statistic here is one of the values' set, not
    of their order, and polars groups rows already in t order by slices, several times
    faster than by hashing t.
    """
    fin = pl.col("x").is_finite()
    # n counts ranks, not rows, when a stride bucket may hold two rows of one rank
    count = pl.col("rank").n_unique() if distinct_ranks else pl.len()
    return (
        by_step.group_by("t")
        .agg(
            pl.col("x").filter(fin).median().alias("med"),
            pl.col("x").filter(fin).max().alias("hi"),
            count.cast(pl.Int64).alias("n"),
            fin.sum().cast(pl.Int64).alias("n_fin"),
        )
        .sort("t")
    )


def step_major(rows: pl.DataFrame, *, with_rank: bool = False) -> pl.DataFrame:
    """t and x (and rank, `with_rank`) of `rows` ((rank, step) order) in t order, t
    flagged sorted.

    When every rank logs the same steps (the usual case) the rows are a ranks x
    steps matrix and t order is its transpose, a blocked copy; else a sort by t.
    """
    names = ["rank", "t", "x"] if with_rank else ["t", "x"]
    rank = rows["rank"].to_numpy()
    n_ranks = int(np.count_nonzero(np.diff(rank))) + 1 if rank.size else 0
    per_rank = rank.size // n_ranks if n_ranks else 0
    if n_ranks > 1 and per_rank * n_ranks == rank.size:
        t = rows["t"].to_numpy().reshape(n_ranks, per_rank)
        firsts = rank[::per_rank]
        lockstep = (
            bool((firsts == rank[per_rank - 1 :: per_rank]).all())
            and bool((t == t[0]).all())
            and bool((np.diff(t[0]) >= 0).all())
        )
        if lockstep:
            x = rows["x"].to_numpy().reshape(n_ranks, per_rank)
            columns = {"t": np.repeat(t[0], n_ranks), "x": np.ascontiguousarray(x.T).ravel()}
            if with_rank:
                columns["rank"] = np.tile(firsts, per_rank)
            return pl.DataFrame(columns).select(names).with_columns(pl.col("t").set_sorted())
    return rows.select(names).sort("t").with_columns(pl.col("t").set_sorted())


def step_totals(rows: pl.DataFrame) -> pl.DataFrame:
    """t and the sum of the finite values at t, for the few cohorts that need it (a rank
    found off the cohort), summed in the rows' (rank, step) order."""
    fin = pl.col("x").is_finite()
    return rows.group_by("t").agg(pl.col("x").filter(fin).sum().alias("total")).sort("t")


def _align(rows: pl.DataFrame, steps: pl.DataFrame, notes: list[str]):
    """Re-key the cohort by stride buckets when ranks mostly log at different steps."""
    n_ranks = rows["rank"].n_unique()
    typical = cast("float | None", steps["n"].median())  # ranks per step, None if no steps
    if n_ranks < 2 or typical is None or typical >= MISALIGNED_FRACTION * n_ranks:
        return rows, steps, None
    stride = _stride(rows)
    if stride is None or stride <= 1:
        notes.append(
            f"ranks log at different steps (typically {typical:.0f} of {n_ranks} per step) "
            "and no common stride aligns them: steps with fewer than 3 ranks are not judged"
        )
        return rows, steps, None
    notes.append(
        f"ranks log at different steps (typically {typical:.0f} of {n_ranks} per step): "
        f"compared within buckets of {stride} steps"
    )
    rows = rows.with_columns(((pl.col("step") // stride) * stride).alias("t"))
    return rows, _step_stats(step_major(rows, with_rank=True), distinct_ranks=True), stride


LOOKUP_MAX_SPAN = 1 << 26  # a step span up to this size is indexed by a lookup table (<= 256 MiB)


def positions(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of each key in the sorted unique `table` (every key is in it).

    Steps are integers in a bounded span, so a lookup table is one linear
    gather; a binary search per row is kept for absurd spans only.
    """
    first = int(table[0])
    span = int(table[-1]) - first + 1
    if span > LOOKUP_MAX_SPAN:
        return np.searchsorted(table, keys)
    lookup = np.zeros(span, dtype=np.int32)
    lookup[table - first] = np.arange(table.size, dtype=np.int32)
    return lookup[keys - first]


def build_cohort(
    frame: pl.DataFrame,
    column: str,
    rel_floor: float,
    notes: list[str],
    *,
    pool_points: int,
    invert: bool = False,
) -> Cohort:
    """Median, MAD, sigma and each row's robust z, per cohort step (module doc).

    Two group-bys (median, then MAD); the per-step numbers go back to the rows
    by position (a lookup table over the sorted step table), not by join.
    """
    rows = long_rows(frame, column, invert=invert).with_columns(pl.col("step").alias("t"))
    by_step = step_major(rows)
    steps = _step_stats(by_step, distinct_ranks=False)
    rows, steps, stride = _align(rows, steps, notes)
    table = steps["t"].to_numpy()
    med = steps["med"].fill_null(np.nan).to_numpy()
    # the deviations are taken in t order too, so their medians group by slices
    if stride is not None:  # t is now the stride bucket
        by_step = step_major(rows)
    t_sorted = by_step["t"]
    dev = np.abs(by_step["x"].to_numpy() - med[positions(table, t_sorted.to_numpy())])
    del by_step
    mad = (
        pl.DataFrame({"t": t_sorted, "dev": dev})
        .filter(pl.col("dev").is_finite())
        .with_columns(pl.col("t").set_sorted())
        .group_by("t")
        .agg(pl.col("dev").median().alias("mad"))
    )
    del dev, t_sorted
    pos = positions(table, rows["t"].to_numpy())
    med_row = med[pos]
    steps = steps.join(mad, on="t", how="left").sort("t")
    typical = steps["med"].abs().median()
    abs_floor = rel_floor * (float(typical) if typical else 1.0)
    abs_floor = abs_floor if abs_floor > 0 else 1e-12
    raw_sigma = pl.col("mad") * MAD_TO_SIGMA
    steps = steps.with_columns(
        pl.max_horizontal(
            raw_sigma,
            raw_sigma.rolling_median(pool_points, center=True, min_samples=1),
            pl.col("med").abs() * rel_floor,
            pl.lit(abs_floor),
        ).alias("sigma")
    )
    sigma = steps["sigma"].fill_null(np.nan).to_numpy()
    rows = (
        rows.with_row_index("i")
        .with_columns(
            pl.Series("med", med_row),
            pl.Series("sigma", sigma[pos]),
            pl.Series("n", steps["n"].to_numpy()[pos]),
            pl.Series("n_fin", steps["n_fin"].to_numpy()[pos]),
            pl.Series("hi", steps["hi"].fill_null(np.nan).to_numpy()[pos]),
        )
        .with_columns(((pl.col("x") - pl.col("med")) / pl.col("sigma")).alias("z"))
    )
    return Cohort(rows=rows, steps=steps, column=column, stride=stride)


def flag_runs(flagged: pl.DataFrame, flag: str, min_len: int, max_gap: int) -> pl.DataFrame:
    """Per rank, the first run of at least `min_len` logged rows where `flag` holds.

    A run tolerates `max_gap` unflagged rows inside it: one noisy step can no
    more hide an outlier than make one. `flagged` holds only candidate rows
    (with their row index `i`), so this costs nothing on a healthy run: rows
    of a rank are neighbours when their indexes are, since the full frame is
    in (rank, step) order.
    """
    part = flagged.filter(pl.col(flag))
    if part.height == 0:
        return (
            part.select("rank")
            .clear()
            .with_columns(pl.lit(0, pl.Int64).alias("start"), pl.lit(0, pl.Int64).alias("length"))
        )
    gap = pl.col("i").cast(pl.Int64) - pl.col("i").shift(1).cast(pl.Int64) - 1
    breaks = (gap > max_gap) | (pl.col("rank") != pl.col("rank").shift(1))
    runs = (
        part.with_columns(breaks.fill_null(True).cum_sum().alias("run"))
        .group_by("run")
        .agg(pl.col("rank").first(), pl.col("step").min().alias("start"), pl.len().alias("length"))
        .filter(pl.col("length") >= min_len)
    )
    return runs.group_by("rank").agg(pl.col("start").min(), pl.col("length").max()).sort("rank")


def rank_bounds(rows: pl.DataFrame, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First row index and one past the last of each rank (rows are in (rank, step) order)."""
    column = rows["rank"].to_numpy()
    return (
        np.searchsorted(column, ranks, side="left"),
        np.searchsorted(column, ranks, side="right"),
    )


def steps_back(
    rows: pl.DataFrame, last_i: np.ndarray, ranks: np.ndarray, need: int
) -> list[tuple[int | None, int]]:
    """Per rank: the first step back in line after its last deviating row `last_i`, and how
    many of its rows after that row were compared with a cohort (`change.recovery`).

    Every row after `last_i` is back in line, but a row only counts when the
    rank's value and its z are finite (a cohort that is all NaN judges
    nothing); fewer than `need` such rows (or none: still out at the last
    step) is not a recovery. A loop over the outlier ranks only.
    """
    if len(last_i) == 0:
        return []
    _, ends = rank_bounds(rows, np.asarray(ranks))
    out: list[tuple[int | None, int]] = []
    for first, end in zip(np.asarray(last_i) + 1, ends, strict=True):
        part = rows.slice(int(first), int(max(end - first, 0)))
        compared = np.flatnonzero(
            np.isfinite(part["x"].to_numpy()) & np.isfinite(part["z"].fill_null(np.nan).to_numpy())
        )
        back = int(part["step"][int(compared[0])]) if compared.size >= max(1, need) else None
        out.append((back, int(compared.size)))
    return out


def cohort_steps_after(steps: np.ndarray, after: np.ndarray, upto: float) -> np.ndarray:
    """How many cohort steps fall in (after, upto] for each value of `after` (sorted `steps`)."""
    hi = np.searchsorted(steps, upto, side="right")
    lo = np.searchsorted(steps, after, side="right")
    return np.maximum(hi - lo, 0)
