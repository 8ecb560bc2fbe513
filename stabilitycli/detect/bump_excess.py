"""The accumulated excess of an event longer than `spike_excess_points` (issue 36).

Materiality (a) sums the excess of a flagged point and the next points,
`spike_excess_points` in all. The spec's multi-point bar is over the event's points,
however many it covers: a ten-point bump at 5 sigma whose first three points the noise
drew to 3.6, 4.9 and 3.6 sigma sums to 12.1 over three and falls under the bar, though its
ten points average 5.2 (issue 36's LM benchmark: a third of the multi-point events missed
in warmups, decays and mid-run were such bumps). Every length from `spike_excess_points`
+ 1 to `spike_excess_max_points` is read with the same bar per point: the mean excess over
the first m points, each counting at most `spike_excess_cap_sigma` either way, at least
the three-point bar's share per point, and a mean rise of `spike_sustained_min_rise_frac`.
A longer stretch averages more noise away, so the same mean is rarer from noise alone the
longer it is. Its first `spike_excess_points` points must each stand
`spike_excess_min_sigma` up, as the three-point reading's do: a noise point a few points
before a shift otherwise took the shift's mean and dated it early. Not past ten points:
the baseline is frozen at the flag, and over a spike window on a mixture hump's rise the
curve's own climb summed past the bar (one-point spikes there were swallowed by an event
begun at a noise point before them). A level that stays up after it is still judged by
where it settled (`settle`).
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.pointwise import KeptAt

# candidates gathered at a time (each with up to spike_excess_max_points after it)
_BLOCK = 1024


def sustained_longer(
    candidates: np.ndarray,
    loss: np.ndarray,
    reference: KeptAt,
    sigma: KeptAt,
    bar: np.ndarray,
    thresholds: Thresholds,
    fall: tuple[np.ndarray, KeptAt] | None = None,
) -> np.ndarray:
    """Per flagged point: does the mean excess of its first m points over `reference`, in
    `sigma`, reach `bar` / `spike_excess_points` (and their mean rise
    `spike_sustained_min_rise_frac`) for some m from `spike_excess_points` + 1 to
    `spike_excess_max_points`, its first points each `spike_excess_min_sigma` up? A
    non-finite point ends the stretch read (a NaN is the NaN rule's)."""
    out = np.zeros(candidates.size, dtype=bool)
    first = int(thresholds.spike_excess_points)
    cap = thresholds.spike_excess_cap_sigma
    span = np.minimum(int(thresholds.spike_excess_max_points), loss.size - candidates)
    for lo in range(0, candidates.size, _BLOCK):  # blocks of candidates, not rows
        rows, width = candidates[lo : lo + _BLOCK], span[lo : lo + _BLOCK]
        if rows.size == 0 or int(width.max()) <= first:
            continue
        offsets = np.arange(int(width.max()))
        at = rows[:, None] + offsets[None, :]
        values = loss[np.minimum(at, loss.size - 1)]
        mu, sd = reference[rows][:, None], sigma[rows][:, None]
        if fall is not None:  # a sparse log's fall carried on from the flag
            steps, carry = fall
            mu = mu + carry[rows][:, None] * (
                steps[np.minimum(at, steps.size - 1)] - steps[rows][:, None]
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.clip((values - mu) / sd, -cap, cap)
            rise = (values - mu) / np.abs(mu)
        inside = (offsets[None, :] < width[:, None]) & np.isfinite(values)
        inside = np.cumprod(inside, axis=1).astype(bool)  # up to the first non-finite point
        count = np.arange(1, offsets.size + 1)[None, :]
        mean_z = np.cumsum(np.where(inside, z, 0.0), axis=1) / count
        mean_rise = np.cumsum(np.where(inside, rise, 0.0), axis=1) / count
        # the event's own first points stand up, as the three-point reading's do
        lowest = np.where(inside[:, :first], z[:, :first], -np.inf).min(axis=1)
        longer = inside & (count > first) & (lowest >= thresholds.spike_excess_min_sigma)[:, None]
        with np.errstate(invalid="ignore"):
            passed = (
                longer
                & (mean_z >= (bar[lo : lo + _BLOCK] / first)[:, None])
                & (mean_rise >= thresholds.spike_sustained_min_rise_frac)
            )
        out[lo : lo + _BLOCK] = passed.any(axis=1)
    return out
