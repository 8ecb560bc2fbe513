"""Synthetic runs with one injected event, for benchmarks/detection_quality.py.

A run is a loss curve that decays toward a floor, batch noise on top of it
(multiplicative: sigma is a fraction of the loss level), a pre-clip grad norm,
an LR schedule and, for the loss-scale case, a dynamic fp16 scale. Exactly one
event is injected per run so that every finding of the event's family in that
run is either the detection or a false alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

FLOOR, AMPLITUDE = 2.0, 8.0  # loss level = FLOOR + AMPLITUDE * exp(-step / tau)
DECAY_FRAC = 0.05  # tau as a fraction of the run: the fast drop is over long before any event
GAMMA_SHAPE = 4.0  # skewness 1.0, close to the llm.c residual's 0.9
T_DF = 3
BLOCK_POINTS = 50  # block bootstrap keeps the real noise's short-range structure
MIN_LEVEL_FRAC = 0.05  # a t(3) draw can push a loss below zero; a cross-entropy cannot go there
GRAD_BASE, GRAD_NOISE = 0.4, 0.25  # pre-clip grad norm and its lognormal spread
GRAD_SURGE = 50.0  # the spec's cause bar is 30x the trailing mean; 50x is clearly over it
LR_MAX, LR_JUMP = 3e-4, 2.0  # the spec's jump bar is +50%; the LR doubles and stays up
SCALE_START, SCALE_CAP = 2.0**16, 2.0**24
OVERFLOW_EVERY_STEPS = 2000  # a healthy fp16 run overflows now and then; the scaler absorbs it
SCALE_GROWTH_STEPS = 1000  # clean steps before the scaler doubles again
EVENT_SPAN = (0.3, 0.8)  # events start in this fraction of the run: every window is full there
RAMP_START = (0.35, 0.5)
RAMP_SHORT_FRAC = 0.1  # a short ramp rises over 10% of the run and then holds its new level
RANK_EVENT_SPAN = (0.4, 0.7)

FAMILIES = ("gamma", "student-t3", "real")
SPIKE_KINDS = ("spike", "spike+grad", "spike+lr")
BUMP_STEPS = {"bump3": 3, "bump10": 10, "bump30": 30}
RAMP_KINDS = ("ramp", "ramp-short", "plateau")
NAN_KINDS = ("nan-tail", "nan-point", "inf-point")
RANK_KINDS = ("rank-shift", "rank-nonfinite", "rank-silent")

# (source folder, file, centred rolling-median window in points, leading points dropped)
REAL_SOURCES = (
    ("llmc-gpt2-124m-a100", "main.log", 101, 1000),
    ("hf-trainer-state-tinyllama-lora", "trainer_state.json", 11, 5),
)


@dataclass(frozen=True)
class Case:
    """One cell of the grid: an event kind and size under one noise and logging regime."""

    kind: str
    size: str  # label as printed
    h: float  # event size as a fraction of the loss level (NaN when it has no size)
    sigma: float  # noise std as a fraction of the level (per-rank spread for rank kinds)
    interval: int  # logged every `interval` steps
    family: str
    ranks: int = 0

    @property
    def k(self) -> float:
        """The size in units of the noise sigma."""
        return self.h / self.sigma if math.isfinite(self.h) else math.nan


@dataclass
class Truth:
    onset: int  # step of the event's first logged point
    end: int  # step of its last logged point (the onset for one-point events)
    points: int  # logged points it covers
    length: int = 0  # ramp length in steps
    rank: int | None = None


@dataclass
class RealNoise:
    """Standardised relative residuals of the healthy real logs, ready to resample."""

    values: np.ndarray
    starts: np.ndarray  # valid block starts (a block never crosses two sources)
    sources: list[dict] = field(default_factory=list)


def real_residuals(root: Path) -> RealNoise:
    """loss / (centred rolling median) - 1 for each healthy real log, each standardised."""
    from stabilitycli import read

    parts, starts, described = [], [], []
    offset = 0
    for folder, name, window, skip in REAL_SOURCES:
        path = root / folder / name
        frame = (
            read(str(path))
            .frame.filter(pl.col("loss").is_not_null() & pl.col("loss").is_finite())
            .select("step", "loss")
            .sort("step")
        )
        smooth = frame["loss"].rolling_median(window, center=True, min_samples=window)
        keep = smooth.is_not_null().to_numpy()
        loss, base = frame["loss"].to_numpy()[keep], smooth.to_numpy()[keep]
        rel = (loss / base - 1.0)[skip:]
        steps = frame["step"].to_numpy()[keep][skip:]
        z = (rel - rel.mean()) / rel.std()
        described.append(
            {
                "source": f"{folder}/{name}",
                "points": int(z.size),
                "interval": int(np.median(np.diff(steps))),
                "sigma_rel": float(rel.std()),
                "skew": float(np.mean(z**3)),
                "excess_kurtosis": float(np.mean(z**4) - 3),
                "lag1_autocorr": float(np.corrcoef(z[:-1], z[1:])[0, 1]),
                "max_z": float(z.max()),
                "smooth_window_points": window,
            }
        )
        parts.append(z)
        if z.size >= BLOCK_POINTS:
            starts.append(offset + np.arange(z.size - BLOCK_POINTS + 1))
        offset += z.size
    return RealNoise(np.concatenate(parts), np.concatenate(starts), described)


def unit_noise(family: str, shape, rng: np.random.Generator, real: RealNoise | None) -> np.ndarray:
    """Zero-mean, unit-variance batch noise of one family."""
    if family == "gamma":
        return (rng.standard_gamma(GAMMA_SHAPE, shape) - GAMMA_SHAPE) / math.sqrt(GAMMA_SHAPE)
    if family == "student-t3":
        return rng.standard_t(T_DF, shape) / math.sqrt(T_DF / (T_DF - 2))
    if family == "real":
        assert real is not None
        rows, n = (1, shape) if isinstance(shape, int) else shape
        blocks = -(-n // BLOCK_POINTS)
        first = rng.choice(real.starts, size=(rows, blocks))
        idx = (first[..., None] + np.arange(BLOCK_POINTS)).reshape(rows, -1)[:, :n]
        out = real.values[idx]
        return out[0] if isinstance(shape, int) else out
    raise ValueError(f"unknown noise family {family!r}")


def level_curve(steps: np.ndarray, total_steps: int) -> np.ndarray:
    return FLOOR + AMPLITUDE * np.exp(-steps / (DECAY_FRAC * total_steps))


def grad_baseline(steps: np.ndarray, total_steps: int) -> np.ndarray:
    return GRAD_BASE * (1.0 + 3.0 * np.exp(-steps / (DECAY_FRAC * total_steps)))


def lr_schedule(steps: np.ndarray, total_steps: int) -> np.ndarray:
    """Linear warmup over 2% of the run, then cosine decay to 10% of the peak."""
    warm = max(1.0, 0.02 * total_steps)
    progress = np.clip((steps - warm) / max(1.0, total_steps - warm), 0.0, 1.0)
    return (
        LR_MAX
        * np.minimum(1.0, (steps + 1) / warm)
        * (0.1 + 0.45 * (1.0 + np.cos(math.pi * progress)))
    )


def healthy_columns(
    case: Case, n: int, rng: np.random.Generator, real: RealNoise | None
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    steps = np.arange(n, dtype=np.int64) * case.interval
    total = n * case.interval
    level = level_curve(steps, total)
    noise = unit_noise(case.family, n, rng, real)
    loss = np.maximum(level * (1.0 + case.sigma * noise), MIN_LEVEL_FRAC * level)
    grad = grad_baseline(steps, total) * rng.lognormal(0.0, GRAD_NOISE, n)
    return steps, level, {"loss": loss, "grad_norm": grad, "lr": lr_schedule(steps, total)}


def _onset_index(n: int, rng: np.random.Generator, span: tuple[float, float]) -> int:
    return int(rng.integers(math.ceil(span[0] * n), int(span[1] * n)))


def _scale_history(n: int, interval: int, collapse_at: int, rng: np.random.Generator):
    """A dynamic loss scale per logged point: rare halvings and regrowth, then a collapse.

    From `collapse_at` on, every logged point overflows and halves the scale,
    so it falls below 1 after 17-25 points and stays down.
    """
    scale = np.empty(n)
    value, clean = SCALE_START, 0
    overflow = rng.random(n) < min(0.5, interval / OVERFLOW_EVERY_STEPS)
    growth = max(1, SCALE_GROWTH_STEPS // interval)
    for i in range(n):  # a few thousand points; the scaler's state is sequential
        if i >= collapse_at:
            value = max(value / 2.0, 2.0**-8)
        elif overflow[i]:
            value, clean = value / 2.0, 0
        else:
            clean += 1
            if clean >= growth:
                value, clean = min(value * 2.0, SCALE_CAP), 0
        scale[i] = value
    return scale


def single_run(
    case: Case, n: int, rng: np.random.Generator, real: RealNoise | None
) -> tuple[pl.DataFrame, Truth | None]:
    """One run of `n` logged points with the event of `case` injected (none for 'healthy')."""
    steps, level, cols = healthy_columns(case, n, rng, real)
    loss = cols["loss"]
    kind, h = case.kind, case.h
    truth: Truth | None = None
    if kind == "healthy":
        pass
    elif kind in SPIKE_KINDS:
        i = _onset_index(n, rng, EVENT_SPAN)
        # the spiked point's value IS the event: its size is exact, not blurred by noise
        loss[i] = level[i] * (1.0 + h)
        if kind == "spike+grad":
            cols["grad_norm"][i] = (
                GRAD_SURGE * grad_baseline(steps[i : i + 1], n * case.interval)[0]
            )
        elif kind == "spike+lr":
            cols["lr"][i:] *= LR_JUMP
        truth = Truth(int(steps[i]), int(steps[i]), 1)
    elif kind in BUMP_STEPS:
        i = _onset_index(n, rng, EVENT_SPAN)
        t0 = int(steps[i])
        covered = (steps >= t0) & (steps < t0 + BUMP_STEPS[kind])
        loss[covered] += h * level[covered]
        truth = Truth(t0, int(steps[covered][-1]), int(covered.sum()))
    elif kind == "shift":
        i = _onset_index(n, rng, EVENT_SPAN)
        loss[i:] += h * level[i:]
        truth = Truth(int(steps[i]), int(steps[-1]), n - i)
    elif kind in RAMP_KINDS:
        i = _onset_index(n, rng, RAMP_START)
        t0 = int(steps[i])
        length = (
            int(RAMP_SHORT_FRAC * n * case.interval)
            if kind == "ramp-short"
            else int(steps[-1] - t0)
        )
        loss += h * level * np.clip((steps - t0) / length, 0.0, 1.0)
        truth = Truth(t0, min(int(steps[-1]), t0 + length), n - i, length=length)
    elif kind in NAN_KINDS:
        i = _onset_index(n, rng, EVENT_SPAN)
        if kind == "nan-tail":
            loss[i:] = np.nan
            cols["grad_norm"][i:] = np.nan
        else:
            loss[i] = np.nan if kind == "nan-point" else np.inf
        truth = Truth(int(steps[i]), int(steps[i if kind != "nan-tail" else -1]), 1)
    elif kind == "scale-collapse":
        i = _onset_index(n, rng, (EVENT_SPAN[0], 0.7))
        scale = _scale_history(n, case.interval, i, rng)
        below = int(np.argmax(scale < 1.0))
        cols["loss_scale"] = scale
        # the spec defines the collapse by the scale going below 1, so that is its onset
        truth = Truth(int(steps[below]), int(steps[-1]), n - below)
    else:
        raise ValueError(f"unknown single-series kind {kind!r}")
    return pl.DataFrame({"step": steps, **cols}), truth


def rank_run(
    case: Case, n: int, rng: np.random.Generator, real: RealNoise | None
) -> tuple[pl.DataFrame, Truth | None]:
    """A per-rank loss log: `case.ranks` ranks, per-rank spread `case.sigma` of the level."""
    steps = np.arange(n, dtype=np.int64) * case.interval
    level = level_curve(steps, n * case.interval)
    noise = unit_noise(case.family, (case.ranks, n), rng, real)
    loss = np.maximum(level * (1.0 + case.sigma * noise), MIN_LEVEL_FRAC * level)
    keep = np.ones(loss.shape, dtype=bool)
    truth = None
    if case.kind != "healthy-ranks":
        rank = int(rng.integers(case.ranks))
        i = _onset_index(n, rng, RANK_EVENT_SPAN)
        if case.kind == "rank-shift":
            loss[rank, i:] += case.h * level[i:]
        elif case.kind == "rank-nonfinite":
            loss[rank, i:] = np.nan
        elif case.kind == "rank-silent":
            keep[rank, i:] = False
        else:
            raise ValueError(f"unknown rank kind {case.kind!r}")
        truth = Truth(int(steps[i]), int(steps[-1]), n - i, rank=rank)
    ranks = np.repeat(np.arange(case.ranks, dtype=np.int64), n)
    frame = pl.DataFrame(
        {"step": np.tile(steps, case.ranks), "rank": ranks, "loss": loss.ravel()}
    ).filter(pl.Series(keep.ravel()))
    return frame, truth
