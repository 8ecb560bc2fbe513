"""The curve a run was on, carried across the stretch after a flagged point (issue 36).

Q2.2 asks whether the loss came back to its baseline. On a loss that falls fast (warmup,
the end of warmup, a decay's tail) a frozen baseline is soon left above the curve: a +8%
shift logged every step during warmup was "back" 20-30 steps later, where the fall had
taken more than 8% off the loss, and the spike was called recoverable. Reading the curve
ahead from the points before the flag alone does not help enough: a line through them
carried half a window on overstated a warmup's slowing fall by 2.6 sigma, and a parabola
extrapolated that far errs by more than a sigma from the noise alone.

The points on both sides pin the curve: the log of the loss over a stretch before the
flag and one after it (the event's own first `spike_excess_points` left out), fitted
with a cubic in the step plus a step of its own at the flagged point. The step takes the
shift, the cubic the curve the run was on (a warmup's fall speeds up, then slows down: a
straight line through both sides took 2.3% off a shift there, the cubic 0.1%). Logs,
since a loss's noise and a shift are a fraction of the loss. Both stretches stop at a
level change (an epoch boundary), which no smooth curve crosses.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds

# a cubic and the step at the flag: the columns of the fit
_DEGREE = 3
_COLUMNS = _DEGREE + 2
# rows x points x columns held at a time
_CELLS = 1 << 21


def fitted_curve(
    rows: np.ndarray,
    steps: np.ndarray,
    loss: np.ndarray,
    changes: np.ndarray,
    span: np.ndarray,
    thresholds: Thresholds,
    skip: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, fitted over up to `span` points before it and `span` from it on: the curve
    at the row (NaN where a side holds fewer than `widened_window_points` / 2 points, or
    more than that were cut by a change, a non-finite or a non-positive loss, or where a
    change falls within the stretch after the row), and the
    curve's ratio to it at the row's `span` points from it on (rows x max(span); 1 past a
    row's span or where there is no fit). Dividing a point by its ratio puts it on the
    level at the row, the curve's fall or rise taken out. `skip`: the points from the row
    on left out of the fit (at least `spike_excess_points`, at most half the span: an
    event's own points, which a tiny noise lets bend the cubic: two points of a x4 spike
    put its end 5 sigma off)."""
    width = int(span.max(initial=1))
    base = np.full(rows.size, np.nan)
    ratio = np.ones((rows.size, width))
    block = max(1, _CELLS // (2 * width * _COLUMNS))
    least = int(thresholds.spike_excess_points)
    left_out = np.full(rows.size, least) if skip is None else skip
    left_out = np.clip(left_out, least, np.maximum(least, span // 2))
    for lo in range(0, rows.size, block):  # blocks of rows, not a loop over points
        part = slice(lo, lo + block)
        base[part], ratio[part] = _fit(
            rows[part], steps, loss, changes, (span[part], left_out[part]), width, thresholds
        )
    return base, ratio


def _fit(rows, steps, loss, changes, spans, width, thresholds: Thresholds):
    span, skip = spans
    n = loss.size
    offsets = np.arange(-width, width)
    at = rows[:, None] + offsets[None, :]
    # the level change a row follows, and the next one: the stretch stays between them
    bounds = np.concatenate(([0], changes, [n]))
    after = np.searchsorted(changes, rows, side="right")
    start, stop = bounds[after], bounds[after + 1]
    inside = (
        (at >= np.maximum(start, rows - span)[:, None])
        & (at < np.minimum(stop, rows + span)[:, None])
        & (at >= 0)
        & (at < n)
    )
    # the event's own first points are left out: one +100% point, or a three-point bump,
    # bent the cubic up at the flag and read the next point, back on the curve, as high
    inside &= (offsets[None, :] < 0) | (offsets[None, :] >= skip[:, None])
    clipped = np.clip(at, 0, n - 1)
    values = loss[clipped]
    with np.errstate(invalid="ignore"):
        ok = inside & np.isfinite(values) & (values > 0)
    y = np.log(np.where(ok, values, 1.0))
    # steps as a fraction of the stretch after the row: the cubic's terms stay near 1
    end = steps[np.minimum(rows + span, n) - 1] - steps[rows]
    scale = np.where(end > 0, end, 1).astype(np.float64)
    x = (steps[clipped] - steps[rows][:, None]) / scale[:, None]
    after_flag = np.broadcast_to(offsets >= 0, x.shape)
    design = np.stack([x**k for k in range(_DEGREE + 1)] + [after_flag.astype(float)], axis=-1)
    weight = ok.astype(np.float64)
    normal = np.einsum("rpi,rpj,rp->rij", design, design, weight)
    target = np.einsum("rpi,rp,rp->ri", design, y, weight)
    need = max(_COLUMNS, thresholds.widened_window_points // 2)
    before_pts = (ok & ~after_flag).sum(axis=1)
    after_pts = (ok & after_flag).sum(axis=1)
    # a side cut short (a change, the start or end of the log, missing points) leaves the
    # curve to the old reading
    # a change within the stretch after the flag (a bump's end steps down) leaves a cubic
    # read past its last point: no fit there either
    whole_after = stop >= np.minimum(rows + span, n)
    fits = (
        (before_pts >= np.maximum(need, span // 2))
        & (after_pts >= np.maximum(need, (span - skip) // 2))
        & whole_after
    )
    normal[~fits] = np.eye(_COLUMNS)
    coef = np.linalg.solve(normal, target[..., None])[..., 0]
    ahead = x[:, width:]
    curve = sum(coef[:, [k]] * ahead**k for k in range(_DEGREE + 1))
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = np.exp(curve - coef[:, [0]])
        base = np.exp(coef[:, 0])
    post = np.arange(width)[None, :] < span[:, None]
    ratio = np.where(fits[:, None] & post & np.isfinite(ratio) & (ratio > 0), ratio, 1.0)
    return np.where(fits & np.isfinite(base), base, np.nan), ratio
