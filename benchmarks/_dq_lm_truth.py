"""Truth labelling of healthy runs (issue #36's first decision) and where a finding falls.

The generator knows its own noise draws. A point the noise alone made material by the
spec's bar (stability-tree.md §2) is an event, not a false alarm:

* one point: z >= 6 (the excess over the noise-free curve in units of the noise's own σ)
  and a value >= 1.5x the curve (the measured package's `spike_large_z` and
  `spike_large_ratio`, the spec's materiality (c));
* several points: `spike_excess_points` (3) consecutive logged points, each over Q2.1's
  3σ (`spike_sigma`), whose mean excess is >= 5σ and >= 5% of the level (the spec's
  "event covering 3 or more logged points at >= 5 sigma and >= 5% of the level"; the
  package's own sustained test is looser, which is why the spec's numbers are used).

A warning/error `spike` finding whose step is within 10 logged points of such an event
(the grid's match window) is counted as a detection of it; every other warning/error
finding is a false alarm. Both rates are reported: raw, and with these excused.
"""

from __future__ import annotations

import numpy as np

MULTI_Z, MULTI_REL = 5.0, 0.05  # the spec's multi-point bar (§2, resolution revised)
EXCUSE_POINTS = 10  # the grid's match window around an event
EXCUSED_CODES = ("spike",)  # what the spec's rule calls a material excess of the loss


def noise_events(rel: np.ndarray, sigma: float) -> list[tuple[int, int]]:
    """(first, last) logged index of each span the noise made material, merged."""
    from stabilitycli.core.config import Thresholds  # the measured package's own bar

    bar = Thresholds()
    if sigma <= 0 or rel.size == 0:
        return []
    z = rel / sigma
    one = np.flatnonzero((z >= bar.spike_large_z) & (rel >= bar.spike_large_ratio - 1.0))
    spans = [(int(i), int(i)) for i in one]
    k = int(bar.spike_excess_points)
    if rel.size >= k:
        windows = np.lib.stride_tricks.sliding_window_view
        zw, rw = windows(z, k), windows(rel, k)
        multi = np.flatnonzero(
            (zw.min(axis=1) >= bar.spike_sigma)
            & (zw.mean(axis=1) >= MULTI_Z)
            & (rw.mean(axis=1) >= MULTI_REL)
        )
        spans += [(int(i), int(i) + k - 1) for i in multi]
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def excused(step: int | None, code: str, spans, steps: np.ndarray, interval: int) -> bool:
    """Whether a finding reports one of the noise-made events (so it is not a false alarm)."""
    if step is None or code not in EXCUSED_CODES:
        return False
    slack = EXCUSE_POINTS * interval
    return any(steps[a] - slack <= step <= steps[b] + slack for a, b in spans)


# --- where in an LM run a finding falls ----------------------------------------------------

PLACES = (
    "last 5%",
    "first 100 steps",
    "warmup",
    "epoch boundary",
    "schedule change",
    "curriculum step",
    "hump",
    "decay tail",
    "elsewhere",
)
NEAR_STEPS, NEAR_POINTS = 200, 5  # "just after" a feature: max(200 steps, 5 logged points)


def place_of(step: int | None, shape, last_step: int, interval: int) -> str:
    """The first place in PLACES that holds `step` (a dated finding's step)."""
    if step is None:
        return "elsewhere"
    near = max(NEAR_STEPS, NEAR_POINTS * interval)

    def just_after(anchors) -> bool:
        return any(a <= step <= a + near for a in anchors)

    if step >= 0.95 * last_step:
        return "last 5%"
    if step < 100:
        return "first 100 steps"
    if step < shape.warmup:
        return "warmup"
    if just_after(shape.boundaries):
        return "epoch boundary"
    if just_after(shape.changes()):
        return "schedule change"
    if shape.curriculum is not None and just_after([shape.curriculum]):
        return "curriculum step"
    if shape.hump is not None and shape.hump[0] <= step <= sum(shape.hump):
        return "hump"
    if step >= shape.decay_tail:
        return "decay tail"
    return "elsewhere"


# --- whether an injected multi-point event met the bar in the logged data ---------------

JUDGED_STEPS = 100  # a shift is judged over its first spike window (Q2.1's 100 steps)
NEW_LEVEL_POINTS = 3  # logged points after an epoch drop that show its new level


def below_bar(run, interval: int, sigma: float) -> str | None:
    """Why an injected bump or shift is not a material event by the logged data, or None.

    The generator adds `h` of the level to the points it covers; the noise those points
    drew adds to it. An event of exactly 5σ (and 5%, at σ = 1%) whose points drew a
    negative mean noise sits under the spec's multi-point bar in the log itself, as a
    noise-made event can sit over it: the same measure as `noise_events`, on the event's
    own points (a shift's: its first spike window, at least 3 points) against the noise-
    free curve. An event less than NEW_LEVEL_POINTS logged points after an epoch drop
    (a level is a multi-point thing, as an event is) has no level of the new epoch in the
    log to stand out from: its excess is measured over the level before the drop, which
    is what the log shows (a +24% shift on the first point after a 24% drop is a one-point
    dip and no event at all).
    """
    truth, steps = run.truth, run.frame["step"].to_numpy()
    i = int(np.searchsorted(steps, truth.onset))
    judged = max(3, -(-JUDGED_STEPS // interval))
    stop = min(i + min(truth.points, judged), steps.size)
    rel = run.frame["loss"].to_numpy()[i:stop] / _reference(run, steps, i, stop) - 1.0
    mean = float(np.mean(rel))
    if mean < MULTI_Z * sigma - 1e-12 or mean < MULTI_REL - 1e-12:
        return f"logged mean excess {mean / sigma:.2f}σ, {100 * mean:.2f}%"
    return None


def _reference(
    run, steps: np.ndarray, i: int, stop: int, new_level_points: int = NEW_LEVEL_POINTS
) -> np.ndarray:
    """The noise-free curve over rows [i, stop), or, for an event less than `new_level_points`
    logged points after an epoch drop, the level before the drop (see `below_bar`)."""
    reference = run.level[i:stop]
    for b in run.shape.boundaries:
        first = int(np.searchsorted(steps, b))  # the drop's first logged point
        if first <= i < first + new_level_points and first > 0:
            # the log holds no level after the drop to stand out from: the one before it
            reference = reference * (run.level[first - 1] / run.level[first])
    return reference


def one_point_below_bar(run, kind: str, sigma: float) -> str | None:
    """Why an injected one-point spike is not a spike by the logged data, or None.

    The generator writes the spike's point without noise, h above the noise-free curve, so
    away from an epoch drop it always stands over Q2.1's 3σ (and, +60% or more, over
    materiality (c)). On the first logged point of a new epoch the log holds no point of
    the new level before it: nothing tells it from the last point of the old epoch, and it
    is measured over the level before the drop (as the multi-point events are, `below_bar`;
    a one-point event needs only the one point before it, which the rule's level since the
    change reads). There a 5σ point of an epoch that dropped 8-25% is under the old level,
    and a +60% point 1.2-1.5x it: not a spike by the spec's rule, a point with a cause
    (spike+grad) under 3σ, one without (spike) under z 6 or 1.5x.
    """
    from stabilitycli.core.config import Thresholds  # the measured package's own bar

    bar = Thresholds()
    steps = run.frame["step"].to_numpy()
    i = int(np.searchsorted(steps, run.truth.onset))
    reference = float(_reference(run, steps, i, i + 1, new_level_points=1)[0])
    value = float(run.frame["loss"].to_numpy()[i])
    z = (value / reference - 1.0) / sigma
    ratio = value / reference
    if z < bar.spike_sigma:
        return f"logged point {z:.2f}σ over the level before the epoch drop"
    if kind == "spike" and not (z >= bar.spike_large_z and ratio >= bar.spike_large_ratio):
        return f"logged point {z:.2f}σ and {ratio:.2f}x the level before the epoch drop"
    return None
