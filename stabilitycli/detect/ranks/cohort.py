"""Per-step cohort statistics over the long per-rank frame, and deviation runs.

The machinery behind `ranks.find_rank_outliers`, kept apart so the public
module reads as the rule. Everything is columnar over the whole long frame
(rank, step, value): two polars group-bys by step (median, then MAD), the
per-step numbers gathered back to the rows through a lookup table, one
division. Ranks that log in lockstep are a ranks x steps matrix instead: a
step's median and MAD are taken within its row of values (a sort), and its
numbers broadcast over the ranks (`Cohort.blocks`), the same bits with no
gather. No Python loop touches a rank or a step, so the cost is linear in
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

from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any, cast

import numpy as np
import polars as pl

from stabilitycli.core.records import dataclass

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample times this estimates its sigma
# a rank stride is only used to align steps when ranks mostly log at different steps
MISALIGNED_FRACTION = 0.5
# rows per piece where a whole-log temporary would otherwise be made (a 64-rank log has
# tens of millions of rows; a piece of this size is a few MB)
COHORT_CHUNK_ROWS = 1 << 20
# rows of up to this many values are sorted for their median, wider ones partitioned: numpy
# sorts a few dozen values with vector instructions, faster than `partition` and the maximum
# of its lower half, the same middle values (per 2**20 values: 1.5 ms against 4.2 at 64
# ranks, 1.6 against 2.7 at 256; 3.5 against 2.6 at 1,024)
SORT_MAX_RANKS = 256
STEP_STATS = ("med", "sigma", "n", "n_fin", "hi")  # a cohort step's numbers a row may need


# (ranks, steps) of a frame whose rows are a rising lockstep grid (`Cohort.frame_grid`)
FrameGrid = tuple[np.ndarray, np.ndarray]


@dataclass
class Cohort:
    """A metric's rows with their cohort statistics.

    `rows`: rank, step, t (the step the cohort is taken at) and x, in (rank,
    step) order, and pos (t's row in `steps`) unless the ranks log in lockstep
    (`per_rank` steps each), where row i's pos is i mod `per_rank`. `steps`:
    one row per t with med, hi, n, n_fin, mad, sigma, and total (`step_totals`) when
    the cohort was built `with_totals` from lockstep ranks (`totals` gives the sums
    either way). A row's robust z is not stored either: `part` and `take` work it
    out for the rows asked for (`arrays` and `blocks` too, as numpy, for a pass over
    every row), so a 64-rank log does not hold a Float64 z and an Int32 pos for
    every row (360 MB at 30M rows) while the check runs. The per-step numbers
    stay in `steps`; `flagged` and `with_stats` bring them, and the row index
    i, to the few rows that need them.
    """

    rows: pl.DataFrame
    steps: pl.DataFrame
    column: str
    stride: int | None  # steps were bucketed by this stride to align ranks
    per_rank: int | None = None  # lockstep: the steps each rank logs, pos = i mod this
    # the frame's every row, in its order, is a rising grid of these ranks and steps: given
    # to `build_cohort` for another metric of the frame, it skips telling the grid again
    frame_grid: FrameGrid | None = None

    def __post_init__(self) -> None:
        self._med = self.steps["med"].fill_null(np.nan).to_numpy()
        self._sigma = self.steps["sigma"].fill_null(np.nan).to_numpy()
        self._columns: dict[str, np.ndarray] = {}
        self._pattern: np.ndarray | None = None

    def part(self, start: int, stop: int) -> pl.DataFrame:
        """Rows start to stop (one past the last) with their z and pos."""
        index = np.arange(start, stop, dtype=np.int64)
        return self._with_z(self.rows.slice(start, stop - start), index)

    def array(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows start to stop of a column of `rows` as numpy: a view of the column when it
        is one chunk without nulls (the usual case), so a pass over the rows builds no frame."""
        whole = self._columns.get(name)
        if whole is None:
            series = self.rows[name]
            if series.n_chunks() > 1 or series.null_count():
                return series.slice(start, stop - start).to_numpy()
            whole = self._columns[name] = series.to_numpy()
        return whole[start:stop]

    def arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x, z and pos of rows start to stop: what `part` gives, as numpy and no frame."""
        x = self.array("x", start, stop)
        pos = self._positions(start, stop)
        return x, _robust_z(x, pos, self._med, self._sigma), pos

    def blocks(self, *, whole_ranks: bool = False) -> Iterator[Block]:
        """Every row once, a chunk of rows at a time, with its x and robust z (`Block`).

        Lockstep ranks come as whole ranks, a ranks x steps matrix each, so a step's
        numbers broadcast over the block's ranks where other logs gather them row by row;
        the z is the same subtraction and division of the same values, so the same bits.
        Other logs come as `row_chunks`, or as `rank_chunks` when `whole_ranks`.
        """
        grid = self._grid()
        if grid is not None:
            per_rank = grid.shape[1]
            ranks_per_block = max(1, COHORT_CHUNK_ROWS // per_rank)  # what `rank_chunks` cuts
            for first in range(0, grid.shape[0], ranks_per_block):
                x = grid[first : first + ranks_per_block]
                start = first * per_rank
                yield Block(start, start + x.size, x, None, self._grid_z)
            return
        chunks = rank_chunks(self.rows) if whole_ranks else row_chunks(self.rows.height)
        for start, stop in chunks:
            x = self.array("x", start, stop)
            yield Block(start, stop, x, self._positions(start, stop), self._rows_z)

    def _grid_z(self, x: np.ndarray, pos: None) -> np.ndarray:
        """The robust z of a ranks x steps block: a step's numbers broadcast over its ranks."""
        z = np.empty(x.shape)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            np.subtract(x, self._med, out=z)
            z /= self._sigma
        return z

    def _rows_z(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The robust z of a chunk of rows, each at its step `pos`."""
        return _robust_z(x, pos, self._med, self._sigma)

    def totals(self) -> pl.DataFrame:
        """t and the sum of the finite values at t (`step_totals`): the step table's, when
        its blocks of steps summed them on the way, else summed now."""
        if "total" in self.steps.columns:
            return self.steps.select("t", "total")
        return step_totals(self.rows)

    def last_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Each rank and the index of its last row (`last_rows`); for lockstep ranks every
        `per_rank`-th row, with no pass over the rows."""
        if self.per_rank is None:
            return last_rows(self.rows)
        last = np.arange(self.per_rank - 1, self.rows.height, self.per_rank, dtype=np.int64)
        return self.array("rank", 0, self.rows.height)[last], last

    def in_grid(self) -> bool:
        """Whether `blocks` gives ranks x steps matrices."""
        return self._grid() is not None

    def _grid(self) -> np.ndarray | None:
        """x as a ranks x steps matrix (a view of the column) when the ranks log in lockstep
        and a rank's rows fit in a chunk; else None."""
        if self.per_rank is None or not 0 < self.per_rank <= COHORT_CHUNK_ROWS:
            return None
        series = self.rows["x"]
        if series.n_chunks() > 1 or series.null_count():
            return None
        return self.array("x", 0, series.len()).reshape(-1, self.per_rank)

    def _positions(self, start: int, stop: int) -> np.ndarray:
        """pos of rows start to stop. Lockstep ranks repeat the same steps, so a range no
        longer than a chunk is a slice of one repeated pattern, with no division per row."""
        if self.per_rank is None:
            return self.array("pos", start, stop)
        period = max(1, self.per_rank)
        if stop - start > COHORT_CHUNK_ROWS or period > COHORT_CHUNK_ROWS:
            return (np.arange(start, stop, dtype=np.int64) % period).astype(np.int32)
        if self._pattern is None or self._pattern.size < period + COHORT_CHUNK_ROWS:
            repeats = -(-(period + COHORT_CHUNK_ROWS) // period)
            self._pattern = np.tile(np.arange(period, dtype=np.int32), repeats)
        offset = start % period
        return self._pattern[offset : offset + stop - start]

    def take(self, index: np.ndarray) -> pl.DataFrame:
        """The rows at `index` (row numbers) with their z and pos."""
        index = np.asarray(index, dtype=np.int64)
        return self._with_z(self.rows[index], index)

    def whole(self) -> pl.DataFrame:
        """Every row with its z and pos: a whole-log copy, for tests and small logs."""
        return self.part(0, self.rows.height)

    def _with_z(self, part: pl.DataFrame, index: np.ndarray) -> pl.DataFrame:
        if self.per_rank is None:
            pos = part["pos"].to_numpy()
            part = part.drop("pos")
        else:
            pos = (index % max(1, self.per_rank)).astype(np.int32)
        z = _robust_z(part["x"].to_numpy(), pos, self._med, self._sigma)
        return part.with_columns(pl.Series("z", z), pl.Series("pos", pos))

    def with_stats(self, part: pl.DataFrame, *names: str) -> pl.DataFrame:
        """`part` (rows of `part` or `take`, with pos) with the step statistics `names` of
        each row."""
        at = part["pos"].to_numpy()
        return part.with_columns(pl.Series(name, self.per_step(name)[at]) for name in names)

    def flagged(self, mask: np.ndarray) -> pl.DataFrame:
        """The rows where `mask` holds, with their row index i and their steps' statistics."""
        index = np.flatnonzero(mask)
        part = self.take(index).with_columns(pl.Series("i", index))
        return self.with_stats(part, *STEP_STATS)

    def per_step(self, what: str | pl.Expr) -> np.ndarray:
        """A column of `steps`, or an expression over them, one value per step: null (a
        step with no finite value) as NaN, or False for a test."""
        values = self.steps.select(pl.col(what) if isinstance(what, str) else what).to_series()
        if values.dtype == pl.Boolean:
            values = values.fill_null(False)
        elif values.dtype.is_float():
            values = values.fill_null(np.nan)
        return values.to_numpy()


class Block:
    """Rows start to stop of a cohort (`Cohort.blocks`) with their x and robust z.

    Lockstep ranks: x and z are (ranks, steps) matrices of whole ranks and `pos` is None,
    so a per-step array applies to them as it is (it broadcasts over the ranks). Other
    logs: x and z are flat and `pos` is each row's step. `at` hides the difference, and
    `flat` gives an array of the block's shape in row order. z is worked out when first
    asked for: a pass that finds nothing to look at in a block's x needs none.
    """

    __slots__ = ("_z", "_z_of", "pos", "start", "stop", "x")

    def __init__(
        self,
        start: int,
        stop: int,
        x: np.ndarray,
        pos: np.ndarray | None,
        z_of: Callable[[np.ndarray, Any], np.ndarray],
    ) -> None:
        self.start, self.stop, self.x, self.pos = start, stop, x, pos
        self._z_of = z_of
        self._z: np.ndarray | None = None

    @property
    def z(self) -> np.ndarray:
        """The block's robust z, in the block's shape (the block's own: a caller may write it)."""
        if self._z is None:
            self._z = self._z_of(self.x, self.pos)
        return self._z

    def at(self, per_step: np.ndarray) -> np.ndarray:
        """A per-step array (one value per row of `steps`) for the block's rows."""
        return per_step if self.pos is None else per_step[self.pos]

    @staticmethod
    def flat(values: np.ndarray) -> np.ndarray:
        """An array of the block's shape as one row-ordered column (a view)."""
        return values.reshape(-1)


def long_rows(
    frame: pl.DataFrame,
    column: str,
    *,
    invert: bool = False,
    frame_grid: FrameGrid | None = None,
) -> tuple[pl.DataFrame, tuple[np.ndarray, np.ndarray, np.ndarray] | None, bool]:
    """rank, step, t (the step) and x for the rows where `column` was logged, sorted by
    (rank, step); their `_rising_grid` (None when the ranks are not in lockstep); and
    whether they are every row of the frame in its order. `frame_grid`: the frame's rows
    are known to be a rising grid of these ranks and steps (`Cohort.frame_grid`)."""
    x = pl.col(column).cast(pl.Float64)
    if invert:  # a time per step becomes a rate, so "low" means "slow" for both
        x = 1.0 / x
    wanted = (pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64), x.alias("x"))
    every_row = frame[column].null_count() == 0
    if every_row:
        # every row logged it: the frame's own columns, not a filtered copy of them
        rows = frame.select(*wanted)
    else:
        rows = frame.lazy().filter(pl.col(column).is_not_null()).select(*wanted).collect()
    rows = rows.with_columns(pl.col("step").alias("t"))
    if every_row and frame_grid is not None:
        # the frame's rank and step columns, already told apart for another metric
        ranks, steps = frame_grid
        return rows, (ranks, steps, rows["x"].to_numpy().reshape(ranks.size, -1)), True
    # a rising grid is in (rank, step) order, and telling one costs fewer passes over the
    # rows than `_in_rank_step_order`, which a lockstep log (the usual one) then skips
    grid = _rising_grid(rows)
    # `finalize` already sorts by (rank, step): checking is one pass, sorting is several
    if grid is None and not _in_rank_step_order(rows):
        rows = rows.sort(["rank", "step"])
        return rows, _rising_grid(rows), False
    return rows, grid, every_row


def _in_rank_step_order(rows: pl.DataFrame) -> bool:
    """Whether (rank, step) rises strictly from row to row, a chunk of rows at a time."""
    rank = rows["rank"].to_numpy()
    step = rows["step"].to_numpy()
    for start in range(0, rank.size, COHORT_CHUNK_ROWS):
        # one row of overlap, so the pair across the chunk boundary is compared too
        stop = min(start + COHORT_CHUNK_ROWS + 1, rank.size)
        rank_change = np.diff(rank[start:stop])
        step_change = np.diff(step[start:stop])
        if not ((rank_change > 0) | ((rank_change == 0) & (step_change > 0))).all():
            return False
    return True


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
    grid = lockstep_grid(rows)
    if grid is not None:
        ranks, steps, x = grid
        n_ranks = ranks.size
        columns = {"t": np.repeat(steps, n_ranks), "x": np.ascontiguousarray(x.T).ravel()}
        if with_rank:
            columns["rank"] = np.tile(ranks, steps.size)
        return pl.DataFrame(columns).select(names).with_columns(pl.col("t").set_sorted())
    return rows.select(names).sort("t").with_columns(pl.col("t").set_sorted())


def lockstep_grid(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(ranks, steps, x as a ranks x steps matrix) when every rank of `rows` ((rank, step)
    order, two ranks or more) logs the same t in the same order; else None.

    The matrix is a view of the rows' x, not a copy.
    """
    rank = rows["rank"].to_numpy()
    n_ranks = int(np.count_nonzero(rank[1:] != rank[:-1])) + 1 if rank.size else 0
    per_rank = rank.size // n_ranks if n_ranks else 0
    if n_ranks < 2 or per_rank * n_ranks != rank.size:
        return None
    t = rows["t"].to_numpy().reshape(n_ranks, per_rank)
    firsts = rank[::per_rank]
    lockstep = (
        bool((firsts == rank[per_rank - 1 :: per_rank]).all())
        and bool((t == t[0]).all())
        and bool((np.diff(t[0]) >= 0).all())
    )
    if not lockstep:
        return None
    return firsts, t[0], rows["x"].to_numpy().reshape(n_ranks, per_rank)


def _rising_grid(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`lockstep_grid` when its steps rise strictly, so that a block of whole steps holds
    each step's every row and nothing else: the condition for taking steps a block at a
    time."""
    grid = lockstep_grid(rows)
    if grid is None:
        return None
    # rising ranks too: rows not yet known to be in (rank, step) order are then in it
    rising = bool((np.diff(grid[0]) > 0).all()) and bool((np.diff(grid[1]) > 0).all())
    return grid if rising else None


def step_totals(rows: pl.DataFrame) -> pl.DataFrame:
    """t and the sum of the finite values at t, for the few cohorts that need it (a rank
    found off the cohort), summed in the rows' (rank, step) order."""
    grid = _rising_grid(rows)
    if grid is None:
        return _totals(rows)
    # lockstep ranks: a block of steps at a time from the ranks x steps view, each step's
    # values still in rank order and grouped by hashing as above, so the sums are those
    # bits; one group-by over the whole log took seconds at 10M rows
    # the block in step order is what `_totals` sorts the rows into (its steps rise strictly),
    # so its segments are added directly: the same reduction over the same values
    ranks, steps, x = grid
    blocks = []
    for start, stop in step_blocks(steps.size, ranks.size):
        by_step = _by_step(x[:, start:stop])
        totals = _block_totals(by_step, bool(np.isfinite(by_step).all()))
        blocks.append(pl.DataFrame({"t": steps[start:stop], "total": totals}))
    return pl.concat(blocks)


def _block_totals(by_step: np.ndarray, finite: bool) -> np.ndarray:
    """The sum of each step's finite values in a block of steps (a row of ranks per step,
    in rank order; `finite`: every value is): `step_totals` of lockstep ranks, one
    reduction per step's segment."""
    values = by_step.ravel()
    if not finite:  # else the values are their finite values already
        values = np.where(np.isfinite(values), values, 0.0)
    starts = np.arange(by_step.shape[0], dtype=np.int64) * by_step.shape[1]
    return np.add.reduceat(values, starts)


def _totals(rows: pl.DataFrame) -> pl.DataFrame:
    """t and the sum of its finite values, each step's values added in the rows' order.

    Not a polars group-by sum: its threads add partial sums in an order that depends on
    the frame's size, so the same step summed in a block and in the whole log could differ
    in the last bit (CI caught it). A stable sort keeps each step's values in row order and
    numpy reduces each step's segment on its own.
    """
    steps = rows["t"].to_numpy()
    values = rows["x"].to_numpy()
    order = np.argsort(steps, kind="stable")
    steps = steps[order]
    finite_values = np.where(np.isfinite(values), values, 0.0)[order]
    if steps.size == 0:
        return pl.DataFrame({"t": steps, "total": finite_values.astype(np.float64)})
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
    totals = np.add.reduceat(finite_values.astype(np.float64), starts)
    return pl.DataFrame({"t": steps[starts], "total": totals})


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
    out = np.empty(keys.size, dtype=np.int32)
    # a chunk at a time: `keys - first` whole would be another 64-bit column of every row
    for start, stop in row_chunks(keys.size):
        np.take(lookup, keys[start:stop] - first, out=out[start:stop])
    return out


def build_cohort(
    frame: pl.DataFrame,
    column: str,
    rel_floor: float,
    notes: list[str],
    *,
    pool_points: int,
    invert: bool = False,
    with_totals: bool = False,
    frame_grid: FrameGrid | None = None,
) -> Cohort:
    """Median, MAD, sigma and each row's robust z, per cohort step (module doc).

    Two group-bys (median, then MAD); each row finds its step's numbers by
    position in the sorted step table, not by join.
    """
    rows, grid, every_row = long_rows(frame, column, invert=invert, frame_grid=frame_grid)
    stride = per_rank = None
    # the frame's own rows as a rising grid: a metric logged on every row has the same grid
    own_grid = (grid[0], grid[1]) if grid is not None and every_row else None
    if grid is not None:
        steps = _grid_step_stats(grid[1], grid[2], with_totals=with_totals)
        per_rank = int(grid[1].size)
    else:
        rows, steps, stride = _sorted_step_stats(rows, notes)
    del grid
    typical = cast("float | None", steps["med"].abs().median())  # a float column's median
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
    if per_rank is not None:
        # lockstep: the step table is the grid's steps, so a row's pos is its index mod them
        return Cohort(
            rows=rows,
            steps=steps,
            column=column,
            stride=stride,
            per_rank=per_rank,
            frame_grid=own_grid,
        )
    pos = positions(steps["t"].to_numpy(), rows["t"].to_numpy())
    rows = rows.with_columns(pl.Series("pos", pos))
    return Cohort(rows=rows, steps=steps, column=column, stride=stride)


def _robust_z(x: np.ndarray, pos: np.ndarray, med: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(x - med) / sigma of each row's step, a chunk of rows at a time: the gathered
    median and sigma would each be a column as long as the log."""
    z = np.empty(x.size)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for start, stop in row_chunks(x.size):
            at = pos[start:stop]
            np.subtract(x[start:stop], med[at], out=z[start:stop])
            z[start:stop] /= sigma[at]
    return z


def _grid_step_stats(
    steps: np.ndarray, x: np.ndarray, *, with_totals: bool = False
) -> pl.DataFrame:
    """The step table (t, med, hi, n, n_fin, mad, and total, `with_totals`: what
    `step_totals` gives) of lockstep ranks (`lockstep_grid`: strictly rising steps, x a
    ranks x steps matrix), a block of steps at a time.

    Each step's group is whole inside one block, and a median or a maximum is of
    the values' set, so the numbers are those `_sorted_step_stats` gives; only
    the block in step order exists at once, not a step-ordered copy of the log.
    """
    n_ranks = x.shape[0]
    blocks = []
    for start, stop in step_blocks(steps.size, n_ranks):
        by_step = _by_step(x[:, start:stop])
        finite = bool(np.isfinite(by_step).all())
        # the sums before `_finite_block_stats` reorders the block: `step_totals`' bits
        totals = _block_totals(by_step, finite) if with_totals else None
        block = _finite_block_stats(steps[start:stop], by_step) if finite else None
        if block is None:
            block = _block_stats(steps[start:stop], _by_step(x[:, start:stop]))
        if totals is not None:
            block = block.with_columns(pl.Series("total", totals))
        blocks.append(block)
    return pl.concat(blocks)


def _by_step(x: np.ndarray) -> np.ndarray:
    """A ranks x steps block as a copy with a row of ranks per step (always a copy: a view
    of the log's column, one step or one rank, is read-only)."""
    return np.array(x.T, order="C")


def _block_stats(steps: np.ndarray, by_step: np.ndarray) -> pl.DataFrame:
    """`_grid_step_stats` of one block (a row of ranks per step) by polars group-bys."""
    n_ranks = by_step.shape[1]
    frame = pl.DataFrame({"t": np.repeat(steps, n_ranks), "x": by_step.ravel()}).with_columns(
        pl.col("t").set_sorted()
    )
    block = _step_stats(frame, distinct_ranks=False)
    med = block["med"].fill_null(np.nan).to_numpy()
    dev = np.abs(frame["x"].to_numpy() - np.repeat(med, n_ranks))
    return block.join(_mad(frame["t"], dev), on="t", how="left").sort("t")


def _finite_block_stats(steps: np.ndarray, by_step: np.ndarray) -> pl.DataFrame | None:
    """`_block_stats` by numpy, for a block whose values are all finite (the usual one; the
    caller has checked): every step then has every rank, and its median is the middle
    values of its row (`_row_medians`: a sort or a selection), several times cheaper than
    polars' group-by. `by_step` is overwritten. None when a median or maximum falls on a
    zero: which of -0.0 and 0.0 (equal, but printed apart) polars keeps depends on its own
    order.
    """
    n_ranks = by_step.shape[1]
    sorts = n_ranks <= SORT_MAX_RANKS
    # each row sorted by `_row_medians`: its last value is its maximum
    hi = None if sorts else by_step.max(axis=1)
    med = _row_medians(by_step)
    if med is None:
        return None
    hi = by_step[:, -1].copy() if hi is None else hi
    if not (hi != 0.0).all():  # a zero's sign is the order's, as above
        return None
    # the deviations in place: a median is of the values' set, not of their order
    np.subtract(by_step, med[:, None], out=by_step)
    np.abs(by_step, out=by_step)
    if not np.isfinite(by_step).all():  # a deviation overflowed: polars leaves it out
        return None
    mad = _row_medians(by_step)
    if mad is None:
        return None
    counts = np.full(steps.size, n_ranks, dtype=np.int64)
    return pl.DataFrame(
        {"t": steps, "med": med, "hi": hi, "n": counts, "n_fin": counts, "mad": mad}
    ).with_columns(pl.col("t").set_sorted())


def _row_medians(rows: np.ndarray) -> np.ndarray | None:
    """Each row's median as polars takes it (the mean of the two middle values of an even
    count as low + (high - low) * 0.5); `rows` is reordered: sorted, row by row, when
    they hold at most SORT_MAX_RANKS values. None when a middle value is zero (its sign
    is the order's)."""
    half = rows.shape[1] // 2
    odd = rows.shape[1] % 2 == 1
    if rows.shape[1] <= SORT_MAX_RANKS:
        rows.sort(axis=1)
        high = rows[:, half].copy()
        low = high if odd else rows[:, half - 1]  # the largest of the lower half
    else:
        rows.partition(half, axis=1)
        high = rows[:, half].copy()
        low = high if odd else rows[:, :half].max(axis=1)  # the largest of the lower half
    if not (low != 0.0).all() or not (high != 0.0).all():
        return None
    return high if odd else low + (high - low) * 0.5


def _mad(t_sorted: pl.Series, dev: np.ndarray) -> pl.DataFrame:
    """t and the median of the finite absolute deviations at t (`t_sorted` in order)."""
    return (
        pl.DataFrame({"t": t_sorted, "dev": dev})
        .filter(pl.col("dev").is_finite())
        .with_columns(pl.col("t").set_sorted())
        .group_by("t")
        .agg(pl.col("dev").median().alias("mad"))
    )


def _sorted_step_stats(
    rows: pl.DataFrame, notes: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, int | None]:
    """The step table of ranks that do not log in lockstep: the rows sorted by t, with
    steps re-keyed by stride buckets when ranks mostly log at different steps."""
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
    mad = _mad(t_sorted, dev)
    del dev, t_sorted
    return rows, steps.join(mad, on="t", how="left").sort("t"), stride


def flag_runs(flagged: pl.DataFrame, flag: str, min_len: int, max_gap: int) -> pl.DataFrame:
    """Per rank, the first run of at least `min_len` logged rows where `flag` holds: its
    first step (`start`), how many flagged rows it holds (`length`), and the step of its
    `min_len`-th one, where the run met the bar (`decided`).

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
            .with_columns(
                pl.lit(0, pl.Int64).alias("start"),
                pl.lit(0, pl.Int64).alias("length"),
                pl.lit(0, pl.Int64).alias("decided"),
            )
        )
    gap = pl.col("i").cast(pl.Int64) - pl.col("i").shift(1).cast(pl.Int64) - 1
    breaks = (gap > max_gap) | (pl.col("rank") != pl.col("rank").shift(1))
    runs = (
        part.with_columns(breaks.fill_null(True).cum_sum().alias("run"))
        .group_by("run")
        .agg(
            pl.col("rank").first(),
            pl.col("step").min().alias("start"),
            pl.len().alias("length"),
            pl.col("step").sort().slice(min_len - 1, 1).first().alias("decided"),
        )
        .filter(pl.col("length") >= min_len)
    )
    return (
        runs.sort("start")
        .group_by("rank")
        .agg(pl.col("start").first(), pl.col("length").first(), pl.col("decided").first())
        .sort("rank")
    )


def rank_bounds(rows: pl.DataFrame, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First row index and one past the last of each rank (rows are in (rank, step) order)."""
    column = rows["rank"].to_numpy()
    return (
        np.searchsorted(column, ranks, side="left"),
        np.searchsorted(column, ranks, side="right"),
    )


def steps_back(
    cohort: Cohort, last_i: np.ndarray, ranks: np.ndarray, need: int
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
    _, ends = rank_bounds(cohort.rows, np.asarray(ranks))
    out: list[tuple[int | None, int]] = []
    for first, end in zip(np.asarray(last_i) + 1, ends, strict=True):
        part = cohort.part(int(first), int(max(end, first)))
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


def step_blocks(n_steps: int, n_ranks: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of steps whose rows, `n_ranks` a step, make about
    COHORT_CHUNK_ROWS rows: a lockstep grid's columns taken a block at a time."""
    block_steps = max(1, COHORT_CHUNK_ROWS // max(1, n_ranks))
    return [(start, min(start + block_steps, n_steps)) for start in range(0, n_steps, block_steps)]


def row_chunks(n_rows: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of about COHORT_CHUNK_ROWS rows covering `n_rows` rows."""
    return [
        (start, min(start + COHORT_CHUNK_ROWS, n_rows))
        for start in range(0, n_rows, COHORT_CHUNK_ROWS)
    ]


def rank_chunks(rows: pl.DataFrame, max_rows: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) row ranges of `rows` ((rank, step) order) that hold whole ranks, about
    `max_rows` rows each (one rank alone when it has more)."""
    max_rows = max_rows or COHORT_CHUNK_ROWS
    rank = rows["rank"].to_numpy()
    firsts = np.concatenate(([0], np.flatnonzero(rank[1:] != rank[:-1]) + 1, [rank.size]))
    cuts = [0]
    while cuts[-1] < rank.size:
        # the last rank start within max_rows of this cut, or the next one when a rank is longer
        at = int(np.searchsorted(firsts, cuts[-1] + max_rows, side="right")) - 1
        if firsts[at] <= cuts[-1]:
            at = int(np.searchsorted(firsts, cuts[-1], side="right"))
        cuts.append(int(firsts[at]))
    return list(pairwise(cuts))


def last_rows(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each rank of `rows` ((rank, step) order) and the index of its last row."""
    rank = rows["rank"].to_numpy()
    if rank.size == 0:
        return rank[:0], np.zeros(0, dtype=np.int64)
    last = np.concatenate((np.flatnonzero(rank[1:] != rank[:-1]), [rank.size - 1]))
    return rank[last], last


def rank_index(last_i: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The index of each row's rank (0 for the first rank) for rows start to stop, from the
    last row of each rank (`last_rows`): one repeat over the few ranks the rows cover."""
    if stop <= start:
        return np.zeros(0, dtype=np.int64)
    lo = int(np.searchsorted(last_i, start, side="left"))
    hi = int(np.searchsorted(last_i, stop - 1, side="left")) + 1
    ends = np.minimum(last_i[lo:hi] + 1, stop)
    begins = np.maximum(np.concatenate(([start], last_i[lo : hi - 1] + 1)), start)
    return np.repeat(np.arange(lo, hi, dtype=np.int64), ends - begins)
