"""How far one curve is from another, and whether that is more than noise.

The numeric core behind `stab compare` and the restart-replay rule, all
vectorised (numpy, polars rolling windows):

* `align`: two logged series onto one grid, the coarser of the two (the finer
  one is interpolated; a grid point the finer series also logged takes its
  exact value, so NaN and Inf survive);
* `Smoothing`: the same EMA or trailing window over both curves, and the
  factor by which it shrinks independent noise;
* `local_noise` / `window_noise`: the noise level of a curve measured in the
  curve itself: the RMS of its residual around its own rolling median, with
  residuals beyond 5 robust sigmas clipped so a spike does not count as noise;
* `judge`: deviation, the band, the points outside it, where the curves part
  for good and from where they agree again.

Mini-batch loss is noisy and heavy-tailed, so a point counts as outside the
band only when the median of it and its neighbours (`judge_points`, centred)
is outside: one noisy point never fails a comparison; three in five do. A
non-finite value on one side only is always outside.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.records import dataclass

RESIDUAL_POINTS = 21  # rolling median the residual is measured around (points)
NOISE_WINDOW_POINTS = 101  # points the local noise RMS is taken over
CLIP_SIGMAS = 5.0  # residuals beyond this many robust sigmas are outliers, not noise
REL_NOISE_FLOOR = 1e-3  # noise is at least this fraction of |value| (a flat LR has none)


@dataclass(frozen=True)
class Smoothing:
    """`ema:ALPHA` (exponential, debiased start) or `window:N` (trailing mean of N points)."""

    kind: str
    value: float

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.value:g}"

    @classmethod
    def parse(cls, text: str) -> Smoothing:
        kind, _, raw = text.strip().partition(":")
        kind = kind.strip().lower()
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if kind == "ema" and 0 < number <= 1:
            return cls("ema", number)
        if kind == "window" and number >= 1 and number == int(number):
            return cls("window", float(int(number)))
        raise StabUsageError(
            f"--smooth expects ema:ALPHA (0 < ALPHA <= 1) or window:N (N >= 1), got {text!r}"
        )

    def apply(self, values: np.ndarray) -> np.ndarray:
        series = pl.Series(values, dtype=pl.Float64)
        if self.kind == "ema":
            return series.ewm_mean(alpha=self.value, adjust=True).to_numpy()
        return series.rolling_mean(int(self.value), min_samples=1).to_numpy()

    def noise_factor(self, n: int) -> np.ndarray:
        """Per point: std of the smoothed value / std of one raw point, for i.i.d. noise."""
        idx = np.arange(n, dtype=np.float64)
        if self.kind == "window":
            return 1.0 / np.sqrt(np.minimum(idx + 1, self.value))
        q = 1.0 - self.value
        if q == 0.0:
            return np.ones(n)
        # debiased EMA weights q^i over i = 0..t: sqrt(sum w^2) / sum w
        sum_w = (1 - q ** (idx + 1)) / (1 - q)
        sum_w2 = (1 - q ** (2 * (idx + 1))) / (1 - q * q)
        return np.sqrt(sum_w2) / sum_w


@dataclass(frozen=True)
class Aligned:
    """Two series on one grid. `grid_from` names the series whose points are the grid."""

    x: np.ndarray
    steps: np.ndarray  # the grid series' own steps at each grid point
    base: np.ndarray
    cand: np.ndarray
    grid_from: str  # "both" (same points), "baseline" or "candidate"
    interpolated_points: int  # grid points the other series did not log itself


def align(
    base: tuple[np.ndarray, np.ndarray, np.ndarray],
    cand: tuple[np.ndarray, np.ndarray, np.ndarray],
    lo: float,
    hi: float,
) -> Aligned:
    """`base`/`cand` are (x, steps, values) sorted by x; compared over [lo, hi] on the coarser
    grid."""
    bx, bs, bv = (a[(base[0] >= lo) & (base[0] <= hi)] for a in base)
    cx, cs, cv = (a[(cand[0] >= lo) & (cand[0] <= hi)] for a in cand)
    if bx.size == cx.size and np.array_equal(bx, cx):
        return Aligned(bx, bs, bv, cv, "both", 0)
    # the finer series is interpolated from all its points: neighbours may lie just outside [lo, hi]
    if bx.size <= cx.size:
        values, exact = _resample(cand[0], cand[2], bx)
        return Aligned(bx, bs, bv, values, "baseline", int((~exact).sum()))
    values, exact = _resample(base[0], base[2], cx)
    return Aligned(cx, cs, values, cv, "candidate", int((~exact).sum()))


def _resample(x: np.ndarray, v: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Linear interpolation of (x, v) at `grid`; exact hits keep the logged value (NaN/Inf too)."""
    if x.size == 0:
        return np.full(grid.size, np.nan), np.zeros(grid.size, dtype=bool)
    pos = np.clip(np.searchsorted(x, grid), 0, x.size - 1)
    exact = x[pos] == grid
    out = np.interp(grid, x, v) if x.size > 1 else np.full(grid.size, v[0])
    out[exact] = v[pos[exact]]
    # beyond the other series' ends there is nothing to interpolate from
    out[(grid < x[0]) | (grid > x[-1])] = np.nan
    return out, exact


def _residual(values: np.ndarray) -> np.ndarray:
    series = pl.Series(values, dtype=pl.Float64)
    return (series - series.rolling_median(RESIDUAL_POINTS, center=True, min_samples=1)).to_numpy()


def local_noise(x: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Noise sigma of (x, values) around each point of `at` (measured on finite points only)."""
    finite = np.isfinite(values)
    fx, fv = x[finite], values[finite]
    floor = REL_NOISE_FLOOR * np.abs(np.interp(at, fx, fv)) if fx.size else np.zeros(at.size)
    if fx.size < 5:
        return np.maximum(floor, 1e-12)
    resid = pl.Series(_residual(fv))
    mad = (
        1.4826 * resid.abs().rolling_median(NOISE_WINDOW_POINTS, center=True, min_samples=1)
    ).to_numpy()
    clipped = np.clip(resid.to_numpy(), -CLIP_SIGMAS * mad, CLIP_SIGMAS * mad)
    rms = (
        pl.Series(clipped**2)
        .rolling_mean(NOISE_WINDOW_POINTS, center=True, min_samples=1)
        .sqrt()
        .to_numpy()
    )
    return np.maximum(np.interp(at, fx, rms), np.maximum(floor, 1e-12))


def window_noise(
    steps: np.ndarray, values: np.ndarray, lo: int, hi: int, min_points: int = 5
) -> tuple[float, int, int]:
    """One noise sigma over steps [lo, hi] (widened back to `min_points` points).

    Returns (sigma, first, last)."""
    finite = np.isfinite(values)
    fs, fv = steps[finite], values[finite]
    if fs.size == 0:
        return math.nan, lo, hi
    resid = _residual(fv)
    inside = np.flatnonzero((fs >= lo) & (fs <= hi))
    if inside.size < min_points:
        end = inside[-1] + 1 if inside.size else int(np.searchsorted(fs, hi, side="right"))
        inside = np.arange(max(0, end - min_points), end)
    if inside.size == 0:
        return math.nan, lo, hi
    r = resid[inside]
    mad = 1.4826 * float(np.median(np.abs(r)))
    r = np.clip(r, -CLIP_SIGMAS * mad, CLIP_SIGMAS * mad)
    level = float(np.median(np.abs(fv[inside])))
    sigma = max(float(np.sqrt(np.mean(r**2))), REL_NOISE_FLOOR * level, 1e-12)
    return sigma, int(fs[inside[0]]), int(fs[inside[-1]])


@dataclass(frozen=True)
class Judgement:
    """Deviation of candidate from baseline on a grid, against a band."""

    deviation: np.ndarray  # cand - base; +inf where only one side is non-finite
    judged: np.ndarray  # rolling median of the deviation (what is held to the band)
    tolerance: np.ndarray
    outside: np.ndarray  # bool per grid point
    mismatches: int  # points non-finite on one side only

    @property
    def passed(self) -> bool:
        return not bool(self.outside.any())

    def stats(self, x: np.ndarray) -> dict:
        """Named numbers: max/mean |deviation|, points outside, divergence and recovery points."""
        dev = self.deviation
        finite = np.isfinite(dev)
        absdev = np.abs(dev)
        n = dev.size
        worst = int(np.argmax(np.where(np.isnan(absdev), -1.0, absdev))) if n else None
        ratio = np.abs(self.judged) / self.tolerance
        out = self.outside
        diverged = within = None
        if n and out[-1]:
            calm = np.flatnonzero(~out)
            diverged = int(calm[-1] + 1) if calm.size else 0
        elif n and out.any():
            within = int(np.flatnonzero(out)[-1] + 1)
        first_out = np.flatnonzero(out)
        return {
            "points": int(n),
            "max_abs_deviation": float(absdev[worst]) if worst is not None else None,
            "max_deviation": float(dev[worst]) if worst is not None else None,
            "max_deviation_at": _x(x, worst),
            "mean_abs_deviation": float(absdev[finite].mean()) if finite.any() else None,
            "worst_band_ratio": float(np.nanmax(np.where(np.isfinite(ratio), ratio, np.inf)))
            if n
            else None,
            "points_outside": int(out.sum()),
            "nonfinite_mismatches": int(self.mismatches),
            "first_outside": _x(x, int(first_out[0])) if first_out.size else None,
            "diverged_at": _x(x, diverged),
            "within_from": _x(x, within),
        }


def _x(x: np.ndarray, i: int | None):
    if i is None:
        return None
    value = x[i]
    return int(value) if float(value).is_integer() else float(value)


def judge(
    base: np.ndarray, cand: np.ndarray, tolerance: np.ndarray, judge_points: int = 5
) -> Judgement:
    """Hold `cand - base` to +-tolerance; see the module doc for what counts as outside."""
    if judge_points < 1:
        raise StabUsageError("judge_points must be >= 1")
    with np.errstate(invalid="ignore"):  # Inf - Inf is NaN here, and set to 0 just below
        dev = cand - base
    base_bad, cand_bad = ~np.isfinite(base), ~np.isfinite(cand)
    # the same non-finite value on both sides (both NaN, or the same Inf) is agreement
    same = base_bad & cand_bad & ((np.isnan(base) & np.isnan(cand)) | (base == cand))
    dev = np.where(same, 0.0, dev)
    mismatch = (base_bad | cand_bad) & ~same
    dev = np.where(mismatch, np.inf, dev)
    if judge_points > 1 and dev.size:
        judged = pl.Series(dev).rolling_median(judge_points, center=True, min_samples=1).to_numpy()
    else:
        judged = dev.copy()
    outside = (np.abs(judged) > tolerance) | mismatch
    return Judgement(dev, judged, tolerance, outside, int(mismatch.sum()))
