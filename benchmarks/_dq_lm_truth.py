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
