"""Where a gradual drift began: a rank whose robust z climbs a line rather than jumping.

The CUSUM of `change.change_point` grows only while z stays over its drift
allowance `rank_cusum_k` (2 robust sigmas). A rank whose z jumps to 3-7 sigmas
and stays there starts feeding it at the jump, so its last zero is the change
point. A rank whose z climbs a line from 0 to 4 sigmas over 1,500 steps feeds
it only from halfway up, and the onset it gives is where the line crossed the
allowance, not where it left zero: 500 steps late (#36).

So the deviation is also fitted, by least squares over the rank's judged rows
from its first row to the end of the deviation (`change.deviation_end`, or
the end of the log), as either of two shapes:

    step:  z = a + c * [row > p]                          a level shift after row p
    ramp:  z = a + c * clip((t - t_p) / (t_q - t_p), 0, 1) flat to row p, a line up to
                                                          row q, flat from there on

the step at its best p, the ramp at its best p for each of `RAMP_END_GRID`
ends q spread over the window and as many again around the best of them (a
drift may go on to the end of the log, or stop and hold). The
ramp's first row past p is the onset when the ramp fits better, by
`RAMP_MARGIN` squared robust sigmas, and climbs the way the rank deviates. A
level shift is the ramp with q = p + 1, so a rank that jumped never fits the
ramp better by the margin, and keeps the CUSUM's onset. z is clipped at
+-rank_z first, as for the CUSUM, so that one wild step cannot move a line.
For each q every p at once: with prefix sums of t, t^2, z and t*z, each fit is
a 2x2 least-squares solve in closed form, so the cost is a few numpy passes
over the rank's rows per end tried, no loop over rows.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core import threads
from stabilitycli.core.records import dataclass

RAMP_MARGIN = 10.0  # squared robust sigmas the ramp must gain over the step to be the shape
MIN_SIDE_ROWS = 5  # judged rows each side of tau: a line through fewer says nothing
RAMP_END_GRID = 40  # ends of the climb tried across the window, then again near the best


@dataclass(frozen=True)
class Fit:
    """One shape's best tau: its row, its residual sum of squares, and its climb c."""

    row: int
    rss: float
    climb: float


def ramp_onset(
    z: np.ndarray, steps: np.ndarray, last: int, direction: float, clip: float
) -> int | None:
    """The row where a linear drift, seen from row 0 to row `last`, began (module doc), or
    None when a level shift fits as well or the climb goes the other way."""
    window = np.flatnonzero(np.isfinite(z[: last + 1]))
    if window.size < 2 * MIN_SIDE_ROWS:
        return None
    y = np.clip(z[window], -clip, clip)
    span = float(steps[window[-1]] - steps[window[0]]) or 1.0
    t = (steps[window] - steps[window[0]]).astype(np.float64) / span
    ramp = _best_ramp(y, t)
    step = _best_step(y)
    if ramp.rss + RAMP_MARGIN > step.rss or direction * ramp.climb <= 0:
        return None
    return int(window[ramp.row])


def _solve(n: int, sy: float, syy: float, sg, sgg, sgy, usable) -> tuple[np.ndarray, np.ndarray]:
    """Residual sum of squares and slope of y on (1, g), from the sums, for each candidate."""
    det = n * sgg - sg * sg
    usable = usable & (det > 1e-12 * n * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = (sgg * sy * sy - 2.0 * sg * sy * sgy + n * sgy * sgy) / det
        climb = (n * sgy - sg * sy) / det
    return np.where(usable, syy - explained, np.inf), climb


def _best_step(y: np.ndarray) -> Fit:
    """The best level shift: y on (1, [i >= row]) at every row with MIN_SIDE_ROWS each side."""
    n = y.size
    after = np.arange(n, 0, -1, dtype=np.float64)
    y_after = np.cumsum(y[::-1])[::-1]
    rows = np.arange(n)
    usable = (rows >= MIN_SIDE_ROWS) & (rows <= n - MIN_SIDE_ROWS)
    rss, climb = _solve(n, float(y.sum()), float(np.dot(y, y)), after, after, y_after, usable)
    best = int(np.argmin(rss))
    return Fit(best, float(rss[best]), float(climb[best]))


def _best_ramp(y: np.ndarray, t: np.ndarray) -> Fit:
    """The best ramp: y on (1, g) with g = 0 up to row p, rising linearly in t to 1 at row q,
    1 from there on, over every p, for RAMP_END_GRID ends q across the window and as many
    again between the neighbours of the best of them."""
    n = y.size
    sums = (_prefix(t), _prefix(t * t), _prefix(y), _prefix(t * y))
    coarse = np.unique(np.linspace(MIN_SIDE_ROWS + 1, n - 1, RAMP_END_GRID).astype(np.int64))
    best, at = _best_over_ends(y, t, sums, coarse)
    i = int(np.searchsorted(coarse, at))
    lo, hi = coarse[max(i - 1, 0)], coarse[min(i + 1, coarse.size - 1)]
    fine = np.unique(np.linspace(lo, hi, RAMP_END_GRID).astype(np.int64))
    refined, _ = _best_over_ends(y, t, sums, fine)
    return refined if refined.rss < best.rss else best


def _best_over_ends(
    y: np.ndarray, t: np.ndarray, sums: tuple[np.ndarray, ...], ends: np.ndarray
) -> tuple[Fit, int]:
    """The best ramp over every p for each end q in `ends`, and the q it ends at.

    Each end's fit is a pure function of it, so the ends are fitted on the threads lent
    (`core.threads`: a one-thread stretch of the rank check otherwise) and compared in
    their order, the first least rss winning, as in one loop."""
    best, best_q = Fit(0, np.inf, 0.0), int(ends[0]) if ends.size else 0
    sy, syy = float(y.sum()), float(np.dot(y, y))
    fits = threads.in_order(
        lambda q: _fit_for_end(y.size, sy, syy, t, sums, q), ends.tolist(), workers=2
    )
    for q, fit in zip(ends.tolist(), fits, strict=True):
        if fit is not None and fit.rss < best.rss:
            best, best_q = fit, q
    return best, best_q


def _fit_for_end(
    n: int, sy: float, syy: float, t: np.ndarray, sums: tuple[np.ndarray, ...], q: int
) -> Fit | None:
    """The best ramp ending at row q over every p (None when a NaN rss is the least), for
    n rows whose sum is sy and sum of squares syy.

    The rows p before q are a run, so their values are read as slices (views), not
    gathered through an array of rows, a block of them at a time: the same numbers,
    without a copy per term."""
    # prefix sums with a leading 0: the sum over rows a..b-1 is P[b] - P[a]
    p1, p2, py, pty = sums
    first = MIN_SIDE_ROWS - 1  # the first p: MIN_SIDE_ROWS rows at the level up to it
    at_top = float(n - q)  # rows from q on, at g = 1
    top_y = sy - py[q]
    fit: Fit | None = None
    # the p a block at a time, so that the dozen terms of each stay in the CPU's cache;
    # the first least rss of them, as argmin over every p gives it (a NaN least, as
    # argmin gives it first, leaves this end out)
    for lo in range(first, q - 1, _BLOCK_ROWS):  # loop over blocks of p, not rows
        hi = min(q - 1, lo + _BLOCK_ROWS)
        tp, tq = t[lo:hi], t[q]
        d = tq - tp
        # rows strictly between p and q
        inside = np.arange(q - 1 - lo, q - 1 - hi, -1, dtype=np.float64)
        s1, s2 = p1[q] - p1[lo + 1 : hi + 1], p2[q] - p2[lo + 1 : hi + 1]
        s_y, s_ty = py[q] - py[lo + 1 : hi + 1], pty[q] - pty[lo + 1 : hi + 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            sg = (s1 - inside * tp) / d + at_top
            sgg = (s2 - 2.0 * tp * s1 + inside * tp * tp) / (d * d) + at_top
            sgy = (s_ty - tp * s_y) / d + top_y
        rss, climb = _solve(n, sy, syy, sg, sgg, sgy, (d > 0) & (at_top >= 1))
        k = int(np.argmin(rss))
        if np.isnan(rss[k]):
            return None
        if fit is None or rss[k] < fit.rss:
            fit = Fit(lo + k + 1, float(rss[k]), float(climb[k]))
    return fit


# candidate rows p worked out at once: a dozen terms of 64 KB each, in the CPU's cache
# (a 156,250-row rank: 0.70-0.87 s over every p at once, 0.40 s in blocks of 4,096; the
# fit of both grids of ends, thread CPU: 0.23 s in blocks of 4,096, 0.20 in blocks of
# 8,192 or 16,384, 0.24 in blocks of 32,768). Which p is best does not depend on it
_BLOCK_ROWS = 1 << 13


def _prefix(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.size + 1)
    out[0] = 0.0
    np.cumsum(values, out=out[1:])
    return out
