"""Synthetic live runs for the watch tests: JSONL lines of a decaying loss with noise and,
at a chosen step, a spike that comes back or stays."""

from __future__ import annotations

import json

import numpy as np


def loss_at(
    steps: np.ndarray, spike_at: int | None = None, stays: bool = False, seed: int = 0
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    loss = 2.0 + 1.5 * np.exp(-steps / 400.0) + rng.normal(0.0, 0.01, steps.size)
    if spike_at is not None:
        hit = steps >= spike_at if stays else (steps >= spike_at) & (steps < spike_at + 3)
        loss = np.where(hit, loss + 4.0, loss)
    return loss


def jsonl_lines(first: int, last: int, **spike) -> bytes:
    """Steps first..last-1 as JSON lines (what the trainer writes)."""
    steps = np.arange(first, last)
    loss = loss_at(np.arange(0, last), **spike)[first:last]
    return b"".join(
        json.dumps({"step": int(s), "loss": float(v), "lr": 3e-4}).encode() + b"\n"
        for s, v in zip(steps, loss, strict=True)
    )
