"""Run `train_tiny_lm.py` once per pathology and keep the logs as fixtures/torch-runs/.

    /tmp/torchvenv/bin/python scripts/realtrain/make_torch_fixtures.py [--jobs 2] [--only NAME ...]

Run it with a Python that has torch (see train_tiny_lm.py); it is never run by
the tests. Each run gets a folder with the gzipped log, the manifest.json the
training script wrote (dtype, seed, torch version, command), and an
expected.json holding the TRUE diagnosis: what was done to the training, not
what `stab` says about it. The README.md of the folder is rewritten from the
same table, so the commands there are the ones that made the logs.

Every number in an `expected` entry below was read off the log (skipped-step
flags, batch ids, the first NaN row), never off stab's output.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "torch-runs"
SCRIPT = "scripts/realtrain/train_tiny_lm.py"


@dataclass(frozen=True)
class Spec:
    name: str
    flags: tuple[str, ...]
    injected: str  # what was done to the training
    truth: str  # what a correct diagnosis says, with the numbers from the log
    expected: dict = field(default_factory=dict)


RUNS: tuple[Spec, ...] = (
    Spec(
        "healthy-seed0",
        ("--act-norms", "--eval-every", "100"),
        "nothing: defaults (peak LR 3e-3, 100 warmup, cosine to 10%, clip 1.0, wd 0.1); "
        "eval every 100 steps on separate sparse lines; per-layer activation norms",
        "healthy. The loss falls 3.5 -> 1.3 with a sharp drop at steps ~500-650 (the copy task "
        "is learned: an induction head forms); mini-batch noise sigma ~0.15 nats",
        {"verdict": "healthy"},
    ),
    Spec(
        "healthy-seed1",
        ("--seed", "1"),
        "nothing: seed 1 (other init and data order)",
        "healthy; the induction-head drop comes earlier (~400-500)",
        {"verdict": "healthy"},
    ),
    Spec(
        "healthy-bf16",
        ("--dtype", "bf16"),
        "nothing: bf16 CPU autocast",
        "healthy; tracks the fp32 run within noise",
        {"verdict": "healthy"},
    ),
    Spec(
        "healthy-fp16-scaler",
        ("--dtype", "fp16", "--steps", "1500", "--act-norms"),
        "nothing: fp16 weights/activations with fp32 master weights and a dynamic loss scaler "
        "(start 65536, x2 after 200 clean steps, /2 and skip on overflow)",
        "healthy: the scaler grows to 2^21 and overflows 3 times (steps 901, 1302, 1375: "
        "skipped, inf grad norm, scale halved), which is the scaler doing its job",
        {"verdict": "healthy", "findings": {"loss-scale-halving": [901]}},
    ),
    Spec(
        "bad-batch-rare",
        ("--bad-batch-at", "1200"),
        "one batch at step 1200 made entirely of 4 reserved tokens the model never saw (a "
        "corrupt shard)",
        "spike-recoverable at step 1200 caused by that batch (long-tail tokens): loss 1.34 -> "
        "17.1 for one step, pre-clip grad norm 0.63 (trailing mean) -> 14.1 (22.5x) at the same "
        "step, back to 1.21 at step 1201",
        {"verdict": "spike-recoverable", "cause": "long-tail-token", "findings": {"spike": [1200]}},
    ),
    Spec(
        "lr-jump-x10",
        ("--lr-jump-at", "1200", "--lr-jump-factor", "10"),
        "scheduler bug: from step 1200 on the LR is 10x the schedule (1.3e-3 -> 1.3e-2)",
        "spike-persistent caused by the LR jump: the loss level steps up at once, 25-step "
        "medians 1.30 -> 1.70, 1.65, 1.66, 1.59 (baseline mu 1.34, sigma 0.15; 82% of points in "
        "1200-1400 above mu + 0.5 sigma against 24% before) and only comes back as the cosine "
        "decays the LR, 200-300 steps later",
        {
            "verdict": "spike-persistent",
            "cause": "lr-discontinuity",
            "findings": {"spike": [1200], "lr-jump": [1200]},
            "step_tolerance": 10,
        },
    ),
    Spec(
        "lr-jump-x30",
        ("--lr-jump-at", "1200", "--lr-jump-factor", "30"),
        "scheduler bug: from step 1200 on the LR is 30x the schedule (1.3e-3 -> 4.0e-2)",
        "spike-persistent caused by the LR jump: 25-step medians 1.30 -> 2.68, 2.45, 2.11 right "
        "after 1200, still 1.52 at step 1500",
        {
            "verdict": "spike-persistent",
            "cause": "lr-discontinuity",
            "findings": {"spike": [1200], "lr-jump": [1200]},
            "step_tolerance": 5,
        },
    ),
    Spec(
        "high-lr-no-clip",
        ("--lr", "0.3", "--no-clip"),
        "peak LR 0.3 (100x the healthy 3e-3) and no gradient clipping",
        "divergence from inside the warmup: the loss reaches its minimum 2.81 at step 36 (LR "
        "0.108, still ramping), rises to ~3.8 by step 200 and never comes back (no point below "
        "3.53 after step 200; 3.65 at the end); the parameter norm grows 89 -> 381. Root cause: "
        "peak LR far too high (no cause code names it; the weight-norm growth is its symptom, "
        "weight decay is the default 0.1)",
        {"verdict": "divergence", "findings": {"divergence": [36]}, "step_tolerance": 60},
    ),
    Spec(
        "resume-keep-optimizer",
        ("--resume-at", "1250", "--from-checkpoint", "1100"),
        "crash after step 1250, resume from the step-1100 checkpoint with full optimizer state "
        "(same log)",
        "healthy, one restart (1250 -> 1101); the replay is bit-identical to the abandoned steps",
        {
            "verdict": "healthy",
            "restarts": [{"resumed_from_step": 1101, "last_step_before": 1250}],
            "findings": {"restart": [1101]},
        },
    ),
    Spec(
        "resume-drop-optimizer",
        ("--resume-at", "1250", "--from-checkpoint", "1100", "--drop-optimizer-state"),
        "crash after step 1250, resume from the step-1100 checkpoint with a FRESH AdamW (moments "
        "lost)",
        "healthy, one restart (1250 -> 1101): at this LR (1.5e-3) the reset is benign, the "
        "replay stays within 0.031 nats of the abandoned trajectory (which had the full "
        "optimizer state). The loss of 1.83 at step 1105 is that batch's own loss: the abandoned "
        "trajectory had 1.81 at the same step",
        {
            "verdict": "healthy",
            "restarts": [{"resumed_from_step": 1101, "last_step_before": 1250}],
            "findings": {"restart": [1101]},
        },
    ),
    Spec(
        "weight-decay-jump",
        ("--weight-decay-from", "1200", "--weight-decay-late", "10"),
        "config bug: weight decay 0.1 -> 10 from step 1200 on",
        "divergence from step 1200 caused by the weight decay: the parameter norm collapses 73 "
        "-> 28 by step 1400 (below half its value 200 steps earlier from step 1273), the loss "
        "rises from 1.34 (mean of 1100-1199; 25-step medians 1.30 just before, then 1.43, 1.55, "
        "1.64) to 1.85 (mean of the last 200 steps) and never returns (no point below 1.41 after "
        "step 1300); grad norm 0.63 -> 69 as the weights shrink",
        {
            "verdict": "divergence",
            "cause": "weight-norm",
            "findings": {"divergence": [1200], "weight-norm-change": [1273]},
            "step_tolerance": 50,
        },
    ),
    Spec(
        "nan-adam-eps0",
        ("--adam-eps", "0", "--bad-batch-at", "1200", "--act-norms"),
        "AdamW eps = 0: the 4 reserved tokens' embedding rows get an exactly-zero gradient, so "
        "their update is 0/0 = NaN from step 1; nothing reads those rows until a batch of them "
        "arrives at step 1200",
        "nan at step 1200, first non-finite layer embed (its input, the token ids, is finite); "
        "the weights were NaN long before (param_norm NaN from step 1), so this is not log(0) in "
        "the loss: an optimizer that wrote NaN into the weights",
        {"verdict": "nan", "cause": None, "origin": "embed", "findings": {"nan": [1200]}},
    ),
    Spec(
        "nan-fp16-high-lr",
        ("--dtype", "fp16", "--lr", "0.3", "--no-clip", "--act-norms"),
        "fp16 (dynamic scaler) with peak LR 0.3 and no clipping",
        "nan from an fp16 activation overflow: the loss diverges first (25-step medians 3.15 -> "
        "3.86 from step ~40), activations grow (blocks.0.mlp RMS ~9,500), gradients overflow "
        "from step 204, the loss itself goes non-finite at step 285 with blocks.1.mlp the first "
        "non-finite layer (its input blocks.1.attn finite), and the scaler halves on every step "
        "down to its floor (below 1 from step 301): loss-scale collapse. The watchdog stops the "
        "run after 50 non-finite losses (step 334)",
        {
            "verdict": "nan",
            "cause": "activation-overflow",
            "origin": "blocks.1.mlp",
            "findings": {"nan": [285], "loss-scale-collapsed": [301]},
        },
    ),
    Spec(
        "fp16-static-scale",
        (
            "--dtype",
            "fp16",
            "--loss-scale-mode",
            "static",
            "--loss-scale-init",
            "2097152",
            "--steps",
            "1000",
        ),
        "fp16 with a STATIC loss scale of 2^21 (dynamic scaling off)",
        "loss-scale-static: the scaled gradients overflow on 999 of 1000 steps (only step 129 "
        "goes through) and each is skipped under the constant scale, so the model never trains "
        "(loss 4.05 -> 4.02)",
        {"verdict": "loss-scale-static", "findings": {"loss-scale-static": [1]}},
    ),
    Spec(
        "repeat-batch",
        ("--repeat-batch-at", "1200", "--repeat-batch-len", "30"),
        "data-loader bug: steps 1200-1229 are all served batch 1199 again",
        "no instability (verdict healthy), but a data-loader bug to name: batch id 1199 repeats "
        "30 times; on it the loss falls smoothly 1.34 -> 0.66 (memorised), then fresh data at "
        "1230 comes back at 1.58-1.63 for a few steps, below the spike threshold",
        {"verdict": "healthy", "findings": {"duplicate-batch": [1200]}},
    ),
)


def run_one(spec: Spec, python: str) -> str:
    folder = OUT / spec.name
    with tempfile.TemporaryDirectory(prefix=f"torchrun-{spec.name}-") as tmp:
        log = Path(tmp) / "run.jsonl"
        cmd = [python, str(ROOT / SCRIPT), "--out", str(log), *spec.flags]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{spec.name}: {done.stderr[-2000:]}")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        with log.open("rb") as src, gzip.GzipFile(folder / "run.jsonl.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        manifest = json.loads((Path(tmp) / "manifest.json").read_text())
    manifest["command"] = command_line(spec)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    expected = {**spec.expected, "injected": spec.injected, "truth": spec.truth}
    (folder / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return f"{spec.name}: {(folder / 'run.jsonl.gz').stat().st_size:,} bytes; {done.stderr.strip()}"


def command_line(spec: Spec) -> str:
    return f"python {SCRIPT} --out run.jsonl " + " ".join(spec.flags)


def write_readme(torch_version: str) -> None:
    lines = [
        "# Logs of real training runs",
        "",
        "Each folder holds the log of one run of `scripts/realtrain/train_tiny_lm.py`: a "
        "2-layer, d_model 64",
        "decoder-only transformer (~110k parameters) trained on CPU with AdamW, linear warmup + "
        "cosine LR and",
        "`clip_grad_norm_`, on a synthetic language generated in the script (Markov text and "
        "copy tasks).",
        "Pathologies come from changing the TRAINING (flags below), never from editing the log. "
        "Every line",
        "was written by `json.dumps` (NaN / Infinity as bare tokens); `grad_norm` is the "
        "pre-clip norm.",
        "",
        f"torch {torch_version} (CPU wheel), 1 thread; default seed 0 (`--seed`); the language "
        "itself has a",
        "fixed seed. Regenerate all of them with",
        "`/tmp/torchvenv/bin/python scripts/realtrain/make_torch_fixtures.py` (about 15 minutes "
        "on one core).",
        "",
        "`expected.json` states the TRUE diagnosis (`verdict`, `cause`, `findings`, "
        "`step_tolerance`, `origin`,",
        "`restarts`, as in `fixtures/runs/`), plus `injected` and `truth` in words. `cause: "
        "null` means no",
        "cause code fits (stab should name none). `tests/integration/test_torch_runs.py` holds "
        "stab to them; where stab",
        "is wrong today the test is a strict xfail with the reason.",
        "",
        "| run | command (from the repository root) | injected | true diagnosis |",
        "|---|---|---|---|",
    ]
    for spec in RUNS:
        lines.append(f"| `{spec.name}` | `{command_line(spec)}` | {spec.injected} | {spec.truth} |")
    (OUT / "README.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="run names (default: all)")
    parser.add_argument(
        "--readme-only", action="store_true", help="rewrite README.md and expected.json only"
    )
    args = parser.parse_args()
    import torch  # the Python running this must be the one with torch

    OUT.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in RUNS if not args.only or s.name in args.only]
    if args.readme_only:
        for spec in chosen:
            expected = {**spec.expected, "injected": spec.injected, "truth": spec.truth}
            (OUT / spec.name / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for line in pool.map(lambda s: run_one(s, sys.executable), chosen):
                print(line, flush=True)
    write_readme(torch.__version__)


if __name__ == "__main__":
    main()
