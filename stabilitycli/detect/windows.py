"""Trailing windows in training steps, with the spec's widening rule (spec 0).

A window of W steps needs `min_points` logged points. A log sparser than that
(the Hugging Face Trainer logs every 500 steps) uses the last `widened_points`
logged points instead, and the evidence says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class TrailingStats:
    mean: np.ndarray
    std: np.ndarray
    count: np.ndarray
    widened: bool
    description: str


def median_interval(steps: np.ndarray) -> float:
    if steps.size < 2:
        return float("nan")
    return float(np.median(np.diff(steps)))


def trailing_stats(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    min_points: int,
    widened_points: int,
) -> TrailingStats:
    """Mean and std of `values` over [t - window_steps, t), excluding t itself.

    Non-finite values are left out of the baseline (a NaN would otherwise blind
    every window that holds it, polars' rolling semantics); the raw values are
    untouched.
    """
    interval = median_interval(steps)
    per_window = window_steps / interval if interval and interval > 0 else 0.0
    frame = pl.DataFrame(
        {"step": steps, "v": np.where(np.isfinite(values), values, np.nan)}
    ).with_columns(pl.col("v").fill_nan(None))
    if per_window >= min_points:
        window = f"{int(window_steps)}i"
        out = frame.select(
            pl.col("v").rolling_mean_by("step", window_size=window, closed="left").alias("mean"),
            pl.col("v").rolling_std_by("step", window_size=window, closed="left").alias("std"),
            pl.col("v")
            .is_not_null()
            .cast(pl.Float64)
            .rolling_sum_by("step", window_size=window, closed="left")
            .alias("count"),
        )
        description = f"{window_steps}-step window (about {per_window:.0f} points)"
        widened = False
    else:
        shifted = pl.col("v").shift(1)
        out = frame.select(
            shifted.rolling_mean(widened_points, min_samples=2).alias("mean"),
            shifted.rolling_std(widened_points, min_samples=2).alias("std"),
            shifted.is_not_null()
            .cast(pl.Float64)
            .rolling_sum(widened_points, min_samples=1)
            .alias("count"),
        )
        description = (
            f"window widened to {widened_points} points = {widened_points * interval:,.0f} steps: "
            f"one point per {interval:,.0f} steps"
        )
        widened = True
    return TrailingStats(
        mean=out["mean"].fill_null(np.nan).to_numpy().astype(np.float64),
        std=out["std"].fill_null(np.nan).to_numpy().astype(np.float64),
        count=out["count"].fill_null(0).to_numpy().astype(np.float64),
        widened=widened,
        description=description,
    )


def value_at_or_before(steps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """values at the last logged step <= each of `at` (NaN before the first)."""
    idx = np.searchsorted(steps, at, side="right") - 1
    out = np.full(np.shape(at), np.nan)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


def rolling_median_at(
    values: np.ndarray, window_points: int, min_samples: int, rows: np.ndarray
) -> np.ndarray:
    """`pl.Series(values).shift(1).rolling_median(window_points, min_samples)` at `rows` only
    (NaN where that is null).

    polars takes each window's median from that window alone, so the windows of
    `rows`, laid end to end, give the very same numbers at a fraction of the cost
    when `rows` are few. A leading all-null window keeps polars on the null-aware
    kernel that the full series (its shifted-in null) takes.
    """
    if rows.size == 0:
        return np.zeros(0)
    if rows.size * window_points >= values.size:  # many rows: the whole series is cheaper
        whole = pl.Series(values, dtype=pl.Float64).shift(1)
        medians = whole.rolling_median(window_points, min_samples=min_samples)
        return medians.fill_null(np.nan).to_numpy()[rows]
    # shifted position p holds values[p - 1]; p < 1 (the shifted-in null, or before the
    # start) is null, which a truncated window at the start amounts to
    positions = rows.astype(np.int64)[:, None] + np.arange(1 - window_points, 1)[None, :]
    positions = np.concatenate([np.zeros(window_points, dtype=np.int64), positions.ravel()])
    present = positions >= 1
    gathered = values[np.where(present, positions - 1, 0)]
    windows = pl.DataFrame({"v": gathered, "present": present}).select(
        pl.when(pl.col("present")).then(pl.col("v")).alias("v")
    )["v"]
    medians = windows.rolling_median(window_points, min_samples=min_samples)
    ends = medians.gather_every(window_points, offset=window_points - 1)[1:]
    return ends.fill_null(np.nan).to_numpy()
