"""Never learned and loss collapse (#34), for benchmarks/detection_quality.py.

Two graded families of synthetic runs, each against its healthy look-alike:

* never learned vs learned and converged: a loss flat at 10.8 (a GPT-2 vocabulary's
  ln V) with the grid's batch noise, an LR warmup and a live grad norm, that falls by
  d = 0, 0.5, 1, 2, 5 noise sigmas from its first window to its last; against the grid's
  learned-and-converged curve (2 + 8 exp(-t / tau)). d <= 0.5 is a run that did not learn
  (recall); d = 5 learned a little, quietly, and must not be flagged (a false alarm); d = 1
  and d = 2 sit under and on the rule's bar (2 sigmas, or a 2% fall) and are only reported.
* collapse vs gradual convergence: the grid's curve falls 10x, 100x, 1e3x or 1e4x over 1, 2,
  3 or 5 logged points at 30-80% of the run and stays down (recall over 1e3x and 1e4x; 100x
  is exactly the rule's bar, so the noise decides it, and 10x is under it: both only
  reported); against a classifier whose loss creeps
  from 0.7 to 1e-3 with tau = 50, 200 or 1000 logged points (fast to slow convergence).

Every run goes through `stabilitycli.analyze(frame)` with default thresholds (no vocabulary
size: the chance-level test stays off, as it must without one). A run counts as flagged
when a warning/error finding of the kind is in it; a collapse must also be dated within
its fall (onset - 1 point .. onset + points).
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl
from _dq_score import seed_for
from _dq_synth import (
    MIN_LEVEL_FRAC,
    grad_baseline,
    level_curve,
    lr_schedule,
    unit_noise,
)

FAMILIES = ("gamma", "student-t3")
INTERVALS = (1, 10)
SIGMAS = (0.01, 0.03)
POINTS = 3000
FLAT_LEVEL = 10.8
DECREASES = (0.0, 0.5, 1.0, 2.0, 5.0)  # noise sigmas, first window to last
MUST_FIRE_DECREASE = 0.5  # at or under: never learned (well under the 2-sigma bar)
MUST_NOT_FIRE_DECREASE = 5.0
FALLS = (10.0, 100.0, 1e3, 1e4)
FALL_POINTS = (1, 2, 3, 5)
MUST_FIRE_FALL = 1e3  # 100x sits exactly on the bar: a coin toss against the noise
GRADUAL_TAU = (50, 200, 1000)  # logged points
WINDOW_FRAC = 0.1  # the rule's default learning_window_frac: the windows' centres are 0.9 apart


def _columns(n: int, interval: int, rng) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    steps = np.arange(n, dtype=np.int64) * interval
    total = n * interval
    grad = grad_baseline(steps, total) * rng.lognormal(0.0, 0.25, n)
    return steps, {"grad_norm": grad, "lr": lr_schedule(steps, total)}


def flat_run(d: float, sigma: float, family: str, interval: int, rng) -> pl.DataFrame:
    steps, cols = _columns(POINTS, interval, rng)
    noise = unit_noise(family, POINTS, rng, None)
    # a straight fall whose first and last windows' medians are d noise sigmas apart
    fall = d * sigma * FLAT_LEVEL / (1 - WINDOW_FRAC)
    level = FLAT_LEVEL - fall * np.arange(POINTS) / (POINTS - 1)
    loss = np.maximum(level * (1 + sigma * noise), MIN_LEVEL_FRAC * level)
    return pl.DataFrame({"step": steps, "loss": loss, **cols})


def converged_run(sigma: float, family: str, interval: int, rng) -> pl.DataFrame:
    steps, cols = _columns(POINTS, interval, rng)
    level = level_curve(steps, POINTS * interval)
    noise = unit_noise(family, POINTS, rng, None)
    loss = np.maximum(level * (1 + sigma * noise), MIN_LEVEL_FRAC * level)
    return pl.DataFrame({"step": steps, "loss": loss, **cols})


def collapse_run(
    fall: float, points: int, sigma: float, family: str, interval: int, rng
) -> tuple[pl.DataFrame, int, int]:
    """The grid's curve, then a geometric fall of `fall`x over `points` logged points."""
    steps, cols = _columns(POINTS, interval, rng)
    level = level_curve(steps, POINTS * interval)
    noise = unit_noise(family, POINTS, rng, None)
    loss = np.maximum(level * (1 + sigma * noise), MIN_LEVEL_FRAC * level)
    i = int(rng.integers(int(0.3 * POINTS), int(0.8 * POINTS)))
    factor = np.ones(POINTS)
    factor[i : i + points] = fall ** (-np.arange(1, points + 1) / points)
    factor[i + points :] = 1 / fall
    loss = loss * factor
    return pl.DataFrame({"step": steps, "loss": loss, **cols}), int(steps[i]), i


def gradual_run(tau: int, sigma: float, family: str, interval: int, rng) -> pl.DataFrame:
    steps, cols = _columns(POINTS, interval, rng)
    level = 0.7 * np.exp(-np.arange(POINTS) / tau) + 1e-3
    noise = unit_noise(family, POINTS, rng, None)
    loss = np.maximum(level * (1 + sigma * noise), MIN_LEVEL_FRAC * level)
    return pl.DataFrame({"step": steps, "loss": loss, **cols})


def _flagged(result, code: str, window: tuple[int, int] | None = None) -> bool:
    return any(
        f.code == code
        and int(f.severity) >= 1
        and (window is None or (f.step is not None and window[0] <= f.step <= window[1]))
        for f in result.findings
    )


def run_learning(runs: int, seed: int) -> dict:
    """Every cell's flagged count; the summary the report prints."""
    started = time.process_time()
    cells: list[dict] = []
    for family in FAMILIES:
        for interval in INTERVALS:
            for sigma in SIGMAS:
                cells += _scope(runs, seed, family, interval, sigma)
    return {"cells": cells, "cpu_s": time.process_time() - started}


def _scope(runs: int, seed: int, family: str, interval: int, sigma: float) -> list[dict]:
    """The cells of one noise family, logging interval and noise level."""
    from stabilitycli import analyze

    scope = {"family": family, "interval": interval, "sigma": sigma}
    cells: list[dict] = []

    def cell(kind: str, size: str, make, check) -> None:
        rng = np.random.default_rng(seed_for(seed, f"{kind}|{size}|{scope}"))
        flagged = sum(bool(check(*make(rng))) for _ in range(runs))
        cells.append(
            {
                "kind": kind,
                "size": size,
                **scope,
                "runs": runs,
                "flagged": flagged,
                "points": runs * POINTS,
            }
        )

    def learned(r) -> bool:
        return _flagged(r, "no-learning") or _flagged(r, "loss-collapse")

    for d in DECREASES:
        cell(
            "flat",
            f"{d:g}σ",
            lambda rng, d=d: (analyze(flat_run(d, sigma, family, interval, rng)),),
            lambda r: _flagged(r, "no-learning"),
        )
    cell(
        "converged",
        "—",
        lambda rng: (analyze(converged_run(sigma, family, interval, rng)),),
        learned,
    )
    for fall in FALLS:
        for k in FALL_POINTS:

            def make(rng, fall=fall, k=k):
                frame, onset, _ = collapse_run(fall, k, sigma, family, interval, rng)
                return analyze(frame), onset

            def check(r, onset, k=k) -> bool:
                return _flagged(r, "loss-collapse", (onset - interval, onset + k * interval))

            cell("collapse", f"{fall:g}x/{k}pt", make, check)
    for tau in GRADUAL_TAU:
        cell(
            "gradual",
            f"τ={tau}pt",
            lambda rng, tau=tau: (analyze(gradual_run(tau, sigma, family, interval, rng)),),
            learned,
        )
    return cells


def _pool(cells: list[dict], kind: str, keep=lambda c: True) -> tuple[int, int, int]:
    chosen = [c for c in cells if c["kind"] == kind and keep(c)]
    return (
        sum(c["flagged"] for c in chosen),
        sum(c["runs"] for c in chosen),
        sum(c["points"] for c in chosen),
    )


def learning_headline(data: dict, healthy: list[dict]) -> list[dict]:
    """Recall and false alarms per 10^5 logged points for each new kind."""
    cells = data["cells"]

    def fall_of(c: dict) -> float:
        return float(c["size"].split("x")[0])

    def decrease_of(c: dict) -> float:
        return float(c["size"].rstrip("σ"))

    # the main grid's healthy runs (the learned-and-converged curve at every family and
    # interval), counted by code in their records
    grid_points = sum(h["points"] for h in healthy if not h["case"]["ranks"])

    def grid_alarms(code: str) -> int:
        return sum(h.get("other", {}).get(code, 0) for h in healthy if not h["case"]["ranks"])

    def row(code: str, events: tuple[int, int, int], learned: list) -> dict:
        hit, n, _ = events
        alarms = sum(f for f, _, _ in learned) + grid_alarms(code)
        points = sum(p for _, _, p in learned) + grid_points
        return {
            "code": code,
            "recall": hit / n,
            "events": n,
            "false_alarms": alarms,
            "points": points,
        }

    learned = [_pool(cells, "converged"), _pool(cells, "gradual")]
    return [
        row(
            "no-learning",
            _pool(cells, "flat", lambda c: decrease_of(c) <= MUST_FIRE_DECREASE),
            [_pool(cells, "flat", lambda c: decrease_of(c) >= MUST_NOT_FIRE_DECREASE), *learned],
        ),
        row(
            "loss-collapse",
            _pool(cells, "collapse", lambda c: fall_of(c) >= MUST_FIRE_FALL),
            learned,
        ),
    ]


def learning_md(data: dict, healthy: list[dict]) -> list[str]:
    cells = data["cells"]
    lines = [
        "## Never learned and loss collapse (#34)",
        "",
        "Written by `benchmarks/_dq_learning.py` (its docstring says how the runs are made). "
        f"{POINTS:,} logged points per run, noise families {', '.join(FAMILIES)}, logged every "
        f"{' and '.join(map(str, INTERVALS))} steps, noise σ "
        f"{' and '.join(f'{100 * s:g}%' for s in SIGMAS)} of the level; "
        f"{data['cpu_s']:.0f} CPU-s.",
        "",
        "| kind | recall | events | false alarms | per 10^5 logged points |",
        "|---|---|---|---|---|",
    ]
    for row in learning_headline(data, healthy):
        lines.append(
            f"| `{row['code']}` | {100 * row['recall']:.1f}% | {row['events']} | "
            f"{row['false_alarms']} in {row['points']:,} points | "
            f"{1e5 * row['false_alarms'] / max(1, row['points']):.2f} |"
        )
    lines += [
        "",
        "Recall: `no-learning` over the flat runs that fell 0-0.5 noise σ, `loss-collapse` over "
        "falls of 1e3x and 1e4x in 1-5 points (dated within the fall). False alarms: any "
        "warning/error finding of the kind on the runs that learned (a 5σ fall, the converged "
        "curve, the gradual classifiers) and on the main grid's healthy runs.",
        "",
        "Flagged runs per grade (all families, intervals and noise levels pooled):",
        "",
        "| runs | grade | flagged |",
        "|---|---|---|",
    ]
    order = dict.fromkeys((c["kind"], c["size"]) for c in cells)
    for kind, size in order:
        hit, n, _ = _pool(cells, kind, lambda c, size=size: c["size"] == size)
        lines.append(f"| {kind} | {size} | {hit}/{n} ({100 * hit / max(1, n):.0f}%) |")
    return lines
