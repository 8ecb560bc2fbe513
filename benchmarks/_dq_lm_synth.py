"""LM-shaped runs for benchmarks/detection_quality.py (issue #36, item 1).

A run is laid out in logged points (`n` of them, logged every `interval` steps) so
that its shape is the same at every interval; all the features below are placed in
steps, as a trainer places them.

* **Schedule**: a linear warmup over 1-5% of the run, then cosine to 10% of the peak,
  linear to 0, or WSD (constant, then a linear cooldown to 0 over the last 10-20%).
* **Loss**: a power-law fall towards an irreducible level in the LR-weighted step
  count (so the loss falls slowly while the LR is still warming up), minus an
  annealing term that grows as the LR decays after its peak: the faster fall of a
  decay tail or a WSD cooldown.
* **Fine-tunes**: 2-4 epochs; at each epoch boundary the loss steps down by 8-25%.
* **Curriculum step**: a persistent step of +3-4% (under the spec's bar; healthy).
* **Mixture hump**: a slow rise of +4-10% and fall back over 5-15% of the run.
* **Noise**: `loss = level·(1 + σ·ε)`, ε of unit variance, half of its variance an
  AR(1) (φ drawn per run from 0.3-0.8, the lag-1 correlation between consecutive
  logged points) and half independent gamma batch noise (skewness 1). The generator
  returns its noise draws, so the truth labelling can find the points the noise
  itself made material.

Events are injected next to the features (`place`): during warmup, within 100 steps
after an epoch boundary or a schedule change (the end of warmup, the start of a WSD
cooldown), in the decay tail, on the rising side of a hump, or in the middle of the
run (the control).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from _dq_synth import GAMMA_SHAPE, GRAD_SURGE, MIN_LEVEL_FRAC, Truth, grad_baseline
from scipy.signal import lfilter

LM_SHAPES = ("cosine", "linear", "wsd", "epochs", "curriculum", "hump")
PRETRAIN_SHAPES = ("cosine", "linear", "wsd")
PEAK_LR = 3e-4
WARMUP_FRAC = (0.01, 0.05)
COOLDOWN_FRAC = (0.10, 0.20)
COSINE_FLOOR = 0.1  # cosine decays to 10% of the peak
EPOCHS = (2, 4)
EPOCH_DROP = (0.08, 0.25)
CURRICULUM_STEP = (0.03, 0.04)
HUMP_AMP = (0.04, 0.10)
HUMP_WIDTH = (0.05, 0.15)
PHI = (0.3, 0.8)
AR_SHARE = 0.5  # the AR(1) part's share of the noise variance
NEAR_STEPS = 100  # "within 100 steps after" an epoch boundary or a schedule change
ANNEAL_GAIN = 0.06  # the decay tail takes up to 6% more off the loss than the power law
# loss = floor + amp * (1 + S / (s0 * T))^-alpha, S the LR-weighted step count
CURVES = {"pretrain": (2.0, 8.0, 0.5, 0.01), "finetune": (1.2, 1.0, 0.5, 0.02)}


@dataclass
class Shape:
    """Where a run's features are, in steps: what a false alarm or an event is placed by."""

    kind: str
    total: int  # steps in the run (n * interval)
    warmup: int
    cooldown: int | None = None  # WSD: the step the cooldown starts
    boundaries: list[int] = field(default_factory=list)  # epoch boundaries
    curriculum: int | None = None
    hump: tuple[int, int] | None = None  # start, width

    @property
    def decay_tail(self) -> int:
        """First step of the decay tail: the WSD cooldown, else the last 20% of the run."""
        return self.cooldown if self.cooldown is not None else int(0.8 * self.total)

    def changes(self) -> list[int]:
        """Schedule changes: the end of warmup and the start of a cooldown."""
        return [self.warmup] + ([self.cooldown] if self.cooldown is not None else [])


def draw_shape(kind: str, n: int, interval: int, rng: np.random.Generator, warm_min=0.0) -> Shape:
    total = n * interval
    warm = int(rng.uniform(max(WARMUP_FRAC[0], warm_min), WARMUP_FRAC[1]) * total)
    shape = Shape(kind, total, max(warm, interval))
    if kind == "wsd":
        shape.cooldown = int((1 - rng.uniform(*COOLDOWN_FRAC)) * total)
    elif kind == "epochs":
        epochs = int(rng.integers(EPOCHS[0], EPOCHS[1] + 1))
        shape.boundaries = [int(total * e / epochs) for e in range(1, epochs)]
    elif kind == "curriculum":
        shape.curriculum = int(rng.uniform(0.3, 0.7) * total)
    elif kind == "hump":
        width = int(rng.uniform(*HUMP_WIDTH) * total)
        shape.hump = (int(rng.uniform(0.2, 0.6) * total), width)
    return shape


def lr_of(shape: Shape, steps: np.ndarray) -> np.ndarray:
    warm = np.minimum(1.0, (steps + 1) / shape.warmup)
    after = np.clip((steps - shape.warmup) / max(1, shape.total - shape.warmup), 0.0, 1.0)
    if shape.kind == "wsd":
        assert shape.cooldown is not None
        into = np.clip((steps - shape.cooldown) / max(1, shape.total - shape.cooldown), 0, 1)
        decay = 1.0 - into
    elif shape.kind in ("linear", "epochs"):
        decay = 1.0 - after
    else:
        decay = COSINE_FLOOR + (1 - COSINE_FLOOR) * 0.5 * (1 + np.cos(math.pi * after))
    return PEAK_LR * warm * decay


def level_of(shape: Shape, steps: np.ndarray, lr: np.ndarray, rng: np.random.Generator):
    floor, amp, alpha, s0 = CURVES["finetune" if shape.kind == "epochs" else "pretrain"]
    interval = int(steps[1] - steps[0]) if steps.size > 1 else 1
    seen = np.cumsum(lr / PEAK_LR) * interval  # LR-weighted steps
    level = floor + amp * (1.0 + seen / (s0 * shape.total)) ** -alpha
    annealed = np.where(steps >= shape.warmup, 1.0 - lr / PEAK_LR, 0.0)
    level = level * (1.0 - ANNEAL_GAIN * annealed)
    for b in shape.boundaries:
        level = np.where(steps >= b, level * (1.0 - rng.uniform(*EPOCH_DROP)), level)
    if shape.curriculum is not None:
        level = np.where(
            steps >= shape.curriculum, level * (1.0 + rng.uniform(*CURRICULUM_STEP)), level
        )
    if shape.hump is not None:
        start, width = shape.hump
        x = np.clip((steps - start) / width, 0.0, 1.0)
        level = level * (1.0 + rng.uniform(*HUMP_AMP) * np.sin(math.pi * x) ** 2)
    return level


def ar_mix_noise(n: int, rng: np.random.Generator, phi: float, rows: int = 1) -> np.ndarray:
    """Unit-variance noise: an AR(1) with lag-1 correlation `phi` plus skewed batch noise."""
    innov = rng.standard_normal((rows, n)) * math.sqrt(1 - phi * phi)
    start = rng.standard_normal((rows, 1)) * phi  # stationary from the first point
    ar = lfilter([1.0], [1.0, -phi], innov, axis=1, zi=start)[0]
    batch = (rng.standard_gamma(GAMMA_SHAPE, (rows, n)) - GAMMA_SHAPE) / math.sqrt(GAMMA_SHAPE)
    out = math.sqrt(AR_SHARE) * ar + math.sqrt(1 - AR_SHARE) * batch
    return out[0] if rows == 1 else out


@dataclass
class LMRun:
    frame: pl.DataFrame
    shape: Shape
    level: np.ndarray
    noise: np.ndarray  # the relative noise each point got: loss / level - 1 before any event
    phi: float
    truth: Truth | None = None


def healthy_lm(
    shape_kind: str, n: int, interval: int, sigma: float, rng: np.random.Generator, warm_min=0.0
) -> LMRun:
    shape = draw_shape(shape_kind, n, interval, rng, warm_min)
    steps = np.arange(n, dtype=np.int64) * interval
    lr = lr_of(shape, steps)
    level = level_of(shape, steps, lr, rng)
    phi = float(rng.uniform(*PHI))
    loss = np.maximum(level * (1.0 + sigma * ar_mix_noise(n, rng, phi)), MIN_LEVEL_FRAC * level)
    grad = grad_baseline(steps, shape.total) * rng.lognormal(0.0, 0.25, n)
    frame = pl.DataFrame({"step": steps, "loss": loss, "grad_norm": grad, "lr": lr})
    return LMRun(frame, shape, level, loss / level - 1.0, phi)


# --- events -------------------------------------------------------------------------------

# kind -> the places it is put
LM_EVENT_PLACES = {
    "spike": ("warmup", "epoch", "schedule", "decay", "hump", "mid"),
    "spike+grad": ("warmup", "epoch", "schedule", "decay", "hump", "mid"),
    "bump3pt": ("warmup", "epoch", "schedule", "decay", "hump", "mid"),
    "bump10pt": ("warmup", "epoch", "schedule", "decay", "hump", "mid"),
    "shift": ("warmup", "epoch", "schedule", "decay", "hump", "mid"),
    "ramp": ("mid", "decay"),
    "nan-tail": ("warmup", "epoch", "decay", "mid"),
}
BUMP_POINTS = {"bump3pt": 3, "bump10pt": 10}
# the spec's windows need 100 steps (or 20 points when sparser) before an event
MIN_ONSET_STEPS, MIN_ONSET_POINTS = 101, 21


def _shape_for(place: str, rng: np.random.Generator) -> str:
    if place == "epoch":
        return "epochs"
    if place == "hump":
        return "hump"
    if place == "schedule":
        return str(rng.choice(["wsd", str(rng.choice(PRETRAIN_SHAPES))]))
    return str(rng.choice(PRETRAIN_SHAPES))


def _after(anchor: int, interval: int, steps: np.ndarray, rng, lo: int = 0) -> int:
    """A logged index within NEAR_STEPS steps after `anchor` (at least the next point), and
    at least `lo`: an event before the spec's first 100-step baseline (a warmup of under 100
    steps ends there) is no spike by Q2.1, and is put at the first index that has one."""
    first = max(int(np.searchsorted(steps, anchor, side="right")), lo)
    last = int(np.searchsorted(steps, anchor + NEAR_STEPS, side="right")) - 1
    return int(rng.integers(first, max(first, last) + 1))


def _onset(place: str, run: LMRun, interval: int, rng) -> int:
    steps = run.frame["step"].to_numpy()
    n, shape = steps.size, run.shape
    lo = max(math.ceil(MIN_ONSET_STEPS / interval), MIN_ONSET_POINTS)

    def frac(a: float, b: float) -> int:
        return int(rng.integers(int(a * n), max(int(a * n) + 1, int(b * n))))

    if place == "warmup":
        hi = max(lo + 1, int(0.9 * shape.warmup / interval))
        return int(rng.integers(lo, hi))
    if place == "epoch":
        return _after(int(rng.choice(shape.boundaries)), interval, steps, rng, lo)
    if place == "schedule":
        return _after(int(rng.choice(shape.changes())), interval, steps, rng, lo)
    if place == "decay":
        # in the WSD cooldown or the last 20% of a cosine/linear decay, before its last 7%
        first = max(shape.decay_tail, int(0.8 * shape.total)) // interval
        return int(rng.integers(first, max(first + 1, int(0.93 * n))))
    if place == "hump":
        assert shape.hump is not None
        start, width = shape.hump
        return int(rng.integers(int(start + 0.2 * width), int(start + 0.5 * width))) // interval
    return frac(0.3, 0.7)


def event_lm(kind: str, h: float, place: str, n: int, interval: int, sigma: float, rng) -> LMRun:
    # a warmup event needs the spec's 100-step baseline inside the warmup
    warm_min = 0.03 if place == "warmup" and interval == 1 else 0.0
    run = healthy_lm(_shape_for(place, rng), n, interval, sigma, rng, warm_min)
    steps = run.frame["step"].to_numpy()
    loss = run.frame["loss"].to_numpy().copy()
    grad = run.frame["grad_norm"].to_numpy().copy()
    level = run.level
    i = min(_onset(place, run, interval, rng), n - 2)
    t0 = int(steps[i])
    if kind in ("spike", "spike+grad"):
        loss[i] = level[i] * (1.0 + h)
        if kind == "spike+grad":
            grad[i] = GRAD_SURGE * grad_baseline(steps[i : i + 1], run.shape.total)[0]
        truth = Truth(t0, t0, 1)
    elif kind in BUMP_POINTS:
        j = min(n, i + BUMP_POINTS[kind])
        loss[i:j] += h * level[i:j]
        truth = Truth(t0, int(steps[j - 1]), j - i)
    elif kind == "shift":
        loss[i:] += h * level[i:]
        truth = Truth(t0, int(steps[-1]), n - i)
    elif kind == "ramp":
        length = int(steps[-1] - t0)
        # accelerating: the rise is quadratic in time, slow at first
        loss += h * level * np.clip((steps - t0) / length, 0.0, 1.0) ** 2
        truth = Truth(t0, int(steps[-1]), n - i, length=length)
    elif kind == "nan-tail":
        loss[i:] = np.nan
        grad[i:] = np.nan
        truth = Truth(t0, int(steps[-1]), 1)
    else:
        raise ValueError(f"unknown LM event kind {kind!r}")
    run.frame = run.frame.with_columns(pl.Series("loss", loss), pl.Series("grad_norm", grad))
    run.truth = truth
    return run


def rank_lm(
    kind: str, h: float, n: int, interval: int, spread: float, ranks: int, rng
) -> tuple[pl.DataFrame, Truth | None]:
    """A cohort on a cosine LM curve, each rank with its own AR(1)-mix noise of `spread`.

    rank-drift: one rank rises linearly from its onset (40-75% of the run) by `h` of its
    spread by the last step; rank-shift: one rank's level shifts by `h` of the level.
    """
    run = healthy_lm("cosine", n, interval, 0.0, rng)
    steps, level = run.frame["step"].to_numpy(), run.level
    phi = float(rng.uniform(*PHI))
    loss = np.maximum(
        level * (1.0 + spread * ar_mix_noise(n, rng, phi, rows=ranks)), MIN_LEVEL_FRAC * level
    )
    truth = None
    if kind != "healthy-ranks":
        rank = int(rng.integers(ranks))
        i = int(rng.integers(int(0.4 * n), int(0.75 * n)))
        t0 = int(steps[i])
        if kind == "rank-drift":
            length = int(steps[-1] - t0)
            loss[rank] += h * spread * level * np.clip((steps - t0) / length, 0.0, 1.0)
            truth = Truth(t0, int(steps[-1]), n - i, length=length, rank=rank)
        elif kind == "rank-shift":
            loss[rank, i:] += h * level[i:]
            truth = Truth(t0, int(steps[-1]), n - i, rank=rank)
        else:
            raise ValueError(f"unknown LM rank kind {kind!r}")
    frame = pl.DataFrame(
        {
            "step": np.tile(steps, ranks),
            "rank": np.repeat(np.arange(ranks, dtype=np.int64), n),
            "loss": loss.ravel(),
        }
    )
    return frame, truth
