"""§4: the onset of a rise dated by a change-point fit of its whole shape (#36).

A divergence that accelerates (the loss rising as (t - t0)^2 or faster) has
risen a small fraction of the noise by the time a straight-line or binned bend
fit can see it, so those fits date it late, by a quarter of its length or
more. Post hoc the whole rise is logged, and fitting its shape over all its
points dates t0 far better: the loss over a stretch that starts well before
the rise and ends at the end of the log is fitted by least squares as

    y = a + d * u + c * decay(t) + b * (t - t0)_+^p,   b > 0

(u the step, scaled; `decay` the run's own decay curve fitted before the rise,
when it has one; p one of `RISE_POWERS`), the trend before the rise carried on
under it, as a falling training curve does. For each p every start t0 of a grid
is fitted at once: (t - t0)^p is a polynomial in t, so each sum the fit needs
is a combination of suffix sums of t^k, t^k * y and t^k * decay read at t0,
one pass over the points a chunk of rows at a time (`sums_at`). The steps are
measured from the end of the log, so that the sums of a short rise near the end
do not cancel.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb
from typing import Any

import numpy as np

from stabilitycli.core.records import dataclass
from stabilitycli.frame import plain_numpy

# straight, accelerating as t^2 and as t^3; a straight best is left to the ramp fit
RISE_POWERS = (1, 2, 3)
POWER_EVIDENCE = 10.0  # n ln(SSE ratio) a steeper power needs over a gentler one
POWER_FIT_BACK = 3.0  # the fit reaches back this many times the rise's length before it
POWER_FIT_STARTS = 1024  # starts tried on a grid, then every logged point near the best
POWER_FIT_ROUNDS = 2  # refits, each from the last one's onset (the decay refitted before it)
# starts are not tried in the first tenth of the stretch: the trend before needs points
POWER_FIT_LEAD = 0.1
# ...nor further before the straight ramp's start than this many times that ramp's rise to the
# end of the log: a straight ramp fitted to a rise as (t - t0)^p, p <= 3, starts its rise at
# most ~60% of the way from t0 to the end (#36); an earlier t0 is the trend's misfit (a fast
# early fall the decay curve does not follow), not the rise
POWER_FIT_BEFORE_RAMP = 1.5

SumsAt = Callable[
    [Callable[[int, int], list[np.ndarray]], int, list[np.ndarray]], list[list[np.ndarray]]
]


@dataclass(frozen=True)
class PowerFit:
    """The best fit of the module's shape: the start t0, the power p, its squared error,
    the stretch it was fitted over (first and last logged step), and the start of the
    straight ramp it replaced."""

    start_step: int
    power: int
    sse: float
    first_step: int
    last_step: int
    ramp_start_step: int  # where the straight ramp fit, which this fit beat, started the rise
    trend: str = "a line"  # the trend's columns carried on under the rise, in words
    # the first and last start from which some power fits as well (`start_range`), and the
    # residuals' lag-1 correlation that interval allowed for
    range_steps: tuple[int, int] | None = None
    residual_lag1: float = 0.0

    def numbers(self) -> dict[str, Any]:
        """The finding's evidence of how the onset was dated (TrendEvidence's onset_ fields)."""
        return {
            "onset_fit": self.words(),
            "onset_fit_steps": [self.first_step, self.last_step],
            "onset_power": self.power,
        } | ({} if self.range_steps is None else {"onset_range_steps": list(self.range_steps)})

    def words(self) -> str:
        """How the onset was dated, every number said for what it is."""
        shape = "in a straight line" if self.power == 1 else f"as (t - t0)^{self.power}"
        return (
            f"onset fitted: the loss rises {shape} from step {self.start_step} (t0), the trend "
            f"before it ({self.trend}) carried on under it, fitted by least squares over steps "
            f"{self.first_step}-{self.last_step}"
            + ("" if self.range_steps is None else self._range_words())
        )

    def _range_words(self) -> str:
        assert self.range_steps is not None
        lo, hi = self.range_steps
        if lo == hi:
            return ""
        return (
            f"; a rise from any step in {lo}-{hi} fits as well (within chi^2(1) 95% of the "
            f"best squared error, for powers 1-3, the residuals' lag-1 correlation "
            f"{self.residual_lag1:.2f} allowed for)"
        )


def power_fit(
    x: np.ndarray,
    y: np.ndarray,
    extra: list[np.ndarray],
    starts: np.ndarray,
    sums_at: SumsAt,
) -> tuple[float, float, int] | None:
    """(squared error, start, power) of the best fit over `starts` (module doc), or None
    when no start fits a rise. `x` ascending steps, `y` the loss (wild points clipped)."""
    return best_power(error_profile(x, y, extra, starts, sums_at), starts, x.size)


Profile = list[tuple[int, np.ndarray]]  # (power, squared error from each start)


def best_power(profile: Profile, starts: np.ndarray, n: int) -> tuple[float, float, int] | None:
    """(squared error, start, power) of the best fit of an `error_profile` over `starts`."""
    best: tuple[float, float, int] | None = None
    for p, sse in profile:  # loop over a few shapes
        i = int(np.argmin(sse))
        # a steeper power dates the start earlier for almost the same error (the rise's first
        # part is under the noise either way): it wins only by Akaike's evidence, n ln(ratio)
        if best is None or _clearly_better(float(sse[i]), best[0], n):
            best = (float(sse[i]), float(starts[i]), p)
    return best


# a start is as good as the best where n_eff ln(SSE / best SSE) stays under chi^2(1) at 95%:
# the profile-likelihood interval of one parameter, here t0 over every power tried
START_RANGE_EVIDENCE = 3.84


def start_range(
    profile: Profile, starts: np.ndarray, best_sse: float, points: float
) -> tuple[float, float]:
    """The first and last of `starts` from which some power of the profile fits as well as
    the best fit (`START_RANGE_EVIDENCE` over `points` effective points)."""
    bound = best_sse * np.exp(START_RANGE_EVIDENCE / max(points, 1.0))
    inside = np.zeros(starts.size, dtype=bool)
    for _, sse in profile:  # loop over a few shapes
        inside |= sse <= bound
    if not inside.any():
        return float(starts[0]), float(starts[-1])
    return float(starts[inside].min()), float(starts[inside].max())


def effective_points(
    x: np.ndarray, y: np.ndarray, extra: list[np.ndarray], start: float, power: int
) -> tuple[float, float]:
    """The number of independent points the fit's residuals are worth, n (1 - r) / (1 + r),
    and r, their lag-1 correlation (0 when negative): correlated noise (an AR(1) loss) tells
    less about where the rise began than as many independent points would."""
    end, span = float(x[-1]), max(float(x[-1] - x[0]), 1.0)
    u = (x - end) / span
    rise = np.maximum(0.0, (x - start) / span) ** power
    design = np.column_stack([np.ones(x.size), u, *extra, rise])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    del design
    residual -= residual.mean()
    scale = float(residual @ residual)
    r = float(residual[1:] @ residual[:-1]) / scale if scale > 0 else 0.0
    r = min(max(r, 0.0), 0.99)
    return x.size * (1.0 - r) / (1.0 + r), r


def error_profile(
    x: np.ndarray,
    y: np.ndarray,
    extra: list[np.ndarray],
    starts: np.ndarray,
    sums_at: SumsAt,
) -> list[tuple[int, np.ndarray]]:
    """For each power p of `RISE_POWERS` that fits a rise from some start, the squared error
    of the module's fit from each of `starts` (inf where no rise fits from it).

    The trend carried on under the rise is the curve's own fall, so past the
    start it may not rise (checked at `TREND_PROBES` points): a trend that turns
    up there has taken part of the rise into itself (a free LR column turning the
    anneal of a decay tail around, a decay fitted long before the rise given a
    negative size), and the rise left over starts late or early. Where the fit on
    every column makes such a trend, the fits on fewer of the `extra` columns
    (each subset, `_SUBSETS`) stand in, the best of those whose trend does not
    rise: a search over a handful of nested models, not an exact constrained
    least squares."""
    end, span = float(x[-1]), max(float(x[-1] - x[0]), 1.0)
    u = (x - end) / span  # in [-1, 0]: a short rise near the end sums small numbers
    t = (starts - end) / span
    n, top = u.size, 2 * max(RISE_POWERS)
    design = np.column_stack([np.ones(n), u, *extra])
    gram = design.T @ design
    along = design.T @ y
    # the trend's columns at a few points across the stretch, where its fall is checked
    probe = plain_numpy.unique(np.linspace(0, n - 1, TREND_PROBES).round().astype(int))
    probed, probe_u = design[probe], u[probe]
    del design
    total = float(y @ y)
    after_start = probe_u[None, :-1] >= t[:, None]  # each probe interval past each start
    # a trend flat to the rounding of its sums is not rising
    tolerance = 1e-9 * float(np.max(np.abs(y)))

    def columns(lo: int, hi: int) -> list[np.ndarray]:
        """Rows lo..hi-1 of u^k (k <= top), and u^k * y and u^k * each extra trend
        column (k <= top / 2)."""
        us = u[lo:hi]
        powers = [np.ones(hi - lo)]
        for _ in range(top):  # loop over powers of u, not rows
            powers.append(powers[-1] * us)
        out = list(powers)
        for column in (y, *extra):  # loop over a few columns, not rows
            out += [p * column[lo:hi] for p in powers[: top // 2 + 1]]
        return out

    after = np.searchsorted(u, t, side="right")  # the first point past each start
    sums = sums_at(columns, n, [after])[0]
    half = top // 2 + 1
    plain, with_y = sums[: top + 1], sums[top + 1 : top + 1 + half]
    with_extra = [
        sums[top + 1 + half * (e + 1) : top + 1 + half * (e + 2)] for e in range(len(extra))
    ]
    out: list[tuple[int, np.ndarray]] = []
    for p in RISE_POWERS:  # loop over a few shapes, each over every start at once
        # (u - t)^p = sum_k C(p, k) u^k (-t)^(p - k): every sum of the rise column is one
        # of the suffix sums above, weighted by powers of the start
        def rise_sum(column: list[np.ndarray], power: int, shift: int = 0) -> np.ndarray:
            return sum(
                (
                    comb(power, k) * (-t) ** (power - k) * column[k + shift]
                    for k in range(power + 1)
                ),
                start=np.zeros(t.size),
            )

        gg = rise_sum(plain, 2 * p)
        gy = rise_sum(with_y, p)
        g_base = [rise_sum(plain, p), rise_sum(plain, p, 1)]
        g_base += [rise_sum(column, p) for column in with_extra]
        gb_all = np.column_stack(g_base)
        sse = np.full(t.size, np.inf)
        for keep in _SUBSETS[len(extra)]:  # loop over a few subsets of the trend columns
            cols = [0, 1, *(2 + e for e in keep)]
            inverse = np.linalg.pinv(gram[np.ix_(cols, cols)])
            base_coef = inverse @ along[cols]
            gb = gb_all[:, cols]
            # the rise column's part the trend columns do not explain, and its fit to y
            num = gy - gb @ base_coef
            den = gg - np.einsum("ij,jk,ik->i", gb, inverse, gb)
            usable = (den > 1e-12 * np.maximum(gg, 1e-300)) & (num > 0)
            rise = np.where(usable, num / np.where(usable, den, 1.0), 0.0)
            # the trend's coefficients with the rise in the fit (partitioned least squares),
            # and the trend they make: it may not rise anywhere past the start
            coef = base_coef[None, :] - (gb @ inverse) * rise[:, None]
            steps_up = np.diff(coef @ probed[:, cols].T, axis=1)
            usable &= ~np.any(after_start & (steps_up > tolerance), axis=1)
            fit = total - float(along[cols] @ base_coef) - rise * num
            sse = np.where(usable & (fit < sse), fit, sse)
        if np.isfinite(sse).any():
            out.append((p, sse))
    return out


TREND_PROBES = 64  # points across the stretch where the trend under the rise must not rise
# every subset of up to 3 trend columns, as the indices kept, the whole set first
_SUBSETS = {
    k: [[e for e in range(k) if not (drop >> e) & 1] for drop in range(1 << k)] for k in range(4)
}


def _clearly_better(sse: float, than: float, n: int) -> bool:
    """Whether a squared error `sse` beats `than` by Akaike's `POWER_EVIDENCE` over `n`
    points (a fit with no error left beats any that has some; none beats a degenerate 0)."""
    if not than > 0:
        return False
    return sse <= 0 or n * np.log(than / sse) >= POWER_EVIDENCE


def linear_ramp_sse(
    x: np.ndarray, y: np.ndarray, extra: list[np.ndarray], start: float, stop: float
) -> float:
    """The squared error of the same trend with a straight rise from `start` that levels off
    at `stop` (the ramp fit's shape), over the same points: what the power fit must beat."""
    end, span = float(x[-1]), max(float(x[-1] - x[0]), 1.0)
    u = (x - end) / span
    rise = np.clip(x - start, 0.0, max(stop - start, 0.0))
    design = np.column_stack([np.ones(u.size), u, rise, *extra])
    gram = design.T @ design
    along = design.T @ y
    coef = np.linalg.pinv(gram) @ along
    return float(y @ y - along @ coef)
