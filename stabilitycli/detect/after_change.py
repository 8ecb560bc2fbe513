"""The spike baseline in the first logged points after a level change (issue 36: events
right after an epoch boundary).

The trailing window restarts where the loss stepped down (`level.level_changes`), but a
restarted window needs `min_points_per_window` points before it judges anything, and a
sparse log's window (the last `widened_window_points` points) straddles the two levels for
as many points. An event within 100 steps of the boundary falls in that stretch: 1-9
logged points after it when logged every 10 steps, the first or second when every 100.

There the level is the mean of the points logged since the change, the few there are, and
the noise is the one measured on the longer stretch before it (a few points hold no
std worth the name), scaled to the new level: the noise of a loss is a share of it.
"""

from __future__ import annotations

from dataclasses import field, replace

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect.autocorr import NoiseMemory
from stabilitycli.detect.level import LocalLevel


@dataclass(frozen=True)
class AfterChange:
    """Rows judged against the level since the change before them, with that level (the
    mean of the points from the change to the row, the row not included) and the noise."""

    rows: np.ndarray
    level: np.ndarray
    sigma: np.ndarray
    change: np.ndarray  # the change row each row's level starts at
    # where each row's sigma was measured: the first row of the stretch before its change
    # (the stretch ends at the row before the change), and whether the floor set it instead
    noise_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    floored: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    noise: np.ndarray = field(default_factory=lambda: np.zeros(0))  # before it was scaled
    # how that noise was read: "differences" (successive differences, a sparse log's pooled
    # estimate, allowing for the lag-1 autocorrelation `lag1`) or "line" (the spread around
    # a line fitted to the window before the change)
    noise_from: str = "line"
    lag1: float = 0.0

    @classmethod
    def none(cls) -> AfterChange:
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, np.zeros(0), np.zeros(0), empty)

    def source_of(self, row: int) -> NoiseSource | None:
        """Where `row`'s sigma came from, or None when `row` is not judged against the level
        since a change."""
        at = int(np.searchsorted(self.rows, row))
        if at >= self.rows.size or self.rows[at] != row:
            return None
        return NoiseSource(
            int(self.noise_first[at]),
            int(self.change[at]) - 1,
            float(self.noise[at]),
            "floor" if self.floored[at] else self.noise_from,
            self.lag1,
        )

    def within(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows - first, level, sigma) of the rows in [first, stop)."""
        lo, hi = np.searchsorted(self.rows, [first, stop])
        return self.rows[lo:hi] - first, self.level[lo:hi], self.sigma[lo:hi]


@dataclass(frozen=True)
class NoiseSource:
    """The noise behind one after-change row's sigma: measured over rows `first`-`last`
    (the stretch before the change) as `noise`, read by `how` ("differences", "line", or
    "floor" when the floor was higher than it scaled), allowing for `lag1`."""

    first: int
    last: int
    noise: float
    how: str
    lag1: float

    def fields(self, steps: np.ndarray) -> dict:
        """The `SpikeEvent` fields that say where the row's sigma came from."""
        out = {
            "sigma_basis": self.how if self.how == "floor" else f"before-change-{self.how}",
            "sigma_first_step": int(steps[self.first]),
            "sigma_last_step": int(steps[self.last]),
            "sigma_noise_before": self.noise,
        }
        if self.how == "differences":
            out["sigma_noise_lag1"] = round(self.lag1, 3)
        return out


def after_change_baseline(
    steps: np.ndarray,
    loss: np.ndarray,
    changes: np.ndarray,
    thresholds: Thresholds,
    stretch_points: int,
    pooled_points: int | None,
    memory: NoiseMemory,
) -> AfterChange:
    """The baseline of the `stretch_points - 1` rows after each change (up to the next one)
    whose own window is still too short or reaches back across it.

    The noise before a change: with `pooled_points` (a sparse log, whose rule pools its
    noise from successive differences), the same pooled estimate over that many points
    before the change; else the spread around a line fitted to the points of the window
    before it (the curve's own fall is no noise)."""
    if changes.size == 0 or stretch_points < 2:
        return AfterChange.none()
    window = int(thresholds.spike_window_steps)
    k = int(thresholds.level_change_points)
    bounds = np.concatenate([[0], changes, [loss.size]])
    parts: list[tuple[np.ndarray, ...]] = []
    for start, c, stop in zip(
        bounds[:-2].tolist(), changes.tolist(), bounds[2:].tolist(), strict=True
    ):
        if c - start < k:
            # a change a few points after another is one drop the medians of different
            # lengths placed a few points apart: the noise is the one before the first
            earlier = changes[changes <= c - k]
            start = int(earlier[-1]) if earlier.size else 0
        # the stretch before: back to the change before it at most (a window over two
        # levels has the step in its spread)
        if pooled_points is not None:
            first = max(start, c - pooled_points - 1)
            noise = memory.difference_sigma(loss[first:c])
        else:
            first = max(start, int(np.searchsorted(steps, steps[c] - window, side="left")))
            noise = _spread_around_line(steps[first:c], loss[first:c])
        pre = loss[max(0, c - k) : c]
        pre = pre[np.isfinite(pre)]
        end = min(stop, c + stretch_points)
        if not (np.isfinite(noise) and pre.size and end > c + 1):
            continue
        rows = np.arange(c + 1, end)
        post = loss[c:end]
        finite = np.isfinite(post)
        total = np.cumsum(np.where(finite, post, 0.0))[:-1]
        count = np.cumsum(finite)[:-1]
        with np.errstate(invalid="ignore", divide="ignore"):
            level = total / count
            # the noise is a share of the loss: at the new level, the same share
            sigma = noise * np.abs(level / np.median(pre))
        floor = np.abs(level) * thresholds.sigma_floor_frac
        floored = ~(sigma > floor)
        sigma = np.maximum(sigma, floor)
        keep = (count > 0) & np.isfinite(level) & np.isfinite(sigma)
        n = int(keep.sum())
        parts.append(
            (
                rows[keep],
                level[keep],
                sigma[keep],
                np.full(n, c),
                np.full(n, first),
                floored[keep],
                np.full(n, noise),
            )
        )
    if not parts:
        return AfterChange.none()
    rows, level, sigma, change, noise_first, floored, noise_before = (
        np.concatenate(p) for p in zip(*parts, strict=True)
    )
    if pooled_points is None:
        return AfterChange(rows, level, sigma, change, noise_first, floored, noise_before)
    lag1 = 1.0 - memory.difference_share
    return AfterChange(
        rows, level, sigma, change, noise_first, floored, noise_before, "differences", lag1
    )


def replace_at(level: LocalLevel, at: np.ndarray, value: np.ndarray) -> LocalLevel:
    """`level` with the rows `at` judged against `value`: a flat level, neither the local
    level of a fall nor a rising trend (the few points since the change hold neither)."""
    falling, rise_slope, line = level.falling.copy(), level.rise_slope.copy(), level.line.copy()
    falling[at], rise_slope[at], line[at] = False, 0.0, value
    return replace(level, falling=falling, rise_slope=rise_slope, line=line)


def _spread_around_line(steps: np.ndarray, values: np.ndarray) -> float:
    finite = np.isfinite(values)
    if finite.sum() < 3:
        return np.nan
    x, y = steps[finite].astype(np.float64), values[finite]
    slope, intercept = np.polyfit(x - x.mean(), y, 1)
    residual = y - (intercept + slope * (x - x.mean()))
    return float(np.sqrt(np.sum(residual * residual) / (residual.size - 2)))
