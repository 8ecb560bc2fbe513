"""Where a rank's deviation begins, and whether it came back: one rank's rows at a time.

The persistence bar (`rank_z` for `rank_persist_steps` logged steps) decides
that a rank IS an outlier, but on a noisy cohort it is met late: a rank
shifted by 7 robust sigmas crosses a bar of 6 on most steps, not on ten in a
row, so the first qualifying run can start a hundred steps after the shift.
The onset is placed by a one-sided CUSUM of the rank's robust z instead,

    S_t = max(0, S_(t-1) + clip(d * z_t, -rank_z, rank_z) - k)     d = +1 high, -1 low

whose change-point estimate is the step after the last time S was zero before
it reached h. The clip keeps one wild step before the shift (a hard batch)
from holding S up for long and dragging the onset early; k keeps a healthy
rank's S at zero most of the time. The recursion has the closed form
S = C - min(0, running min of C) with C the cumulative sum of the increments,
so it is two numpy passes over the rank's rows, no loop.

The same CUSUM also decides, beside the persistence bar: a rank shifted by
3-5 robust sigmas (a +50% loss in a cohort spread 15% around its level) never
holds 6 sigmas for ten steps, but its CUSUM grows by 1-3 a step for as long
as the shift lasts. `first_crossings` runs it over every rank at once; its
bar, `rank_cusum_decide`, is the evidence the persistence bar asks for
(`rank_persist_steps` steps at `rank_z`, each adding rank_z - k) accumulated,
so a CUSUM never decides sooner than ten steps at the bar would.

Where it ends is the same change point seen from the end of the log
(`deviation_end`). Recovery needs the rank to stay under the bar: after its last deviating row
there must be at least `rank_recovery_steps` logged rows that the cohort
judged, all of them back in line. A rank still out at the last step, or back
for fewer rows than that, has not recovered.
"""

from __future__ import annotations

from typing import cast

import numpy as np


def cusum(z: np.ndarray, direction: float, k: float, clip: float) -> np.ndarray:
    """One-sided CUSUM of `direction * z` (module doc); NaN z (a step not judged) adds nothing."""
    step = np.clip(direction * z, -clip, clip) - k
    step = np.where(np.isfinite(z), step, 0.0)
    total = np.cumsum(step)
    return total - np.minimum(np.minimum.accumulate(total), 0.0)


def first_crossings(
    z: np.ndarray,
    rank: np.ndarray,
    *,
    k: float,
    clip: float,
    bar: float,
    rows_per_rank: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank (rows in (rank, step) order), the first row where either one-sided CUSUM
    of z reaches `bar`: (the ranks, their rows). Ranks that never reach it are left out.

    Every rank at once: the cumulative sums restart at each rank's first row, and
    the running minimum is kept from reaching back into the rank before by
    lowering each rank's values below everything before it. `rows_per_rank`: every rank
    has that many rows (lockstep), so a rank's number applies to its rows as a column
    broadcast over a ranks x rows matrix rather than gathered row by row; the same
    arithmetic on the same values, so the same rows. Such a chunk whose every CUSUM stays
    under `bar` by a bound (`_may_cross`, a few passes) is not run at all: in a healthy
    log, almost every chunk.
    """
    if z.size == 0:
        return np.zeros(0, dtype=rank.dtype), np.zeros(0, dtype=np.int64)
    unjudged = ~np.isfinite(z)
    # the usual log judges every row: then no pass of either direction zeroes any
    some_unjudged = bool(unjudged.any())
    if rows_per_rank and not _may_cross(
        z, unjudged if some_unjudged else None, rows_per_rank, k=k, clip=clip, bar=bar
    ):
        return np.zeros(0, dtype=rank.dtype), np.zeros(0, dtype=np.int64)
    ranks = _RankRows(rank, rows_per_rank)
    crossed = np.zeros(z.size, dtype=bool)
    # the clip is symmetric, so that of -z is minus that of z, and -c - k is -k - c
    clipped = np.clip(z, -clip, clip)
    floor = np.empty_like(clipped)  # each direction's running minimum, in the same buffer
    # in place where it can be: a 1024-rank log has tens of millions of rows, and each
    # temporary the arithmetic would make is another copy of them
    for high in (True, False):  # a rank too high, or too low (the last use of `clipped`)
        total = np.subtract(clipped, k) if high else np.subtract(-k, clipped, out=clipped)
        if some_unjudged:
            np.copyto(total, 0.0, where=unjudged)
        np.cumsum(total, out=total)
        before_rank = np.empty(ranks.first_row.size)
        before_rank[0] = 0.0
        before_rank[1:] = total[ranks.first_row[1:] - 1]
        ranks.subtract(total, before_rank, out=total)
        # each rank's values shifted below every value of the ranks before it
        widest = max(float(total.max()), -float(total.min()))
        drop = np.multiply(np.arange(ranks.first_row.size), (widest + 1.0) * 2.0)
        ranks.subtract(total, drop, out=floor)
        np.minimum.accumulate(floor, out=floor)
        ranks.add(floor, drop, out=floor)
        del drop
        np.minimum(floor, 0.0, out=floor)
        np.subtract(total, floor, out=floor)
        crossed |= floor >= bar
        del total
    rows = np.flatnonzero(crossed)
    if rows.size == 0:
        return np.zeros(0, dtype=rank.dtype), rows
    group = ranks.group(rows)
    first = np.concatenate(([True], group[1:] != group[:-1]))
    return rank[rows[first]], rows[first]


SEGMENT_ROWS = 64  # a rank's rows per segment of `_may_cross`'s bound
# what `_may_cross` leaves to rounding: the CUSUM's own over a chunk of 2**20 rows is under
# 1e-3 (the cumulative sum runs across the chunk's ranks), the bound's far less
BOUND_MARGIN = 1.0


def _may_cross(
    z: np.ndarray,
    unjudged: np.ndarray | None,
    rows_per_rank: int,
    *,
    k: float,
    clip: float,
    bar: float,
) -> bool:
    """Whether the CUSUM either way of some rank (`rows_per_rank` rows each) may reach
    `bar`: False only when none can, so that `first_crossings` skips a chunk of healthy
    ranks in six passes over it instead of some twenty.

    An upper bound over segments of SEGMENT_ROWS rows of a rank: inside segment s the
    CUSUM is at most its value where the segment began plus the segment's positive
    increments (U_s); where it ends, at most the larger of that value plus all of the
    segment's increments (D_s) and U_s. So B_s = max(B_(s-1) + D_s, U_s), B_(-1) = 0,
    bounds it at segment ends, and B_(s-1) + U_s inside segment s; B grows with D and U,
    so D and U over both directions' bound both CUSUMs. `unjudged`: the rows that add
    nothing (None: none).
    """
    clipped = np.clip(z.reshape(-1, rows_per_rank), -clip, clip)
    starts = np.arange(0, rows_per_rank, SEGMENT_ROWS)
    lengths = np.diff(np.append(starts, rows_per_rank))
    judged = lengths
    if unjudged is not None:
        clipped[unjudged.reshape(clipped.shape)] = 0.0  # adds nothing to `up` (below)
        judged = np.add.reduceat(~unjudged.reshape(clipped.shape), starts, axis=1)
    # one bound for both CUSUMs: D is +-sum(c) - k x the judged rows, at most |sum(c)| - that;
    # a positive increment is max(+-c - k, 0), at most max(|c|, k) - k, which is 0 for a
    # row at c = 0 when k >= 0 (a negative k makes the bound looser, never lower)
    drift = np.abs(np.add.reduceat(clipped, starts, axis=1)) - k * judged
    np.abs(clipped, out=clipped)
    np.maximum(clipped, k, out=clipped)
    up = np.add.reduceat(clipped, starts, axis=1) - k * lengths
    return bool((_segment_bound(drift, up) >= bar - BOUND_MARGIN).any())


def _segment_bound(drift: np.ndarray, up: np.ndarray) -> np.ndarray:
    """`_may_cross`'s bound inside each segment (ranks x segments): B_(s-1) + U_s, with
    B_s = max(B_(s-1) + D_s, U_s) in closed form, A_s + max(0, max over j <= s of
    (U_j - A_j)) with A the cumulative sum of D (`drift`) and U `up`."""
    reached = np.cumsum(drift, axis=1)
    best = np.maximum.accumulate(up - reached, axis=1)
    end = reached + np.maximum(best, 0.0)
    before = np.zeros_like(end)
    before[:, 1:] = end[:, :-1]
    return before + up


class _RankRows:
    """Where each rank's rows begin (rows in (rank, step) order), and a number per rank
    applied to its rows: gathered by each row's rank, or, when every rank has
    `rows_per_rank` rows, broadcast over the rows as a ranks x rows matrix."""

    def __init__(self, rank: np.ndarray, rows_per_rank: int | None) -> None:
        self.rows_per_rank = rows_per_rank
        if rows_per_rank:
            self.first_row = np.arange(0, rank.size, rows_per_rank)
            self._group: np.ndarray | None = None
        else:
            new_rank = np.concatenate(([True], rank[1:] != rank[:-1]))
            self._group = np.cumsum(new_rank) - 1
            self.first_row = np.flatnonzero(new_rank)

    def group(self, rows: np.ndarray) -> np.ndarray:
        """The index of the rank of each of `rows` (0 for the first rank)."""
        if self._group is None:
            return rows // cast(int, self.rows_per_rank)
        return self._group[rows]

    def _rows(self, values: np.ndarray) -> np.ndarray:
        if self._group is None:
            return values.reshape(-1, cast(int, self.rows_per_rank))
        return values

    def _numbers(self, per_rank: np.ndarray) -> np.ndarray:
        return per_rank[:, None] if self._group is None else per_rank[self._group]

    def subtract(self, values: np.ndarray, per_rank: np.ndarray, *, out: np.ndarray) -> None:
        """out = values - each row's rank's number."""
        np.subtract(self._rows(values), self._numbers(per_rank), out=self._rows(out))

    def add(self, values: np.ndarray, per_rank: np.ndarray, *, out: np.ndarray) -> None:
        """out = values + each row's rank's number."""
        np.add(self._rows(values), self._numbers(per_rank), out=self._rows(out))


def change_point(
    z: np.ndarray, confirmed: int, *, k: float, h: float, clip: float
) -> tuple[int, np.ndarray]:
    """Index where the deviation confirmed at row `confirmed` began, and the CUSUM used.

    The direction is the sign of z at `confirmed` (a row over the bar). The
    change point is the row after the last zero of the CUSUM before the first
    row at or after `confirmed` where it reaches h; never later than
    `confirmed`, which is where the persistence bar put it. When the CUSUM
    never reaches h from there on, the persistence bar's row stands.
    """
    # the direction of the rows that confirmed it, not of the first one alone: a wild row the
    # other way can open the run of rows over the bar
    direction = direction_at(z, confirmed)
    # ...and the persistence bar's row, as a latest onset, is its first row that way
    same_way = np.flatnonzero(~(direction * z[confirmed:] < 0))
    confirmed += int(same_way[0]) if same_way.size else 0
    start, s = _last_zero_start(z, confirmed, direction, k, h, clip)
    if start is None:
        return confirmed, s
    # k = 2 keeps a healthy rank quiet, but it is the right drift for one shift size only: a
    # rank 3 sigmas off dips under it every few rows, and each dip restarts the CUSUM after
    # the true onset; a rank 7 sigmas off takes in a row of 2-3 sigmas just before its onset.
    # Placed again with k at half the shift actually seen, the textbook drift for that size
    after = direction * np.clip(z[start : start + SHIFT_ESTIMATE_ROWS], -clip, clip)
    after = after[np.isfinite(after)]
    fitted = float(np.median(after)) / 2.0 if after.size else k
    if fitted >= MIN_ONSET_K and fitted != k:
        refined, s_refined = _last_zero_start(z, confirmed, direction, fitted, h, clip)
        if refined is not None:
            start, s = refined, s_refined
    return min(start, confirmed), s


def direction_at(z: np.ndarray, confirmed: int) -> float:
    """+1 for a rank above its cohort, -1 below: the median z of the rows that confirmed it."""
    ahead = z[confirmed : confirmed + DIRECTION_ROWS]
    ahead = ahead[np.isfinite(ahead)]
    return 1.0 if not ahead.size or np.median(ahead) >= 0 else -1.0


SHIFT_ESTIMATE_ROWS = 50  # rows after a first onset that measure the shift's size
DIRECTION_ROWS = 10  # rows from the confirmed one whose median z says high or low
MIN_ONSET_K = 0.5  # below this the CUSUM holds up on healthy noise and drags the onset early


def _last_zero_start(
    z: np.ndarray, confirmed: int, direction: float, k: float, h: float, clip: float
) -> tuple[int | None, np.ndarray]:
    """The row after the CUSUM's last zero before it first reaches h at or after `confirmed`."""
    s = cusum(z, direction, k, clip)
    over = np.flatnonzero(s[confirmed:] >= h)
    if over.size == 0:
        return None, s
    crossed = confirmed + int(over[0])
    zeros = np.flatnonzero(s[:crossed] <= 0.0)
    return (int(zeros[-1]) + 1 if zeros.size else 0), s


def deviation_end(z: np.ndarray, confirmed: int, *, k: float, h: float, clip: float) -> int | None:
    """The last row of the deviation confirmed at row `confirmed`, by the CUSUM run backwards.

    The mirror of `change_point`: seen from the end of the log, the deviation
    begins where the backward CUSUM was last zero before reaching h. A rank 3
    sigmas off rarely reaches the persistence bar, so its last row over that
    bar says nothing about when it came back; this does. None when the
    backward CUSUM never reaches h at or after `confirmed`.
    """
    direction = 1.0 if not np.isfinite(z[confirmed]) or z[confirmed] >= 0 else -1.0
    backward = cusum(z[::-1], direction, k, clip)[::-1]
    over = np.flatnonzero(backward[confirmed:] >= h)
    if over.size == 0:
        return None
    crossed = confirmed + int(over[-1])
    zeros = np.flatnonzero(backward[crossed + 1 :] <= 0.0)
    return crossed + int(zeros[0]) if zeros.size else z.size - 1


def recovery(
    bad: np.ndarray, compared: np.ndarray, onset: int, need: int
) -> tuple[int, int | None, int]:
    """(last deviating row at or after `onset`, first row back in line or None, rows back).

    Every row after the last deviating one is under the bar by construction,
    but only the rows the cohort could judge (`compared`: a finite value
    against a cohort of enough finite ranks) count as back in line: a step
    where every rank is NaN says nothing. Back in line needs at least `need`
    of them.
    """
    hits = np.flatnonzero(bad[onset:])
    last = onset + int(hits[-1]) if hits.size else onset
    later = np.flatnonzero(compared[last + 1 :]) + last + 1
    back = int(later[0]) if later.size >= max(1, need) else None
    return last, back, int(later.size)
