"""The check's picture (`RankPicture`): each rank's mean clipped robust z in each bucket of
steps, the heatmap `stab ranks` draws.

Summed a block of rows at a time as one bincount over every row would sum them, so a
log's picture has the same bits however it is cut: by bincounts for any cohort, as runs of
a ranks x steps block's columns for ranks in lockstep.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from stabilitycli.detect.ranks.cohort import Cohort, rank_index
from stabilitycli.detect.ranks.report import RankPicture

PICTURE_BUCKETS = 60
PICTURE_CLIP_Z = 10.0  # one wild step cannot paint a whole bucket


def rank_picture(cohort: Cohort, buckets: int = PICTURE_BUCKETS) -> RankPicture | None:
    """Mean clipped robust z per rank and step bucket (see `RankPicture`), a block of rows
    at a time (`_grid_cells` for lockstep ranks, else `_row_cells`)."""
    rows = cohort.rows
    t = rows["t"].to_numpy()
    first, last = int(t.min()), int(t.max())
    span = last - first + 1
    buckets = max(1, min(buckets, span))
    ranks, last_i = cohort.last_rows()
    total = np.zeros((ranks.size, buckets))
    count = np.zeros((ranks.size, buckets), dtype=np.int64)
    nonfinite = np.zeros((ranks.size, buckets), dtype=bool)
    # a row's bucket is its step's, and its rank's index counts the ranks before it: worked
    # out once per step and once per rank, not per row
    step_bucket = step_buckets(cohort.steps["t"].to_numpy(), first, span, buckets)
    cells = _grid_cells if cohort.in_grid() else _row_cells
    cells(cohort, last_i, step_bucket, total, count, nonfinite)
    with np.errstate(invalid="ignore", divide="ignore"):
        deviation = np.where(count > 0, total / count, np.nan)
    deviation[nonfinite] = np.inf
    # Python ints over the few bucket edges (not the rows), clipped to int64: exact at any step
    int64_max = int(np.iinfo(np.int64).max)
    edges = [min(first + (edge * span) // buckets, int64_max) for edge in range(buckets + 1)]
    return RankPicture(
        ranks=ranks,
        step_edges=np.array(edges, dtype=np.int64),
        deviation=deviation.astype(np.float32),
    )


def _row_cells(
    cohort: Cohort,
    last_i: np.ndarray,
    step_bucket: np.ndarray,
    total: np.ndarray,
    count: np.ndarray,
    nonfinite: np.ndarray,
) -> None:
    """The picture's sums, counts and non-finite cells (ranks x buckets, filled in place) by
    bincounts over a chunk of rows at a time."""
    buckets = total.shape[1]
    cells = total.size
    total, count, nonfinite = total.reshape(-1), count.reshape(-1), nonfinite.reshape(-1)
    # rows are in (rank, step) order, so a row's cell (rank index x buckets + bucket) never
    # falls: a cell's rows are contiguous, and the sum of the one cell a chunk boundary
    # splits is carried into the next chunk as its first term, so every sum is taken in row
    # order exactly as one bincount over all rows would take it
    carried_cell: np.ndarray = np.zeros(0, dtype=np.int64)
    carried_sum: np.ndarray = np.zeros(0)
    for block in cohort.blocks():
        x, z, pos = block.x, block.z, cast(np.ndarray, block.pos)
        cell = rank_index(last_i, block.start, block.stop)
        cell *= buckets
        cell += step_bucket[pos]
        finite = np.isfinite(x) & np.isfinite(z)
        kept_cell = np.concatenate((carried_cell, cell[finite]))
        kept_z = np.concatenate((carried_sum, np.clip(z[finite], -PICTURE_CLIP_Z, PICTURE_CLIP_Z)))
        nonfinite[cell[~np.isfinite(x)]] = True
        count += np.bincount(cell[finite], minlength=cells)
        if kept_cell.size:
            low, high = int(kept_cell[0]), int(kept_cell[-1])
            sums = np.bincount(kept_cell - low, weights=kept_z, minlength=high - low + 1)
            total[low : high + 1] = sums
            carried_cell, carried_sum = kept_cell[-1:], sums[-1:]


def _grid_cells(
    cohort: Cohort,
    last_i: np.ndarray,
    step_bucket: np.ndarray,
    total: np.ndarray,
    count: np.ndarray,
    nonfinite: np.ndarray,
) -> None:
    """`_row_cells` for lockstep ranks: a block of whole ranks is a ranks x steps matrix
    and a bucket is a run of its columns (the steps rise), so a cell is a row's run of
    columns and needs no index per row.

    A cell's sum is a cumulative sum along its run, the values added one by one in row
    order as a bincount adds them; a value left out adds 0.0 instead, which changes no
    sum but the sign of a zero, and `+ 0.0` at the end gives every zero the bincount's
    sign (its sums start at +0.0).
    """
    present, column_starts = np.unique(step_bucket, return_index=True)  # steps rise
    column_stops = [*column_starts[1:].tolist(), step_bucket.size]
    for block in cohort.blocks():
        n_ranks, per_rank = block.x.shape
        rows = slice(block.start // per_rank, block.start // per_rank + n_ranks)
        finite_x = np.isfinite(block.x)
        kept = finite_x & np.isfinite(block.z)
        weights = np.clip(block.z, -PICTURE_CLIP_Z, PICTURE_CLIP_Z)
        weights[~kept] = 0.0
        count[rows, present] = np.add.reduceat(kept, column_starts, axis=1, dtype=np.int64)
        np.logical_not(finite_x, out=finite_x)
        nonfinite[rows, present] = np.logical_or.reduceat(finite_x, column_starts, axis=1)
        for bucket, start, stop in zip(present, column_starts, column_stops, strict=True):
            total[rows, bucket] = np.cumsum(weights[:, start:stop], axis=1)[:, -1]
    total += 0.0


def step_buckets(t: np.ndarray, first: int, span: int, buckets: int) -> np.ndarray:
    """The picture's step bucket of each step `t`."""
    # steps may be anywhere in int64 (a log is not ours to bound), so the bucket of a step is
    # found in float64: (t - first) * buckets would overflow for steps near 2**63
    offset = (t - first).astype(np.float64)
    offset *= buckets
    offset /= span
    bucket = offset.astype(np.int64)
    np.minimum(bucket, buckets - 1, out=bucket)
    return bucket
