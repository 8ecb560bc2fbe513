"""§4: the straight ramp fit of a divergence onset - "level or falling, then a straight
rise, then level" by least squares over every logged point (detect/divergence_onset.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stabilitycli.detect.divergence_decay import Decay, running_median_rows
from stabilitycli.detect.trend import running_sum_from, suffix_sum_from
from stabilitycli.frame import plain_numpy

RAMP_START_CANDIDATES = 256  # first pass of the ramp fit: start steps tried on a grid
RAMP_END_CANDIDATES = 64  # end steps tried (the last one is the end of the log)


def ramp_onset(
    steps: np.ndarray,
    loss: np.ndarray,
    earliest_start_step: int,
    latest_start_step: int,
    decay_shape: Decay | None = None,
) -> int | None:
    """The start of `ramp_pair`'s fit (None when it found none)."""
    pair = ramp_pair(steps, loss, earliest_start_step, latest_start_step, decay_shape)
    return None if pair is None else int(pair[0])


def ramp_pair(
    steps: np.ndarray,
    loss: np.ndarray,
    earliest_start_step: int,
    latest_start_step: int,
    decay_shape: Decay | None = None,
) -> tuple[float, float] | None:
    """Where a "level, then a straight rise, then level again" least-squares fit over the
    logged points, from the fit region to the end of the log, starts its rise.

    The binned bend sees only the region up to the first window that rose,
    a small part of a slow ramp, and knows the bend only to within a bin; the
    whole rise (to the end of the log, or to where it levels off again) pins
    its start far better. The start is searched from `earliest_start_step` up
    to `latest_start_step` on a grid, then on every logged point around the
    best grid point; the end on `RAMP_END_CANDIDATES` steps. Heavy-tailed
    noise is clipped first, so one wild point cannot move the fit. Given
    `decay_shape`, the loss before the start is a level plus that decay (the
    run still improving), not a straight fall.
    """
    finite = np.isfinite(loss)
    if finite.all():  # the usual case (finite_points): no copy of the loss, one of the steps
        x, y = steps.astype(float), clip_wild(loss.astype(float, copy=False))
    else:
        x, y = steps[finite].astype(float), clip_wild(loss[finite].astype(float))
    del finite
    decay = None if decay_shape is None else decay_shape.at(x)
    starts = x[(x >= earliest_start_step) & (x < latest_start_step) & (x < x[-1])]
    if starts.size < 2 or x.size < 4:
        return None
    # ends only after the earliest start: the stretch before it can be long (a decay); the
    # steps are sorted (the view's), so those points are a slice, not a copy
    later = x[int(np.searchsorted(x, starts[0], side="left")) :]
    end_grid = np.quantile(later, np.linspace(0, 1, RAMP_END_CANDIDATES))
    ends = np.unique(np.concatenate([end_grid, x[-1:]]))
    start_at = np.linspace(0, starts.size - 1, RAMP_START_CANDIDATES).round().astype(int)
    grid = starts[plain_numpy.unique(start_at)]
    best_ramp = _ramp_fitter(x, y, decay)
    best = best_ramp(grid, ends)
    if best is None:
        return None
    # then every logged point around the best grid pair: the end first, then the start
    start_spacing = starts.size // RAMP_START_CANDIDATES + 1
    end_spacing = later.size // RAMP_END_CANDIDATES + 1
    at = int(np.searchsorted(x, best[1]))
    near_ends = x[max(0, at - end_spacing) : at + end_spacing + 1]
    best = best_ramp(np.array([best[0]]), near_ends) or best
    at = int(np.searchsorted(starts, best[0]))
    near_starts = starts[max(0, at - start_spacing) : at + start_spacing + 1]
    return best_ramp(near_starts, np.array([best[1]])) or best


def _ramp_fitter(
    x: np.ndarray, y: np.ndarray, decay: np.ndarray | None = None
) -> Callable[[np.ndarray, np.ndarray], tuple[float, float] | None]:
    """best(starts, ends): the (start, end) pair of the best least-squares fit of "falling or
    level, then a straight rise, then level": y = a + s * min(0, x - start) + b * clip(x -
    start, 0, end - start) with s <= 0 < b, every pair at once from prefix and suffix sums
    (linear in the points: each call sums the columns once, a chunk of rows at a time, and
    reads the sums at its starts and ends alone); None when no pair rises.

    The slope before the start matters: a run is often still improving when it
    turns, and a level fitted to a fall sits too high, which pushes the start late.
    Given a `decay` column (the run's own decay curve at each point), it takes
    the place of the straight fall: y = a + c * decay + b * clip(...), c >= 0.
    """
    origin, scale = x[0], max(float(x[-1] - x[0]), 1.0)
    # steps in [0, 1]: the sums of squares below subtract large, nearly equal numbers
    x = x - origin
    x /= scale
    n = x.size
    y_mean = y.mean()
    if decay is not None:
        d_u, d_uu, d_uy = -decay.sum(), decay @ decay, -(decay @ y)

    def columns(lo: int, hi: int) -> list[np.ndarray]:
        """Rows lo..hi-1 of the summed columns: 1, x, x^2, y, x y (and decay, decay x)."""
        xs, ys = x[lo:hi], y[lo:hi]
        out = [np.ones(hi - lo), xs, xs * xs, ys, xs * ys]
        if decay is not None:
            out += [decay[lo:hi], decay[lo:hi] * xs]
        return out

    def tail(starts: np.ndarray, ends: np.ndarray) -> list[list[np.ndarray]]:
        """Each column's sums over the points after each of starts, and each of ends."""
        after = [np.searchsorted(x, t, side="right") for t in (starts, ends)]
        return sums_at(columns, n, after, from_end=True)

    def best(starts: np.ndarray, ends: np.ndarray) -> tuple[float, float] | None:
        starts, ends = (starts - origin) / scale, (ends - origin) / scale
        k_before = np.searchsorted(x, starts, side="left")
        before = sums_at(columns, n, [k_before], from_end=False)[0]
        p0, p1, p2, py, pxy = (v[:, None] for v in before[:5])
        after_starts, after_ends = tail(starts, ends)
        c0, c1, c2, cy, cxy = (v[:, None] for v in after_starts[:5])
        e0, e1, e2, ey, exy = (v[None, :] for v in after_ends[:5])
        t0, t1 = starts[:, None], ends[None, :]
        # the ramp column g = max(0, x - t0) - max(0, x - t1)
        g = (c1 - t0 * c0) - (e1 - t1 * e0)
        gg = (
            (c2 - 2 * t0 * c1 + t0**2 * c0)
            - 2 * (e2 - (t0 + t1) * e1 + t0 * t1 * e0)
            + (e2 - 2 * t1 * e1 + t1**2 * e0)
        )
        gy = (cxy - t0 * cy) - (exy - t1 * ey)
        # the fall column u = min(0, x - t0); it is zero wherever g is not
        u = -(t0 * p0 - p1)
        uu = t0**2 * p0 - 2 * t0 * p1 + p2
        uy = -(t0 * py - pxy)
        ug = np.zeros(1)
        if decay is not None:
            # the decay stands in for the straight fall, as u = -decay (so a fall is still
            # s <= 0); it reaches under the ramp, so the two columns overlap
            u, uu, uy = d_u, d_uu, d_uy
            d0, d1 = (v[:, None] for v in after_starts[5:])
            e_d0, e_d1 = (v[None, :] for v in after_ends[5:])
            ug = -((d1 - t0 * d0) - (e_d1 - t1 * e_d0))
        v_gg, c_gy = gg - g**2 / n, gy - g * y_mean
        v_uu, c_uy, v_ug = uu - u**2 / n, uy - u * y_mean, ug - u * g / n
        det = v_uu * v_gg - v_ug**2
        safe_det = np.where(det > 0, det, 1.0)
        fall = (v_gg * c_uy - v_ug * c_gy) / safe_det
        rise = (v_uu * c_gy - v_ug * c_uy) / safe_det
        with_fall = (det > 0) & (fall <= 0) & (rise > 0)
        level_only = (v_gg > 0) & (c_gy > 0)
        # with s > 0 the constrained optimum is s = 0: "level, then a rise"
        explained = np.where(
            with_fall,
            fall * c_uy + rise * c_gy,
            np.where(level_only, c_gy**2 / np.where(v_gg > 0, v_gg, 1.0), -np.inf),
        )
        explained = np.where(t1 > t0, explained, -np.inf)
        if not np.isfinite(explained).any():
            return None
        i, k = np.unravel_index(int(np.argmax(explained)), explained.shape)
        return float(starts[i] * scale + origin), float(ends[k] * scale + origin)

    return best


RAMP_CHUNK_ROWS = 1 << 18  # rows of the ramp fit's columns made at a time (2 MB each)


def sums_at(
    columns: Callable[[int, int], list[np.ndarray]],
    n: int,
    at: list[np.ndarray],
    *,
    from_end: bool,
) -> list[list[np.ndarray]]:
    """For each index array of `at`, each column's `[0] + cumsum` (or, `from_end`, its
    `cumsum` from the end with a 0 after it) read at those indices (0..n).

    The columns of `n` rows are made and summed `RAMP_CHUNK_ROWS` rows at a time, the
    sum carried from chunk to chunk in the order the whole column's cumsum adds, so the
    numbers are the whole column's: a long ramp fit reads a few hundred of them, and
    would otherwise hold a dozen columns as long as the log."""
    out: list[list[np.ndarray]] = []
    carries: list[float] = []
    firsts = range(0, n, RAMP_CHUNK_ROWS)
    for lo in reversed(firsts) if from_end else firsts:  # loop over chunks of rows
        hi = min(n, lo + RAMP_CHUNK_ROWS)
        chunk = columns(lo, hi)
        if not out:
            out = [[np.zeros(k.size) for _ in chunk] for k in at]
            carries = [0.0] * len(chunk)
        for c, column in enumerate(chunk):
            if from_end:
                sums = suffix_sum_from(column, hi == n, carries[c])
                carries[c] = float(sums[0])
            else:
                sums = running_sum_from(column, lo, carries[c])
                carries[c] = float(sums[-1])
            for q, k in enumerate(at):
                inside = (k >= lo) & (k <= hi)
                out[q][c][inside] = sums[k[inside] - lo]
    return out


def clip_wild(y: np.ndarray) -> np.ndarray:
    """Each value pulled to within 4 robust sigmas of its 5-point running median.

    The running median is taken `RAMP_CHUNK_ROWS` rows at a time, twice (for the
    offsets, then to add the clipped offsets back to): the ramp fit of a long rise
    holds one offset column, not the median, its copies and the offsets at once."""
    if y.size < 5:
        return y
    off = np.empty(y.size)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        np.subtract(y[lo:hi], running_median_rows(y, lo, hi), out=off[lo:hi])
    magnitude = np.abs(off)
    # the median partitions its own copy: `magnitude` is that copy
    spread = 1.4826 * float(np.median(magnitude, overwrite_input=True))
    del magnitude
    if not spread > 0:
        return y
    np.clip(off, -4 * spread, 4 * spread, out=off)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        # the running median + the clipped offset
        np.add(running_median_rows(y, lo, hi), off[lo:hi], out=off[lo:hi])
    return off
