"""How much the loss noise of one logged point tells about the next, and what that costs.

Real training noise is not independent from step to step: the data order, the
optimizer's momentum and a logger's smoothing leave an AR(1)-like memory (lag-1
autocorrelation 0.3-0.8 in LM runs). Then a few neighbouring points sit high together
by chance, and a sum or a trend test over them sees more evidence than there is. The
number of independent points among n correlated ones is about n / F, with

    F(n) = 1 + 2 * sum_{k=1}^{n-1} (1 - k/n) * rho_k

(the variance of a sum of n points over n times the variance of one; Bayley and
Hammersley's effective sample size, as Yue and Wang correct the Mann-Kendall test).
rho_k is modelled as `share * decay**k`: an AR(1) part of the noise (its memory
`decay`) mixed with independent batch noise (which lowers `share` below 1).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from stabilitycli.detect.series import SeriesView

# the noise is measured away from the start (the warmup's fast fall bends a rolling
# mean) and on at most this many points (the estimate is steady long before that)
_SKIP_HEAD_FRAC = 0.1
_MIN_LAGS = 20  # points needed, in far lags
_MAX_POINTS = 1 << 18
_MAX_DECAY = 0.95
_CLIP_ROBUST_SIGMAS = 3.0
_NEGLIGIBLE = 1e-9  # a bin-to-bin memory this small is none


@dataclass(frozen=True)
class NoiseMemory:
    """rho_k = share * decay**k for k >= 1; lag1 is rho_1 as measured."""

    lag1: float
    decay: float
    share: float
    points: int  # points the estimate rests on

    @property
    def independent(self) -> bool:
        return self.share == 0.0

    @property
    def difference_share(self) -> float:
        """E[(x[i] - x[i-1])^2] / (2 sigma^2) = 1 - rho_1: neighbours that move together
        differ less than the noise is wide, so a sigma read from differences is divided
        by its root."""
        return 1.0 if self.independent else 1.0 - self.lag1

    def difference_sigma(self, values: np.ndarray, least: int = 2) -> float:
        """sigma from the successive differences of the finite `values`, allowing for this
        memory (`difference_share`); NaN under `least` differences."""
        change = np.diff(values[np.isfinite(values)])
        if change.size < least:
            return np.nan
        return float(np.sqrt(np.mean(change * change) / (2.0 * self.difference_share)))

    def variance_factor(self, n: int) -> float:
        """F(n): the variance of a sum of n consecutive points over n independent ones."""
        if self.independent or n < 2:
            return 1.0
        k = np.arange(1, n)
        return float(1.0 + 2.0 * np.sum((1.0 - k / n) * self.share * self.decay**k))

    def effective_points(self, n: int) -> float:
        """How many independent points n consecutive points are worth."""
        return n / self.variance_factor(n)

    def of_bins(self, bin_points: int) -> NoiseMemory:
        """The memory of the means of consecutive bins of `bin_points` points.

        For k >= 1 bins apart every pair of points is >= 1 apart, so the bins keep the
        AR form: decay**bin_points per bin, with a share from summing the pairs."""
        if self.independent or bin_points <= 1:
            return self
        b, phi = bin_points, self.decay
        decay = phi**b
        if decay < _NEGLIGIBLE:
            return NoiseMemory(0.0, 0.0, 0.0, self.points)
        d = np.arange(-(b - 1), b)
        pair = float(np.sum((b - np.abs(d)) * phi ** (b + d)))
        near = np.arange(1, b)
        variance = b + 2.0 * self.share * float(np.sum((b - near) * phi**near))
        lag1 = self.share * pair / variance
        return NoiseMemory(lag1, decay, lag1 / decay, self.points)

    def words(self) -> str:
        return f"lag-1 autocorrelation {self.lag1:.2f}"


INDEPENDENT = NoiseMemory(0.0, 0.0, 0.0, 0)


def noise_memory(values: np.ndarray, far_lag: int, min_lag1: float) -> NoiseMemory:
    """The memory of the noise of `values`; independent when its lag-1 autocorrelation is
    under `min_lag1` (a weak memory the window statistics absorb, or the estimate's own
    noise).

    From the spread of the differences k points apart against that `far_lag` points
    apart, where the memory has died out: 1 - rho_k = spread(k)^2 / spread(far)^2. Each
    spread is a median absolute deviation from the differences' local median, so
    neither the curve's slope (it moves that median) nor a spike (a few points among
    thousands) counts as memory; differences of heavy-tailed noise have the same shape
    at every lag, so their spreads compare as standard deviations do. Lag 2 over lag 1
    gives the AR part's decay.
    """
    ok = np.isfinite(values)
    # the log's own array where every value is finite (the usual case): a view, no copy
    finite = values if ok.all() else values[ok]
    del ok
    # a short log's estimate is too noisy to act on (its windows are few anyway)
    if finite.size < _MIN_LAGS * far_lag or far_lag < 3:
        return INDEPENDENT
    finite = finite[int(finite.size * _SKIP_HEAD_FRAC) :][-_MAX_POINTS:]
    far = _spread(finite, far_lag, far_lag)
    if not far > 0:
        return INDEPENDENT
    rho1 = 1.0 - (_spread(finite, 1, far_lag) / far) ** 2
    rho2 = 1.0 - (_spread(finite, 2, far_lag) / far) ** 2
    if not rho1 >= min_lag1:
        return NoiseMemory(rho1, 0.0, 0.0, int(finite.size))
    decay = min(_MAX_DECAY, max(rho2 / rho1, rho1))
    share = min(1.0, rho1 / decay)
    return NoiseMemory(rho1, decay, share, int(finite.size))


def _spread(values: np.ndarray, lag: int, far_lag: int) -> float:
    """The spread of the differences `lag` points apart about their local
    median (over about `far_lag` of them): the local median is the curve's slope times
    the lag, which a ramp, a decay or a level shift changes from place to place; it
    takes out about 1 / far_lag of the noise's variance, the same at every lag."""
    differences = values[lag:] - values[:-lag]
    deviation = differences - _centred_median(differences, far_lag | 1)
    # a root mean square, with the heavy tail pulled in to a few robust sigmas: steadier
    # than the median absolute deviation itself, and no spike counts as memory
    bound = _CLIP_ROBUST_SIGMAS * 1.4826 * float(np.median(np.abs(deviation)))
    np.clip(deviation, -bound, bound, out=deviation)
    return math.sqrt(float(deviation @ deviation) / deviation.size)


def _centred_median(values: np.ndarray, window: int) -> np.ndarray:
    """`pl.Series(values).rolling_median(window, center=True, min_samples=1)` for an odd
    `window`: the trailing median read half a window on, and the last half window's
    (cut short at the end) read from the values backwards. The same windows, so the same
    medians, but for the sign of a zero one (which of 0.0 and -0.0 polars keeps in the
    middle), which no spread reads; polars' centred windows cost 3-5 times its trailing
    ones (three medians over 2^18 points were most of the noise memory's time)."""
    half, n = window // 2, values.size
    if n < 2 * window:
        return pl.Series(values).rolling_median(window, center=True, min_samples=1).to_numpy()
    out = np.empty(n)
    out[: n - half] = pl.Series(values).rolling_median(window, min_samples=1).to_numpy()[half:]
    # row n - 1 - t (t < half) reads values[n - 1 - t - half:]: backwards, the first
    # half + t + 1 of them, a window cut short at the start
    backwards = pl.Series(values[::-1][: 2 * half]).rolling_median(window, min_samples=1)
    out[n - half :] = backwards.to_numpy()[half : 2 * half][::-1]
    return out


def inflation(memory: NoiseMemory, n: int) -> float:
    """sqrt(F(n)): how much wider the noise of a sum (or a trend statistic) of n points is."""
    return math.sqrt(memory.variance_factor(n))


def noise_memory_of(values: np.ndarray, thresholds: Thresholds) -> NoiseMemory:
    """`noise_memory` with the thresholds in force."""
    return noise_memory(values, thresholds.noise_far_lag_points, thresholds.noise_autocorr_min)


# the view's `derived` entry of the loss noise memory (a watch keeps the whole run's)
NOISE_MEMORY_KEY = "loss_noise_memory"


def loss_noise_memory(view: SeriesView, thresholds: Thresholds) -> NoiseMemory:
    """The memory of the run's loss noise, measured on the first call and kept on the view:
    the spike, level-change and trend rules all read it, and each measurement takes three
    rolling medians over up to 2^18 points."""
    key = f"{NOISE_MEMORY_KEY}/{thresholds.noise_far_lag_points}/{thresholds.noise_autocorr_min}"
    cached = view.derived.get(key)
    if cached is None:
        cached = view.derived[key] = noise_memory_of(view.finite_points("loss")[1], thresholds)
    return cached


def excess_bar_sigma(memory: NoiseMemory, thresholds: Thresholds) -> float:
    """The accumulated-excess bar of a multi-point spike, in baseline sigmas, for this noise.

    `spike_excess_sigma` is set for independent points; correlated neighbours sum to a
    wider spread (sqrt F(m) as wide for m points), so the bar rises with it, up to
    `spike_excess_max_sigma` (the spec's own bar, 5 sigma at each of 3 points): a bump
    that high is material whatever the noise does.

    It rises by the square root of that, F(m)^(1/4): the bar is far out in the sum's
    tail (each point >= `spike_excess_min_sigma` too), where correlated noise gains less
    than its spread says. Widened by the whole sqrt F(3), AR(1)-mix noise (phi 0.3-0.8,
    half its variance independent) put the bar at 12.5-14.5 sigma, over the 12-13 that
    a three-point bump of exactly the spec's 5 sigma sums to after the noise and a
    trailing baseline take their share: found about half the time (issue 36's LM
    benchmark, every logged step).
    """
    widened = thresholds.spike_excess_sigma * math.sqrt(
        inflation(memory, thresholds.spike_excess_points)
    )
    return max(thresholds.spike_excess_sigma, min(widened, thresholds.spike_excess_max_sigma))
