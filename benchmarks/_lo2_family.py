"""LO2's oracles NOT told the curve (issue #36), for benchmarks/_lo2_limits.py.

`_lo2_limits` divides each run by its noise-free level: no detector has that. These
oracles are told only a family of curves and fit its coefficients with the ramp:

* **family**: told the generator's curve family with its nonlinear constants (the
  power law's s0 and alpha, the LR schedule, the warmup), not its linear coefficients.
  The LO2 runs are cosine, linear and WSD pretraining curves (no epochs, curriculum or
  hump: `_dq_lm_synth._shape_for` gives those only to other places), whose level
  (floor + amp * P) * (1 - gain * A) is exactly a linear combination of
  {1, P, A, P * A}: P = (1 + S / (s0 * T))^-alpha of the LR-weighted step count S,
  A = 1 - LR / peak after the warmup (0 in it). Fitted over the whole run.
* **product form**: the same family as the generator multiplies it,
  (f + a P) * (1 - G * A), f, a and the anneal's gain G >= 0 fitted (G on a grid,
  then refined); **gain told**: the same told G, what knowing the anneal's size is worth.
* **generic**: a basis a detector could use without the generator, the columns of
  stab's power fit with the LR-weighted step count in place of its fitted decay:
  {1, t, LR, LR * S} (S scaled to 1 at the end of the run), over the stretch stab's
  power fit uses (from three ramp lengths before the true onset, not before the LR's
  peak, to the end of the log).

The ramp adds h * level * x^2, so the loss is level * (1 + h * g + sigma * noise):
linear in the basis only once the level multiplying g is known. Each fit is made on
z = y / l (l a level estimate, the noise then of one scale throughout): z ~ (B / l) c
+ b * g, b > 0, every candidate (onset, end) scored at once (prefix sums, as in
`_lo2_limits.quadratic_ramp_onset`, over the basis's prewhitened columns too). l starts
as the basis fitted to the whole stretch alone and is then refitted from the best
fit's basis part, until the best pair repeats (`LEVEL_ROUNDS` at most): a feasible
least squares, exact at zero noise.
"""

from __future__ import annotations

import numpy as np
from _dq_lm_synth import ANNEAL_GAIN, CURVES, PEAK_LR, LMRun

START_CHUNK = 128  # candidate onsets scored at once (memory: chunk x ends x columns floats)
LEVEL_ROUNDS = 4  # refits of the level under the ramp, each from the last best fit
COARSE = 4  # the level's refits score every 4th candidate start and end...
REFINE_STRIDES = 2  # ...then every one within 2 such strides of the best
REFINE_ROUNDS = 3  # refits of the level among those neighbours, while the pair moves
LEVEL_FLOOR_FRAC = 0.05  # a level estimate is kept above this share of the loss's median
FIT_BACK = 3.0  # the generic fit reaches back this many ramp lengths (stab's POWER_FIT_BACK)
FAMILY_ORACLES = (
    *(
        f"{basis}_{length}_{fit}"
        for basis in ("family", "generic")
        for length in ("told", "free")
        for fit in ("gls", "ols")
    ),
    "anneal_told_gls",
    "anneal_free_gls",
    "gain_free_gls",
)
# the anneal's gain tried by the product-form family fit, up to 2.5x the generator's, on a
# grid that does not hold it (a fit on it would be told a coefficient), then refined
ANNEAL_GAINS = np.arange(0.005, 0.15, 0.01)
GOLDEN_ROUNDS = 6  # golden-section steps of the gain: its interval narrowed to ~5% of 2 steps


def family_basis(run: LMRun) -> np.ndarray:
    """{1, P, A, P * A} at every logged point (module doc): the level's exact span."""
    kind, shape = run.shape.kind, run.shape
    assert kind in ("cosine", "linear", "wsd"), kind  # the LO2 places' curves
    _, _, alpha, s0 = CURVES["pretrain"]
    steps = run.frame["step"].to_numpy()
    lr = run.frame["lr"].to_numpy()
    interval = int(steps[1] - steps[0])
    seen = np.cumsum(lr / PEAK_LR) * interval
    power = (1.0 + seen / (s0 * shape.total)) ** -alpha
    anneal = np.where(steps >= shape.warmup, 1.0 - lr / PEAK_LR, 0.0)
    return np.column_stack([np.ones(steps.size), power, anneal, power * anneal])


def generic_basis(run: LMRun, onset: int) -> tuple[np.ndarray, int]:
    """{1, t, LR, LR * S} (module doc) from the first point of the generic fit on, and
    that point's index."""
    steps = run.frame["step"].to_numpy().astype(float)
    lr = run.frame["lr"].to_numpy()
    n = steps.size
    peak = int(np.argmax(lr))
    lo = max(peak, int(onset - FIT_BACK * (n - 1 - onset)), 0)
    clock = np.cumsum(lr / lr.max())
    t = (steps - steps[-1]) / max(steps[-1] - steps[lo], 1.0)  # in [-1, 0] over the stretch
    lr_scaled = lr / lr.max()
    cols = [np.ones(n), t, lr_scaled, lr_scaled * clock / clock[-1]]
    return np.column_stack(cols)[lo:], lo


def _prewhiten(values: np.ndarray, phi: float) -> np.ndarray:
    """r_t - phi * r_(t-1) along the first axis; the first row (no predecessor) zero."""
    out = np.zeros_like(values)
    out[1:] = values[1:] - phi * values[:-1]
    return out


def _power_sums(d: np.ndarray) -> list[np.ndarray]:
    """sum of u^k for u = 1..d, k = 0..4 (Faulhaber), exact for any d."""
    s1 = d * (d + 1) / 2
    s2 = d * (d + 1) * (2 * d + 1) / 6
    s4 = s2 * (3 * d * d + 3 * d - 1) / 5
    return [d, s1, s2, s1 * s1, s4]


def hinge_tables(n: int, phi: float):
    """The prewhitened x^2 ramp's coefficients and its tables by length D (shared with
    `_lo2_limits.quadratic_ramp_onset`): g~ at u points from the start is p(u) / D^2 with
    p(u) = u^2 - phi (u - 1)^2 = a u^2 + b u + c, `hold` after the end; `inv_d2[D]` = 1/D^2
    and `pp_d4[D]` = sum of p(u)^2 for u = 1..D over D^4 (placeholders at D = 0, an end
    before the start, which the callers score out)."""
    a, b, c = 1.0 - phi, 2.0 * phi, -phi
    hold = 1.0 - phi
    s0, s1, s2, s3, s4 = _power_sums(np.arange(1, n, dtype=float))
    pp = a * a * s4 + 2 * a * b * s3 + (b * b + 2 * a * c) * s2 + 2 * b * c * s1 + c * c * s0
    inv_d2 = np.r_[0.0, 1.0 / np.arange(1, n, dtype=float) ** 2]
    pp_d4 = np.r_[1.0, pp * inv_d2[1:] ** 2]
    return (a, b, c), hold, inv_d2, pp_d4


def best_pair(
    columns: np.ndarray, phi: float, starts: np.ndarray, ends: np.ndarray
) -> tuple[int, int]:
    """The (start, end) of the best fit of columns[:, 0] ~ b * g~, b > 0, with g~ the
    prewhitened ramp shape of `_lo2_limits.quadratic_ramp_onset` (0 to the start, x^2 to
    the end, 1 after) and columns[:, 1:] an orthonormal basis the fit also has (already
    projected out of column 0): the pair explaining most, (g~ r)^2 / (g~ g~ - |Q' g~|^2).

    Every column is a prewhitened series (first row 0); g~'s sums with each come from
    prefix sums of i^k times it (k <= 2), every pair of a chunk of starts at once.
    """
    n, m = columns.shape
    i = np.arange(n, dtype=float)[:, None]
    pre = [np.concatenate([np.zeros((1, m)), np.cumsum(columns * i**k, axis=0)]) for k in range(3)]
    (a, b, c), hold, inv_d2, pp_d4 = hinge_tables(n, phi)
    total = pre[0][n]
    best_score, best = -np.inf, (int(starts[0]), int(ends[-1]))
    for lo in range(0, starts.size, START_CHUNK):
        i0 = starts[lo : lo + START_CHUNK][:, None]
        i1 = ends[np.searchsorted(ends, i0[0, 0], side="right") :][None, :]
        if i1.size == 0:
            break
        d = np.maximum(i1 - i0, 0)
        at0, at1 = i0 + 1, i1 + 1
        y0 = pre[0][at1] - pre[0][at0]
        x1 = pre[1][at1] - pre[1][at0]
        y1 = x1 - i0[..., None] * y0
        y2 = (pre[2][at1] - pre[2][at0]) - i0[..., None] * (2 * x1 - i0[..., None] * y0)
        sums = (a * y2 + b * y1 + c * y0) * inv_d2[d][..., None] + hold * (total - pre[0][at1])
        del y0, x1, y1, y2
        gg = pp_d4[d] + hold * hold * (n - 1 - i1)
        gy = sums[..., 0]
        den = gg - np.einsum("...k,...k->...", sums[..., 1:], sums[..., 1:])
        ok = (d > 0) & (gy > 0) & (den > 1e-12 * gg)
        score = np.where(ok, gy * gy / np.where(ok, den, 1.0), -np.inf)
        at = np.unravel_index(int(np.argmax(score)), score.shape)
        if score[at] > best_score:
            best_score, best = float(score[at]), (int(i0[at[0], 0]), int(i1[0, at[1]]))
    return best


def _ramp(n: int, start: int, end: int) -> np.ndarray:
    i = np.arange(n, dtype=float)
    return np.clip((i - start) / (end - start), 0.0, 1.0) ** 2


def _near(values: np.ndarray, at: int, stride: int) -> np.ndarray:
    """The entries of `values` within REFINE_STRIDES strides of the value `at`."""
    reach = REFINE_STRIDES * stride
    return values[(values >= at - reach) & (values <= at + reach)]


def _scan(y, basis, level, phi, starts, ends) -> tuple[int, int]:
    """The best pair of z = y / level ~ (B / level) c + b g (prewhitened by phi)."""
    z = _prewhiten(y / level, phi)
    q, _ = np.linalg.qr(_prewhiten(basis / level[:, None], phi)[1:])
    q = np.vstack([np.zeros((1, q.shape[1])), q])
    left = z - q @ (q.T @ z)
    return best_pair(np.column_stack([left, q]), phi, starts, ends)


def _refit_level(y, basis, level, phi, pair) -> np.ndarray:
    """The basis part, in the loss's units, of the fit with the ramp of `pair`."""
    n = y.size
    design = _prewhiten(np.column_stack([basis / level[:, None], _ramp(n, *pair)]), phi)
    z = _prewhiten(y / level, phi)
    coef = np.linalg.lstsq(design[1:], z[1:], rcond=None)[0]
    floor = LEVEL_FLOOR_FRAC * float(np.median(np.abs(y)))
    return np.maximum(basis @ coef[:-1], floor)


def basis_ramp_fit(
    y: np.ndarray,
    basis: np.ndarray,
    phi: float,
    starts: np.ndarray,
    ends: np.ndarray,
    scale: np.ndarray | None = None,
) -> tuple[int, float]:
    """The onset of the best fit y = l * ((B / l) c + b g) over (start, end) pairs of
    `starts` x `ends` (module doc), l refitted from the basis part of the best fit, and
    the fit's squared error: of (y - fit) / `scale` prewhitened (scale: the level).

    The level's refits score a coarse grid (every `COARSE`-th start and end); the last
    level then scores every pair within `REFINE_STRIDES` grid strides of the coarse
    best, refitted again while that moves the pair (dated on a grid and then among its
    neighbours, as stab's power fit is: the score is smooth in the start)."""
    floor = LEVEL_FLOOR_FRAC * float(np.median(np.abs(y)))
    level = np.maximum(basis @ np.linalg.lstsq(basis, y, rcond=None)[0], floor)
    coarse = (starts[::COARSE], ends[::-COARSE][::-1])  # the last end always among them
    pair = _scan(y, basis, level, phi, *coarse)
    for _ in range(LEVEL_ROUNDS):  # loop over a few refits of the level, each a scan
        level = _refit_level(y, basis, level, phi, pair)
        found = _scan(y, basis, level, phi, *coarse)
        if found == pair:
            break
        pair = found
    for _ in range(REFINE_ROUNDS):  # ...then among the best pair's neighbours
        near = (_near(starts, pair[0], COARSE), _near(ends, pair[1], 3 * COARSE))
        found = _scan(y, basis, level, phi, *near)
        if found == pair:
            break
        pair = found
        level = _refit_level(y, basis, level, phi, pair)
    design = np.column_stack([basis, level * _ramp(y.size, *pair)])
    weighted = _prewhiten(design / level[:, None], phi)[1:]
    coef = np.linalg.lstsq(weighted, _prewhiten(y / level, phi)[1:], rcond=None)[0]
    residual = _prewhiten((y - design @ coef) / (level if scale is None else scale), phi)
    return pair[0], float(residual @ residual)


def basis_ramp_onset(
    y: np.ndarray, basis: np.ndarray, phi: float, starts: np.ndarray, ends: np.ndarray
) -> int:
    """The onset of `basis_ramp_fit`."""
    return basis_ramp_fit(y, basis, phi, starts, ends)[0]


def anneal_ramp_onset(
    y: np.ndarray, family: np.ndarray, phi: float, starts: np.ndarray, ends: np.ndarray
) -> int:
    """The family's fit in its product form (f + a P) (1 - G A), f and a free and the
    anneal's gain G >= 0 fitted too: on the grid `ANNEAL_GAINS`, then by golden section
    within one grid step of the grid's best; the onset of the least squared error, each
    error over the same scale (the family fitted without a ramp)."""
    _, power, anneal, _ = family.T
    scale = family @ np.linalg.lstsq(family, y, rcond=None)[0]
    scale = np.maximum(scale, LEVEL_FLOOR_FRAC * float(np.median(np.abs(y))))
    fits: dict[float, tuple[float, int]] = {}

    def fit(gain: float) -> float:
        kept = 1.0 - gain * anneal
        start, sse = basis_ramp_fit(
            y, np.column_stack([kept, power * kept]), phi, starts, ends, scale
        )
        fits[gain] = (sse, start)
        return sse

    for gain in ANNEAL_GAINS:  # loop over a few gains, each a fit over every pair
        fit(float(gain))
    best = min(fits, key=lambda g: fits[g])
    step = float(ANNEAL_GAINS[1] - ANNEAL_GAINS[0])
    lo, hi = max(0.0, best - step), best + step
    golden = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = fit(a), fit(b)
    for _ in range(GOLDEN_ROUNDS):  # loop over a few narrowings of the gain's interval
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = fit(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = fit(b)
    return min(fits.values())[1]


def family_errors(run: LMRun, onset: int) -> dict[str, float]:
    """Each basis oracle's onset error as a fraction of the ramp's length (onset at index
    `onset`, the ramp to the last point), candidates as `_lo2_limits.ramp_errors`'s."""
    y = run.frame["loss"].to_numpy().astype(float)
    n = y.size
    length = n - 1 - onset
    out = {}
    generic, lo = generic_basis(run, onset)
    family = family_basis(run)
    for name, basis, first in (("family", family, 0), ("generic", generic, lo)):
        size = n - first
        starts = np.arange(max(first, onset - length), min(n - 2, onset + length) + 1) - first
        told = np.array([size - 1])
        free = np.unique(np.r_[np.arange(2, size, 3), size - 1])
        for ends_name, ends in (("told", told), ("free", free)):
            for fit, memory in (("gls", run.phi), ("ols", 0.0)):
                found = basis_ramp_onset(y[first:], basis, memory, starts, ends) + first
                out[f"{name}_{ends_name}_{fit}"] = (found - onset) / length
            if name == "family":  # (GLS only: each is a fit per gain)
                found = anneal_ramp_onset(y, family, run.phi, starts, ends)
                out[f"anneal_{ends_name}_gls"] = (found - onset) / length
    # told the anneal's gain too (f and a fitted): what knowing it is worth
    kept = 1.0 - ANNEAL_GAIN * family[:, 2]
    starts = np.arange(max(0, onset - length), min(n - 2, onset + length) + 1)
    free = np.unique(np.r_[np.arange(2, n, 3), n - 1])
    found = basis_ramp_onset(y, np.column_stack([kept, family[:, 1] * kept]), run.phi, starts, free)
    out["gain_free_gls"] = (found - onset) / length
    return out


# --- what docs/onset-limits.md says of them ----------------------------------------------

FAMILY_BULLETS = [
    "* **family** (`benchmarks/_lo2_family.py`): NOT told the curve, only its family: the "
    "generator's power law in the LR-weighted step count S and its anneal, with their "
    "nonlinear constants (s0, alpha, the LR schedule, the warmup), so the level is a free "
    "linear combination of {1, P, A, P·A}, P = (1 + S/(s0·T))^-alpha, A = 1 - LR/peak after "
    "the warmup (exact for the cosine, linear and WSD curves LO2's places draw), fitted "
    "with the ramp over the whole run. The ramp multiplies the level, so the fit is made "
    "on the loss divided by a level estimate, refitted from the best fit's basis part "
    f"(at most {LEVEL_ROUNDS} times): with no noise it dates every onset exactly. "
    "Shown not told the length, as **not told** (told it in the reading).",
    "* **product form**: the family as the generator multiplies it, (f + a·P)·(1 - G·A): "
    "f and a fitted, the anneal's gain G >= 0 too (a grid of "
    f"{ANNEAL_GAINS.size} gains up to {ANNEAL_GAINS[-1]:.3f}, not holding the generator's "
    f"{ANNEAL_GAIN}, then {GOLDEN_ROUNDS} golden-section steps; the least squared error "
    "over all). **gain told**: the same told G (one coefficient more than a detector has).",
    "* **generic**: a basis a detector has without the generator, stab's power-fit trend "
    "columns with S (scaled to 1 at the end of the run) in place of its fitted decay: "
    "{1, t, LR, LR·S}, over the stretch stab's power fit reaches (from "
    f"{FIT_BACK:.0f} ramp lengths before the true onset, not before the LR's peak, to the "
    "end), fitted as the family's.",
    f"* These score a grid (every {COARSE}th candidate start and end), then every pair "
    f"within {REFINE_STRIDES} of its strides of the best; family and generic OLS are shown "
    "(in brackets, per cell) only where they differ from GLS.",
]
FAMILY_COLUMNS = {
    "family_free_gls": "family",
    "anneal_free_gls": "product form",
    "gain_free_gls": "gain told",
    "generic_free_gls": "generic",
}


def family_cell(row: dict, key: str) -> str:
    """One oracle's share of one cell, its OLS in brackets if it has one that differs."""
    gls = f"{row[key]:.0%}"
    ols = f"{row[key.replace('_gls', '_ols')]:.0%}" if key.replace("_gls", "_ols") in row else gls
    return gls if gls == ols else f"{gls} (OLS {ols})"


def family_reading(scopes: list[dict], by_cell: dict[str, list[dict]], span, words) -> str:
    """What the columns not told the curve say: `by_cell` each cell's rows (one a scope),
    `span` and `words` format a range of shares and a cell's name."""

    def shares(key: str) -> str:
        return span([r[key] for r in scopes])

    def under(key: str) -> str:
        weak = {n: [r[key] for r in rs] for n, rs in by_cell.items()}
        weak = {n: v for n, v in weak.items() if min(v) < 0.95}
        if not weak:
            return "in no cell"
        return "for " + "; ".join(f"{words(n)} ({span(v, 0)})" for n, v in sorted(weak.items()))

    ols = max(
        abs(r[f"{b}_free_gls"] - r[f"{b}_free_ols"]) for r in scopes for b in ("family", "generic")
    )
    best = max(("family_free_gls", "anneal_free_gls"), key=lambda k: min(r[k] for r in scopes))
    short = [r["group"] for r in scopes if r[best] < 0.95]
    text = (
        "Not told the curve, only its family: as a free linear combination of its four "
        f"columns the oracle is on time in {shares('family_free_gls')} of the ramps per scope "
        f"({shares('family_told_gls')} told the length; OLS at most {100 * ols:.1f} points "
        f"from GLS), under 95% {under('family_free_gls')}. In the product form, the anneal's "
        f"gain fitted, it is on time in {shares('anneal_free_gls')} "
        f"({shares('anneal_told_gls')} told the length), under 95% "
        f"{under('anneal_free_gls')}. Told the anneal's gain as well it is on time in "
        f"{shares('gain_free_gls')}, under 95% {under('gain_free_gls')}."
    )
    if short:
        text += (
            f" So in {', '.join(short)} LO2 asks for more than the log holds for a method "
            "that knows the family of curves but not its coefficients: what such a method "
            "misses is the anneal's size: the anneal's fall and the ramp's rise overlap (in "
            "the decay tail, and over the whole run on a cosine), so a gain a little off "
            "moves the fitted onset, early or late, and told the gain the oracle is where "
            "the one told the whole curve is."
        )
    else:
        text += (
            " So LO2 does not ask for more than the log holds for a method that knows the "
            "family of curves but not its coefficients."
        )
    text += (
        f" The generic basis is on time in {shares('generic_free_gls')}: a line, the LR "
        "and the LR times S do not bend as the power law does, and over the stretch stab "
        "fits the curve's own curvature is taken for the ramp's (it misses most mid-run "
        "ramps even with no noise)."
    )
    return text
