"""§4: the decay a training curve follows before a rise - the shape the divergence onset
fits (detect/divergence_onset.py) carry on under the rise."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from stabilitycli.core.records import dataclass
from stabilitycli.detect.trend import bin_medians


def running_median(y: np.ndarray, points: int = 5) -> np.ndarray:
    """Centred running median over `points` finite values (fewer at the ends)."""
    series = pl.Series(y, dtype=pl.Float64)
    return series.rolling_median(points, center=True, min_samples=1).to_numpy()


def running_median_rows(y: np.ndarray, lo: int, hi: int, points: int = 5) -> np.ndarray:
    """`running_median(y, points)[lo:hi]`, from those rows and the few either side that
    their windows reach: each window's median is of its own values alone."""
    reach = points // 2
    first = max(0, lo - reach)
    piece = running_median(y[first : min(y.size, hi + reach)], points)
    return piece[lo - first : hi - first]


DECAY_FIT_BINS = 512  # the decay before the fit region is fitted to this many bin medians
DECAY_TIME_CONSTANTS = np.geomspace(1e-3, 3.0, 80)  # widths tried, as fractions of the stretch
# power laws (1 + t / w)^-p, as training curves follow; p = inf is the exponential exp(-t / w)
DECAY_POWERS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, math.inf)
DECAY_EVIDENCE = 4.0  # Akaike's 2 per parameter, for the decay's width and power
DECAY_LOOKBACK = math.exp(-4.0)  # the ramp fit reaches back to where the decay is down to this


@dataclass(frozen=True)
class Decay:
    """A decay shape (1 + (step - from_step) / width)^-power, exp(-(step - from_step) / width)
    when the power is infinite: 1 at `from_step`, falling toward 0."""

    from_step: float
    width: float
    power: float

    def at(self, steps: np.ndarray) -> np.ndarray:
        """The shape at each of `steps`, in one new array (each step of the formula in
        place: the steps of a long ramp fit are millions)."""
        t = steps - self.from_step
        t /= self.width
        if math.isinf(self.power):
            np.negative(t, out=t)
            return np.exp(t, out=t)
        t += 1.0
        t **= -self.power  # `t ** p`, with its fast paths (p = -1: a reciprocal)
        return t

    def step_down_to(self, fraction: float) -> float:
        """The step where the shape has fallen to `fraction` of its value at from_step."""
        t = -math.log(fraction) if math.isinf(self.power) else fraction ** (-1 / self.power) - 1
        return self.from_step + t * self.width


def decay_before(steps: np.ndarray, loss: np.ndarray, first: int, last: int) -> Decay | None:
    """The shape of "a level plus a decay" fitted by least squares to the loss logged at
    indices first..last-1; None when the loss was not falling there.

    Training curves fall ever more slowly, so a straight fall fitted before
    the rise must be short, and a short stretch pins the level the rise
    starts from poorly. The shape (power and width) is tried on a grid (the
    level and the size of the decay are linear), on bin medians so that
    heavy-tailed noise cannot bend it and the cost does not grow with the log.
    """
    if last - first < 4:
        return None
    bins = bin_medians(
        steps[first:last], loss[first:last], math.ceil((last - first) / DECAY_FIT_BINS)
    )
    x = (bins.steps - bins.steps[0]).astype(float)
    if bins.values.size < 4 or not x[-1] > 0:
        return None
    widths = x[-1] * DECAY_TIME_CONSTANTS
    t = x[None, None, :] / widths[None, :, None]
    powers = np.array(DECAY_POWERS)[:, None, None]
    finite = np.isfinite(powers)
    shapes = np.where(finite, (1.0 + t) ** -np.where(finite, powers, 1.0), np.exp(-t))
    shapes = shapes.reshape(-1, x.size)
    centred = shapes - shapes.mean(axis=1, keepdims=True)
    spread = (centred * centred).sum(axis=1)
    along = centred @ (bins.values - bins.values.mean())
    # along > 0: the loss falls with the shape (a positive decay)
    explained = np.where(
        (spread > 0) & (along > 0), along**2 / np.where(spread > 0, spread, 1.0), -np.inf
    )
    if not np.isfinite(explained).any():
        return None
    # ...and only where it beats a straight line clearly (Akaike's criterion for its two
    # shape parameters): a short or noisy stretch says nothing about the curve's shape
    total = float(((bins.values - bins.values.mean()) ** 2).sum())
    x_centred = x - x.mean()
    line = float(x_centred @ bins.values) ** 2 / float(x_centred @ x_centred)
    left_by_line, left_by_decay = total - line, total - float(explained.max())
    if not (left_by_decay > 0 and left_by_line > left_by_decay) or (
        x.size * math.log(left_by_line / left_by_decay) < DECAY_EVIDENCE
    ):
        return None
    p, w = np.unravel_index(int(np.argmax(explained)), (len(DECAY_POWERS), widths.size))
    return Decay(float(bins.steps[0]), float(widths[w]), DECAY_POWERS[p])


def steepest_fall(steps: np.ndarray, loss: np.ndarray) -> int:
    """The index where the loss falls fastest, read from the 5-bin running median of
    `DECAY_FIT_BINS` bin medians (0 for too few points)."""
    if steps.size < 16:
        return 0
    bins = bin_medians(steps, loss, math.ceil(steps.size / DECAY_FIT_BINS))
    smooth = running_median(bins.values)
    if smooth.size < 3:
        return 0
    fastest = int(np.argmin(np.diff(smooth) / np.diff(bins.steps.astype(float))))
    return int(np.searchsorted(steps, bins.steps[fastest]))


# a fitted onset the raw loss still falls from by this fraction of its level (in a strictly
# falling run of points) is moved to the bottom of that fall: the rise cannot start above it


def lr_clock(steps: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """The LR-weighted step count at each of `steps`: the sum of |LR| / its peak over the
    steps up to each (each logged LR held over the gap to the next point), from `steps[0]`;
    the steps themselves when the LR is never above 0.

    A training curve falls with the distance its updates have moved it, which
    grows with the LR: in warmup and in a decay tail the loss falls slower than
    in steps at the peak LR, and the decay fitted over this count follows it.
    """
    scale = float(np.max(np.abs(lr)))
    if not scale > 0:
        return steps.astype(float)
    gaps = np.diff(steps.astype(float), prepend=float(steps[0]))
    return float(steps[0]) + np.cumsum(np.abs(lr) / scale * gaps)
