"""The check's picture (`RankPicture`): each rank's mean clipped robust z in each bucket of
steps, the heatmap `stab ranks` draws.

Summed a block of rows at a time as one bincount over every row would sum them, so a
log's picture has the same bits however it is cut: by bincounts for any cohort, as runs of
a ranks x steps block's columns for ranks in lockstep.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from stabilitycli.detect.ranks.cohort import Block, Cohort, rank_index
from stabilitycli.detect.ranks.report import RankPicture

PICTURE_BUCKETS = 60
PICTURE_CLIP_Z = 10.0  # one wild step cannot paint a whole bucket


def rank_picture(cohort: Cohort, buckets: int = PICTURE_BUCKETS) -> RankPicture:
    """Mean clipped robust z per rank and step bucket (see `RankPicture`), a block of rows
    at a time (`PictureSums`)."""
    sums = PictureSums(cohort, buckets)
    for block in cohort.blocks():
        sums.add(block, np.isfinite(block.x))
    return sums.picture()


class PictureSums:
    """The picture's sums, counts and non-finite cells (ranks x buckets), added a block of
    rows at a time in row order (`add`: `_grid_cells` for lockstep ranks, else
    `_row_cells`), so that a pass over the rows made for something else can fill it."""

    def __init__(self, cohort: Cohort, buckets: int = PICTURE_BUCKETS) -> None:
        t = cohort.steps["t"].to_numpy()  # every row's t once, in order
        self.first, last = int(t[0]), int(t[-1])
        self.span = last - self.first + 1
        buckets = max(1, min(buckets, self.span))
        self.ranks, self.last_i = cohort.last_rows()
        self.total = np.zeros((self.ranks.size, buckets))
        self.count = np.zeros((self.ranks.size, buckets), dtype=np.int64)
        self.nonfinite = np.zeros((self.ranks.size, buckets), dtype=bool)
        # a row's bucket is its step's, and its rank's index counts the ranks before it:
        # worked out once per step and once per rank, not per row
        self.step_bucket = step_buckets(
            cohort.steps["t"].to_numpy(), self.first, self.span, buckets
        )
        # lockstep ranks: a bucket is a run of a block's columns (the steps rise)
        self.present, self.column_starts = np.unique(self.step_bucket, return_index=True)
        self.column_stops = [*self.column_starts[1:].tolist(), self.step_bucket.size]
        self.carried_cell: np.ndarray = np.zeros(0, dtype=np.int64)
        self.carried_sum: np.ndarray = np.zeros(0)
        self.in_grid = cohort.in_grid()

    def add(self, block: Block, finite_x: np.ndarray) -> None:
        """A block of rows (`Cohort.blocks`, in order) and where its x is finite."""
        (self._grid_cells if self.in_grid else self._row_cells)(block, finite_x)

    def picture(self) -> RankPicture:
        """The picture of the rows added."""
        count = self.count
        if self.in_grid:
            self.total += 0.0  # the bincount's sign of a zero (`_grid_cells`)
        with np.errstate(invalid="ignore", divide="ignore"):
            deviation = np.where(count > 0, self.total / count, np.nan)
        deviation[self.nonfinite] = np.inf
        # Python ints over the few bucket edges (not the rows), clipped to int64: exact at
        # any step
        int64_max = int(np.iinfo(np.int64).max)
        buckets, first, span = count.shape[1], self.first, self.span
        edges = [min(first + (edge * span) // buckets, int64_max) for edge in range(buckets + 1)]
        return RankPicture(
            ranks=self.ranks,
            step_edges=np.array(edges, dtype=np.int64),
            deviation=deviation.astype(np.float32),
        )

    def _row_cells(self, block: Block, finite_x: np.ndarray) -> None:
        """The cells of a chunk of rows by bincounts."""
        buckets = self.total.shape[1]
        cells = self.total.size
        total, count = self.total.reshape(-1), self.count.reshape(-1)
        nonfinite = self.nonfinite.reshape(-1)
        # rows are in (rank, step) order, so a row's cell (rank index x buckets + bucket)
        # never falls: a cell's rows are contiguous, and the sum of the one cell a chunk
        # boundary splits is carried into the next chunk as its first term, so every sum is
        # taken in row order exactly as one bincount over all rows would take it
        z, pos = block.z, cast(np.ndarray, block.pos)
        cell = rank_index(self.last_i, block.start, block.stop)
        cell *= buckets
        cell += self.step_bucket[pos]
        finite = finite_x & np.isfinite(z)
        kept_cell = np.concatenate((self.carried_cell, cell[finite]))
        kept_z = np.concatenate(
            (self.carried_sum, np.clip(z[finite], -PICTURE_CLIP_Z, PICTURE_CLIP_Z))
        )
        nonfinite[cell[~finite_x]] = True
        count += np.bincount(cell[finite], minlength=cells)
        if kept_cell.size:
            low, high = int(kept_cell[0]), int(kept_cell[-1])
            sums = np.bincount(kept_cell - low, weights=kept_z, minlength=high - low + 1)
            total[low : high + 1] = sums
            self.carried_cell, self.carried_sum = kept_cell[-1:], sums[-1:]

    def _grid_cells(self, block: Block, finite_x: np.ndarray) -> None:
        """`_row_cells` for lockstep ranks: a block of whole ranks is a ranks x steps matrix
        and a bucket is a run of its columns, so a cell is a row's run of columns and needs
        no index per row.

        A cell's sum is a cumulative sum along its run, the values added one by one in row
        order as a bincount adds them; a value left out adds 0.0 instead, which changes no
        sum but the sign of a zero, and `+ 0.0` at the end (`picture`) gives every zero the
        bincount's sign (its sums start at +0.0).
        """
        n_ranks, per_rank = block.x.shape
        rows = slice(block.start // per_rank, block.start // per_rank + n_ranks)
        present, column_starts = self.present, self.column_starts
        weights = np.clip(block.z, -PICTURE_CLIP_Z, PICTURE_CLIP_Z)
        if finite_x.all() and np.isfinite(block.z).all():
            # the usual block: every value kept, none non-finite, a cell's count its run's
            # length
            self.count[rows, present] = np.diff([*column_starts.tolist(), per_rank])
        else:
            kept = finite_x & np.isfinite(block.z)
            weights[~kept] = 0.0
            self.count[rows, present] = np.add.reduceat(kept, column_starts, axis=1, dtype=np.int64)
            self.nonfinite[rows, present] = np.logical_or.reduceat(~finite_x, column_starts, axis=1)
        for bucket, start, stop in zip(present, column_starts, self.column_stops, strict=True):
            self.total[rows, bucket] = np.cumsum(weights[:, start:stop], axis=1)[:, -1]


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
