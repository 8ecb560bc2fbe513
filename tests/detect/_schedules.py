"""Planned LR schedules and the loss they give, for the schedule tests and the benchmark's
kin: SGDR with its restart bumps, step decay, warmup-stable-decay."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def sgdr(
    *,
    steps: int = 5000,
    every: int = 10,
    period: int = 1000,
    bump: float = 0.12,
    decay_steps: float = 120,
    t_mult: int = 1,
    blowup_at: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Cosine with warm restarts (100-step warmup); after each restart the loss bumps by
    `bump` and is back within about `decay_steps`. `blowup_at`: from that restart on the loss
    climbs and never comes back."""
    rng = np.random.default_rng(seed)
    step = np.arange(0, steps, every)
    lengths = [period * t_mult**k for k in range(20)]
    starts = np.cumsum([0, *lengths])
    cycle = np.searchsorted(starts, step, side="right") - 1
    into = step - starts[cycle]
    length = np.array(lengths)[cycle]
    lr = 1e-6 + 0.5 * (3e-4 - 1e-6) * (1 + np.cos(np.pi * into / length))
    lr = np.where(step < 100, 3e-4 * (step + every) / 100, lr)
    loss = 2.0 + 2.5 * np.exp(-step / 800)
    loss = loss + np.where(cycle > 0, bump * np.exp(-into / (decay_steps / 3)), 0.0)
    if blowup_at is not None:
        later = np.clip(step - blowup_at, 0, None)
        loss = loss + np.where(
            step >= blowup_at, 0.5 * np.minimum(later / 100, 1) + later / 2000, 0
        )
    return {"step": step, "loss": loss + rng.normal(0, 0.02, step.size), "lr": lr}


def step_decay(*, steps: int = 6000, every: int = 10, seed: int = 1) -> dict[str, np.ndarray]:
    """LR x0.1 at steps 2000 and 4000 (the loss drops a little after each)."""
    rng = np.random.default_rng(seed)
    step = np.arange(0, steps, every)
    lr = 1e-3 * 0.1 ** (step // 2000)
    loss = 2.0 + 2.0 * np.exp(-step / 700) - 0.1 * (step >= 2000) - 0.05 * (step >= 4000)
    return {"step": step, "loss": loss + rng.normal(0, 0.02, step.size), "lr": lr}


def wsd(*, steps: int = 6000, every: int = 10, seed: int = 2) -> dict[str, np.ndarray]:
    """Warmup 200 steps, constant 6e-4, linear cooldown to 0 over the last 20%."""
    rng = np.random.default_rng(seed)
    step = np.arange(0, steps, every)
    cool = int(0.8 * steps)
    lr = np.where(step < 200, 6e-4 * (step + every) / 200, 6e-4)
    lr = np.where(step >= cool, 6e-4 * (steps - every - step) / (steps - every - cool), lr)
    loss = 2.0 + 2.0 * np.exp(-step / 700) - 0.15 * np.clip((step - cool) / (steps - cool), 0, 1)
    return {"step": step, "loss": loss + rng.normal(0, 0.02, step.size), "lr": lr}


def write_parquet(run: dict[str, np.ndarray], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"step": run["step"], "train/loss": run["loss"], "lr": run["lr"]}), path
    )
    return path


def write_tensorboard(run: dict[str, np.ndarray], folder: Path) -> Path:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step, loss, lr in zip(run["step"], run["loss"], run["lr"], strict=True):
        writer.add_scalar("train/loss", float(loss), int(step))
        writer.add_scalar("train/lr", float(lr), int(step))
    writer.close()
    return folder


def write_jsonl(run: dict[str, np.ndarray], path: Path) -> Path:
    import json

    with path.open("w") as out:
        for step, loss, lr in zip(run["step"], run["loss"], run["lr"], strict=True):
            out.write(json.dumps({"step": int(step), "loss": float(loss), "lr": float(lr)}) + "\n")
    return path
