"""Write the synthetic JSONL runs under fixtures/runs/ (seeded: the output is reproducible).

    python scripts/make_fixtures.py

Each run is a realistic small training log - loss on a power-law decay after
warmup with heavy-tailed (right-skewed) mini-batch noise, a pre-clip grad norm
that decays and jitters log-normally, a linear-warmup cosine LR - with one
pathology injected at a known step. Beside each run.jsonl an expected.json
states the verdict, cause and key steps the tests hold `stab` to. Healthy runs
come at several noise levels and log intervals; their noise is heavy-tailed so
they cross mu + 3 sigma now and then (the spec's blips) without being spikes.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
STEPS = 1500


def base_run(
    seed: int,
    steps: int = STEPS,
    noise: float = 0.03,
    warmup: int = 100,
    peak_lr: float = 3e-4,
    loss_floor: float = 2.2,
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    clean = loss_floor + 8.6 * (1 + t / 40.0) ** -0.75
    # right-skewed noise: gamma(k=2) centred, scaled relative to the level
    tail = rng.standard_gamma(2.0, steps) - 2.0
    loss = clean * (1 + noise * tail / math.sqrt(2.0))
    grad = (0.35 + 2.0 * (1 + t / 60.0) ** -1.0) * rng.lognormal(0.0, 0.12, steps)
    progress = np.clip((t - warmup) / max(1, steps - warmup), 0, 1)
    lr = np.where(
        t < warmup,
        peak_lr * (t + 1) / warmup,
        0.1 * peak_lr + 0.45 * peak_lr * (1 + np.cos(math.pi * progress)),
    )
    return {"step": t.astype(int), "loss": loss, "grad_norm": grad, "lr": lr}


def write(
    name: str,
    run: dict[str, np.ndarray],
    expected: dict,
    *,
    keys: dict[str, str] | None = None,
    every: int = 1,
    manifest: dict | None = None,
    rows: list[dict] | None = None,
    gz: bool = False,
) -> None:
    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    keys = keys or {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"}
    lines = []
    if rows is None:
        rows = _rows(run, keys, every)
    for row in rows:
        lines.append(
            json.dumps(row)
        )  # json.dumps writes bare NaN / Infinity, as training scripts do
    text = "\n".join(lines) + "\n"
    if gz:
        # mtime=0: regenerating writes the same bytes
        with (
            open(folder / "run.jsonl.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle,
        ):
            handle.write(text.encode())
    else:
        (folder / "run.jsonl").write_text(text)
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    if manifest:
        (folder / "manifest.json").write_text(json.dumps(manifest) + "\n")


def _rows(run: dict[str, np.ndarray], keys: dict[str, str], every: int) -> list[dict]:
    rows = []
    n = run["step"].size
    for i in range(0, n, every):
        row = {"step": int(run["step"][i])}
        for name, values in run.items():
            if name == "step" or name not in keys:
                continue
            value = values[i]
            if (
                isinstance(value, float)
                and math.isnan(value)
                and name != "loss"
                and not keys.get("_keep_nan")
            ):
                continue
            row[keys[name]] = _round(value)
        rows.append(row)
    return rows


def _round(value):
    value = float(value)
    if not math.isfinite(value):
        return value
    return float(f"{value:.6g}")


def healthy() -> None:
    write("healthy-low-noise", base_run(1, noise=0.015), {"verdict": "healthy"})
    write("healthy-high-noise", base_run(2, noise=0.06), {"verdict": "healthy"})
    write(
        "healthy-every-10", base_run(3, steps=15000, noise=0.04), {"verdict": "healthy"}, every=10
    )
    run = base_run(4, steps=3000, noise=0.03)
    write(
        "healthy-hf-style",
        run,
        {"verdict": "healthy"},
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate"},
        every=25,
    )
    # a bf16 run whose keys are torchtitan's, to exercise the alias table
    write(
        "healthy-torchtitan-keys",
        base_run(5, noise=0.03),
        {"verdict": "healthy"},
        keys={"loss": "loss_metrics/global_avg_loss", "grad_norm": "grad_norm", "lr": "lr/AdamW"},
        manifest={"dtype": "bf16"},
    )


def spikes() -> None:
    run = base_run(10)
    onset = 900
    run["grad_norm"][onset - 1] *= 60  # grad norm leads the loss spike by one step
    run["loss"][onset : onset + 4] += np.array([3.1, 2.2, 0.9, 0.2])
    write(
        "spike-long-tail",
        run,
        {
            "verdict": "spike-recoverable",
            "cause": "long-tail-token",
            "findings": {"spike": [onset]},
        },
    )

    run = base_run(11)
    onset = 1000
    run["lr"][onset - 1 :] *= 3.0  # a scheduler restored wrong: the LR triples
    run["loss"][onset : onset + 6] += np.array([2.5, 1.9, 1.2, 0.6, 0.2, 0.05])
    write(
        "spike-lr-jump",
        run,
        {
            "verdict": "spike-recoverable",
            "cause": "lr-discontinuity",
            "findings": {"spike": [onset], "lr-jump": [onset - 1]},
        },
    )

    run = base_run(12)
    onset = 1100
    run["batch_id"] = np.arange(STEPS, dtype=float) + 5000
    run["batch_id"][onset] = run["batch_id"][onset - 37]  # the loader served a batch again
    run["loss"][onset : onset + 3] += np.array([1.8, 0.7, 0.1])
    write(
        "spike-duplicate-batch",
        run,
        {
            "verdict": "spike-recoverable",
            "cause": "duplicate-batch",
            "findings": {"spike": [onset]},
        },
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "batch_id": "batch_id"},
    )

    run = base_run(13)
    onset = 800
    bump = np.zeros(STEPS)
    bump[onset:] = 0.9 * np.exp(-(np.arange(STEPS - onset)) / 2000.0) + 0.35  # settles higher
    bump[onset : onset + 3] += np.array([4.0, 2.0, 1.0])
    run["loss"] += bump
    run["grad_norm"][onset - 2] *= 45
    write(
        "spike-persistent",
        run,
        {"verdict": "spike-persistent", "cause": "long-tail-token", "findings": {"spike": [onset]}},
    )

    run = base_run(14, steps=1300)
    # the run crashed at 1000 and resumed from the checkpoint at 900 without optimizer state
    rows = _rows(run, {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"}, 1)
    resumed = base_run(15, steps=1300)
    resumed["loss"][900:] += np.concatenate(
        ([2.6, 2.0, 1.5, 1.1, 0.8, 0.6, 0.45, 0.35, 0.3], np.full(391, 0.0))
    )
    resumed["loss"][909:1300] += 0.3 + 0.2 * np.exp(-np.arange(391) / 150.0)  # settles higher
    resumed["grad_norm"][900:905] *= 4
    tail_rows = _rows(
        resumed, {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"}, 1
    )[900:]
    write(
        "spike-after-restart",
        run,
        {
            "verdict": "spike-persistent",
            "cause": "optimizer-reset",
            "findings": {"spike": [900], "restart": [900]},
            "restarts": [{"resumed_from_step": 900, "last_step_before": 999}],
        },
        rows=rows[:1000] + tail_rows,
    )


def nans() -> None:
    run = base_run(20)
    first = 1200
    layers = ["embed", "h.0.attn", "h.0.mlp", "h.1.attn", "h.1.mlp", "ln_f", "lm_head"]
    rng = np.random.default_rng(21)
    for i, layer in enumerate(layers):
        run[f"act_norm/{layer}"] = (10 + 3 * i) * rng.lognormal(0, 0.05, STEPS)
    # h.1.mlp overflows first; everything downstream follows
    for layer in layers[4:]:
        run[f"act_norm/{layer}"][first:] = np.inf if layer == "h.1.mlp" else np.nan
    run["loss"][first:] = np.nan
    run["grad_norm"][first:] = np.nan
    keys = {
        "loss": "train/loss",
        "grad_norm": "train/grad_norm",
        "lr": "train/lr",
        "_keep_nan": "1",
    }
    keys.update({f"act_norm/{layer}": f"act_norm/{layer}" for layer in layers})
    # an fp32 NaN that starts inside a block is not log(0) in the loss: no cause is claimed
    write(
        "nan-fp32-origin",
        run,
        {"verdict": "nan", "cause": None, "findings": {"nan": [first]}, "origin": "h.1.mlp"},
        keys=keys,
        manifest={"dtype": "fp32"},
    )

    run = base_run(24)
    first = 1300
    for i, layer in enumerate(layers):
        run[f"act_norm/{layer}"] = (10 + 3 * i) * rng.lognormal(0, 0.05, STEPS)
    # every layer finite, the loss alone non-finite: log(softmax) hit log(0)
    run["loss"][first] = np.inf
    run["loss"][first + 1 :] = np.nan
    run["grad_norm"][first:] = np.nan
    write(
        "nan-fp32-log-zero",
        run,
        {"verdict": "nan", "cause": "log-of-zero", "findings": {"nan": [first]}},
        keys=keys,
        manifest={"dtype": "fp32"},
    )

    run = base_run(22)
    first = 1000
    scale = np.full(STEPS, 65536.0)
    scale[950:] = 32768.0
    scale[980:] = 16384.0
    run["loss_scale"] = scale
    run["grad_norm"][[949, 979]] = np.inf
    run["loss"][first] = np.inf
    run["loss"][first + 1 :] = np.nan
    write(
        "nan-fp16-overflow",
        run,
        {"verdict": "nan", "cause": "activation-overflow", "findings": {"nan": [first]}},
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "loss_scale": "loss_scale"},
    )

    run = base_run(23, steps=2000)
    first = 1500
    # the Hugging Face Trainer drops NaN losses from its logged mean: only grad_norm shows it
    run["grad_norm"][first:] = np.nan
    write(
        "nan-hidden-hf",
        run,
        {"verdict": "nan", "cause": None, "findings": {"nan": [first]}},
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate", "_keep_nan": "1"},
        every=5,
    )


def mixed_precision() -> None:
    run = base_run(30)
    scale = np.full(STEPS, 65536.0)
    overflow_steps = np.arange(300, STEPS, 97)
    for s in overflow_steps:  # overflow, halve, regrow 2x after a while: the scaler working
        scale[s:] /= 2
        scale[s + 40 :] *= 2
        run["grad_norm"][s] = np.inf
    run["loss_scale"] = scale
    write(
        "fp16-healthy-scaler",
        run,
        {"verdict": "healthy", "findings": {"loss-scale-halving": [300]}},
        keys={
            "loss": "lm loss",
            "grad_norm": "grad norm",
            "lr": "learning rate",
            "loss_scale": "loss scale",
        },
    )

    run = base_run(31)
    scale = np.full(STEPS, 65536.0)
    first_collapse = 700
    for k, s in enumerate(range(first_collapse, first_collapse + 20)):
        scale[s:] = 65536.0 / 2 ** (k + 1)
        run["grad_norm"][s] = np.inf
    run["loss_scale"] = scale
    write(
        "loss-scale-collapsed",
        run,
        {
            "verdict": "loss-scale-collapsed",
            "cause": "activation-overflow",
            "findings": {"loss-scale-collapsed": [first_collapse + 16]},
        },
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "loss_scale": "loss_scale"},
    )

    run = base_run(32)
    run["loss_scale"] = np.full(STEPS, 128.0)
    run["grad_norm"][np.arange(400, STEPS, 50)] = np.inf
    write(
        "loss-scale-static",
        run,
        {"verdict": "loss-scale-static", "cause": None, "findings": {"loss-scale-static": [400]}},
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "loss_scale": "loss_scale"},
    )

    run = base_run(33)
    run["grad_norm"][np.arange(200, STEPS, 40)] = np.inf  # 2.5% of steps, no scaler evidence
    write(
        "fp16-overflow",
        run,
        {
            "verdict": "fp16-overflow",
            "cause": "activation-overflow",
            "findings": {"fp16-overflow": [200]},
        },
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr"},
        manifest={"dtype": "fp16"},
    )


def divergence() -> None:
    steps = 2000
    start = 1200
    ramp = np.clip(np.arange(steps) - start, 0, None) / 800.0

    run = base_run(40, steps=steps)
    run["loss"] += 0.8 * ramp
    run["lr"][start - 300 :] = np.linspace(
        run["lr"][start - 300], 4 * run["lr"][start - 300], steps - start + 300
    )
    write(
        "divergence-lr-increasing",
        run,
        {
            "verdict": "divergence",
            "cause": "lr-increasing",
            "findings": {"divergence": [start]},
            "step_tolerance": 200,
        },
    )

    run = base_run(41, steps=steps)
    run["loss"] += 0.8 * ramp
    norm = 80 + 0.01 * np.arange(steps)
    norm[start:] *= np.exp(np.arange(steps - start) / 180.0)
    run["param_norm"] = norm
    write(
        "divergence-weight-norm",
        run,
        {
            "verdict": "divergence",
            "cause": "weight-norm",
            "findings": {"divergence": [start]},
            "step_tolerance": 200,
        },
        keys={"loss": "loss", "grad_norm": "grad_norm", "lr": "lr", "param_norm": "params norm"},
    )

    run = base_run(42, steps=steps)
    run["loss"] += 0.8 * ramp
    run["grad_norm"] *= 1 + 3 * ramp
    write(
        "divergence-grad-norm",
        run,
        {
            "verdict": "divergence",
            "cause": "grad-norm-rising",
            "findings": {"divergence": [start]},
            "step_tolerance": 200,
        },
    )

    run = base_run(43, steps=steps)
    run["loss"][600:604] += np.array([2.4, 1.5, 0.5, 0.1])
    run["grad_norm"][599] *= 50
    run["loss"] += 0.8 * ramp
    run["grad_norm"] *= 1 + 3 * ramp
    write(
        "spike-then-divergence",
        run,
        {
            "verdict": "divergence",
            "cause": "grad-norm-rising",
            "findings": {"divergence": [start], "spike": [600]},
            "step_tolerance": 200,
        },
    )

    run = base_run(44, steps=steps, noise=0.01)
    # the power-law decay still falls ~0.13 over the last 500 steps: the net drift is +0.08 (3%)
    run["loss"] += 0.21 * np.clip((np.arange(steps) - 1500) / 500.0, 0, None)
    write(
        "plateau",
        run,
        {
            "verdict": "plateau",
            "cause": None,
            "findings": {"plateau": [1500]},
            "step_tolerance": 250,
        },
    )


def other() -> None:
    run = base_run(50, steps=1300)
    rows = _rows(run, {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"}, 1)
    # crash at 1000, resume from the checkpoint at 800 with full state: the replay tracks closely
    write(
        "restart-clean",
        run,
        {
            "verdict": "healthy",
            "findings": {"restart": [800]},
            "restarts": [{"resumed_from_step": 800, "last_step_before": 999}],
        },
        rows=rows[:1000] + rows[800:],
    )
    run = base_run(51, steps=40)
    write("insufficient-short", run, {"verdict": "insufficient-data"})
    run = base_run(52)
    run["loss"][[500, 501]] = [float("nan"), float("inf")]
    run["loss"][502:] = float("nan")
    write("nan-tokens-gz", run, {"verdict": "nan", "findings": {"nan": [500]}}, gz=True)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for build in (healthy, spikes, nans, mixed_precision, divergence, other):
        build()
    print(f"wrote {len(list(OUT.iterdir()))} runs under {OUT}")


if __name__ == "__main__":
    main()
