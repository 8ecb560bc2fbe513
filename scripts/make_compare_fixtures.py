"""Write the seeded runs under fixtures/compare/ that `stab compare` and the restart-replay
rule are tested on.

    python scripts/make_compare_fixtures.py

The loss model is `make_fixtures.base_run` (power-law decay, right-skewed
mini-batch noise, log-normal grad-norm jitter, warmup + cosine LR), so these
runs look like the ones under fixtures/runs/. Each folder has a run.jsonl and
an expected.json stating what the tests hold `stab` to:

* baseline            seed 100, every step, with consumed tokens (8192 per step)
* rerun-identical     the same seed again: the same file
* rerun-noise         seed 101: the same curve, different mini-batch noise
* rerun-drift         seed 102, leaves the curve from step 1000 on (+0.6 within ~30 steps)
* every-10            seed 103, logged every 10 steps
* double-batch        twice the batch: the same curve per token, half the steps per token
* fix-removes-spike   seed 10 without the spike injected into fixtures/runs/spike-long-tail
* restart-one-clean   one resume with full state (replay differs only by noise)
* restart-two-optimizer-lost  a clean resume, then one that lost the optimizer state
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _rows, base_run

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "compare"
STEPS = 1500
TOKENS_PER_STEP = 8 * 1024  # batch 8 x sequence 1024
KEYS = {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"}
KEYS_TOKENS = {**KEYS, "tokens": "consumed_tokens"}


def write(name: str, rows: list[dict], expected: dict) -> None:
    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def with_tokens(run: dict, per_step: int = TOKENS_PER_STEP) -> dict:
    # consumed tokens after the step, as trainers log it
    return {**run, "tokens": (run["step"] + 1).astype(float) * per_step}


def reruns() -> None:
    base = with_tokens(base_run(100))
    write("baseline", _rows(base, KEYS_TOKENS, 1), {"role": "baseline"})
    write("rerun-identical", _rows(base, KEYS_TOKENS, 1), {"against": "baseline", "passes": True})
    write(
        "rerun-noise",
        _rows(with_tokens(base_run(101)), KEYS_TOKENS, 1),
        {
            "against": "baseline",
            "passes": True,
            "why": "same curve, another seed's mini-batch noise",
        },
    )

    drift = base_run(102)
    start = 1000
    t = np.arange(STEPS) - start
    drift["loss"] = drift["loss"] + np.where(
        t >= 0, 0.6 * (1 - np.exp(-np.clip(t, 0, None) / 10.0)), 0.0
    )
    write(
        "rerun-drift",
        _rows(with_tokens(drift), KEYS_TOKENS, 1),
        {"against": "baseline", "passes": False, "diverges_at": start, "step_tolerance": 30},
    )

    write(
        "every-10",
        _rows(with_tokens(base_run(103)), KEYS_TOKENS, 10),
        {"against": "baseline", "passes": True, "grid": "every 10 steps"},
    )

    # twice the batch: per token the same curve (the model has seen the same data), half the steps
    big = base_run(104, steps=2 * STEPS, noise=0.02)
    run = {k: v[1::2] for k, v in big.items()}
    run["step"] = np.arange(STEPS)
    write(
        "double-batch",
        _rows(with_tokens(run, 2 * TOKENS_PER_STEP), KEYS_TOKENS, 1),
        {"against": "baseline", "passes_on": "tokens", "fails_on": "step"},
    )


def fix() -> None:
    # fixtures/runs/spike-long-tail is base_run(10) with a spike at 900 (grad norm x60 at 899):
    # the fixed re-run (same seed and data order, lower clip) is the same run without it
    write(
        "fix-removes-spike",
        _rows(base_run(10), KEYS, 1),
        {
            "against": "../runs/spike-long-tail",
            "broken_spike_step": 900,
            "expect_pass": ["loss@900<3.0", "max(grad_norm)[880:920]<3.0"],
            "compare_until": 890,
        },
    )


def restarts() -> None:
    # one resume with full state, crash at 1000, resume from the checkpoint at 800; kernels are
    # not deterministic, so the replay repeats the curve with other mini-batch noise
    first, again = base_run(110, steps=1300), base_run(111, steps=1300)
    rows = _rows(first, KEYS, 1)[:1000] + _rows(again, KEYS, 1)[800:]
    write(
        "restart-one-clean",
        rows,
        {
            "restarts": [
                {"resumed_from_step": 800, "last_step_before": 999, "replay": "within noise"}
            ]
        },
    )

    # a clean resume (1000 -> 800), then one that lost the optimizer state (1500 -> 1200):
    # the data cursor was restored, so the batches (and their noise) repeat, but the first
    # updates with zeroed Adam moments throw the loss up by 2.0, decaying over ~15 steps
    steps = 2000
    seg0, seg1 = base_run(120, steps=steps), base_run(121, steps=steps)
    lost = {k: v.copy() for k, v in seg1.items()}
    k = np.clip(np.arange(steps) - 1200, 0, None).astype(float)
    after = np.arange(steps) >= 1200
    lost["loss"][after] += 2.0 * np.exp(-k[after] / 15.0)
    lost["grad_norm"][after] *= 1 + 3.0 * np.exp(-k[after] / 5.0)
    rows = (
        _rows(seg0, KEYS, 1)[:1000] + _rows(seg1, KEYS, 1)[800:1500] + _rows(lost, KEYS, 1)[1200:]
    )
    write(
        "restart-two-optimizer-lost",
        rows,
        {
            "restarts": [
                {"resumed_from_step": 800, "last_step_before": 999, "replay": "within noise"},
                {
                    "resumed_from_step": 1200,
                    "last_step_before": 1499,
                    "replay": "departs",
                    "bump": {"amplitude": 2.0, "decay_steps": 15.0},
                    "steps_to_return": "first k with 2.0 * exp(-k / 15) <= band",
                },
            ]
        },
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for build in (reruns, fix, restarts):
        build()
    print(f"wrote {len(list(OUT.iterdir()))} runs under {OUT}")


if __name__ == "__main__":
    main()
