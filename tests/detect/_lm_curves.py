"""LM-shaped loss curves for the spike tests of issue 36: warmup and cosine decay, epoch
drops, mixture humps, AR(1) noise mixed with skewed batch noise, sparse logging.

Small on purpose (a few thousand points): each test writes its log with a real writer
(pandas CSV or JSONL) into its tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def noise(rng: np.random.Generator, n: int, sigma: float, phi: float = 0.5) -> np.ndarray:
    """Relative noise of std about `sigma`: AR(1) with coefficient `phi`, plus a skewed
    (centred gamma) batch part, as a mini-batch loss has a heavy right tail."""
    shocks = rng.normal(0.0, 1.0, n)
    ar = np.empty(n)
    ar[0] = shocks[0]
    for i in range(1, n):  # a few thousand points: the recursion is the definition of AR(1)
        ar[i] = phi * ar[i - 1] + np.sqrt(1 - phi * phi) * shocks[i]
    skew = rng.gamma(2.0, 1.0, n) - 2.0  # std sqrt(2), right tail
    return sigma * (0.8 * ar + 0.6 * skew / np.sqrt(2.0))


def epochs(
    *,
    epoch_steps: int = 600,
    count: int = 3,
    drop: float = 0.15,
    sigma: float = 0.008,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """A multi-epoch fine-tune logged every step: a slow cosine decay, and the loss steps down
    by `drop` at each epoch boundary (the model has seen the data)."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, epoch_steps * count + 1)
    epoch = (step - 1) // epoch_steps
    curve = 1.6 * (1 - drop) ** epoch * (1 - 0.04 * (1 - np.cos(np.pi * step / step[-1])) / 2)
    lr = 2e-5 * 0.5 * (1 + np.cos(np.pi * step / step[-1]))
    return {"step": step, "curve": curve, "noise": noise(rng, step.size, sigma), "lr": lr}


def warmup(*, steps: int = 1500, sigma: float = 0.004, seed: int = 1) -> dict[str, np.ndarray]:
    """Pretraining from scratch logged every step: the loss falls fast from 10.8 during a
    300-step warmup, then decays slowly (cosine LR)."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1)
    curve = 3.2 + 7.6 * np.exp(-step / 120.0)
    lr = np.where(step < 300, 3e-4 * step / 300, 3e-4 * 0.5 * (1 + np.cos(np.pi * step / steps)))
    grad = 1.0 + 4.0 * np.exp(-step / 150.0)
    return {
        "step": step,
        "curve": curve,
        "noise": noise(rng, step.size, sigma),
        "lr": lr,
        "grad_norm": grad * (1 + 0.1 * rng.standard_normal(step.size)),
    }


def hump(*, steps: int = 2000, sigma: float = 0.006, seed: int = 2) -> dict[str, np.ndarray]:
    """A healthy run with a mixture hump: from step 800 the loss rises by about 12% over 400
    steps (a harder data mixture), then falls back."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1)
    curve = 2.6 + 1.5 * np.exp(-step / 300.0)
    curve = curve * (1 + 0.12 * np.exp(-(((step - 1200) / 220.0) ** 2)))
    lr = 3e-4 * 0.5 * (1 + np.cos(np.pi * step / steps))
    return {"step": step, "curve": curve, "noise": noise(rng, step.size, sigma), "lr": lr}


def sparse(
    *, every: int, points: int, sigma: float, seed: int = 3, phi: float = 0.3
) -> dict[str, np.ndarray]:
    """Pretraining logged every `every` steps (each point one step's loss): warmup fall, then
    a cosine-shaped decay."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, points + 1) * every
    total = step[-1]
    curve = 2.4 + 0.5 * (1 - step / total) + 5.0 * np.exp(-step / (0.03 * total))
    lr = 3e-4 * 0.5 * (1 + np.cos(np.pi * step / total))
    grad = 0.8 + 2.0 * np.exp(-step / (0.05 * total))
    return {
        "step": step,
        "curve": curve,
        "noise": noise(rng, step.size, sigma, phi),
        "lr": lr,
        "grad_norm": grad * (1 + 0.08 * rng.standard_normal(step.size)),
    }


def loss_of(run: dict[str, np.ndarray], bump: np.ndarray | None = None) -> np.ndarray:
    """The logged loss: the curve, lifted by `bump` (a relative rise per point), with noise."""
    lift = 1.0 + (bump if bump is not None else 0.0)
    return run["curve"] * lift * (1.0 + run["noise"])


def write_csv(path: Path, run: dict[str, np.ndarray], loss: np.ndarray) -> Path:
    """The log as pandas writes a CSV (step, loss, lr and grad_norm when the run has one)."""
    import pandas as pd

    columns = {"step": run["step"], "loss": loss, "lr": run["lr"]}
    if "grad_norm" in run:
        columns["grad_norm"] = run["grad_norm"]
    pd.DataFrame(columns).to_csv(path, index=False)
    return path


def write_jsonl(path: Path, run: dict[str, np.ndarray], loss: np.ndarray) -> Path:
    """The log as one JSON object a line, the way a training loop's logger writes it."""
    keys = [k for k in ("lr", "grad_norm") if k in run]
    with path.open("w") as out:
        for i, step in enumerate(run["step"]):
            row = {"step": int(step), "loss": float(loss[i])}
            row.update({k: float(run[k][i]) for k in keys})
            out.write(json.dumps(row) + "\n")
    return path
