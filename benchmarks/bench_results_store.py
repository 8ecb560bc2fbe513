"""How much a results store saves on a nightly sweep where nothing changed.

    python benchmarks/bench_results_store.py [--runs 2000] [--jobs 2] [--repeats 2]
        [--dir /tmp/stab-bench-store]

Writes `--runs` small runs (500-step synthetic JSONL logs with seeded noise, healthy or
with a loss jump, and every tenth a copy of a committed fixture run, so every verdict
shows), then times the real `stab` CLI, each in a fresh process as CI would run it:

1. a sweep without a store (the baseline: what every night costs today),
2. the first sweep with `--results` (the baseline plus writing every document),
3. the rerun over the unchanged runs with the same `--results` (every run reused).

It checks that the rerun printed the same JSON Lines and exited with the same status
as the first sweep, and prints the rerun's time as a fraction of the first sweep's
(issue #13's target: at most 5%). Each time is the best of `--repeats` (a first sweep
starts each time from no store); the load average before and after is printed beside
them: on a machine shared with other jobs, the times are partly the neighbours'.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 500


def make_runs(target: Path, count: int) -> None:
    import numpy as np
    import polars as pl

    fixtures = sorted((ROOT / "fixtures" / "runs").glob("*/run.jsonl"))
    steps = np.arange(STEPS)
    for i in range(count):
        path = target / f"{i // 100:02d}" / f"run-{i:05d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        if i % 10 == 0:
            # a real log, so the sweep meets every verdict and not only the synthetic two
            shutil.copy(fixtures[(i // 10) % len(fixtures)], path)
            continue
        rng = np.random.default_rng(i)
        loss = 2.2 + 8.6 * (1 + steps / 40.0) ** -0.75 + 0.03 * rng.standard_normal(STEPS)
        if i % 7 == 0:
            loss[STEPS * 3 // 5 :] += 1.5  # a jump that does not come back
        pl.DataFrame(
            {
                "step": steps,
                "loss": loss.round(5),
                "grad_norm": (0.4 * rng.lognormal(0, 0.15, STEPS)).round(5),
                "lr": np.full(STEPS, 3e-4),
            }
        ).write_ndjson(path)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sweep(root: Path, jobs: int, store: Path | None) -> tuple[float, float, int, list[str]]:
    """Wall seconds, CPU seconds, exit status and sorted JSON Lines of one `stab analyze`
    process. The CPU is the process's and its waited-for children's: whole for a rerun
    that starts no worker, a lower bound for a sweep whose workers a forkserver forked."""
    args = [sys.executable, "-m", "stabilitycli", "analyze", "--recursive", str(root)]
    args += ["--jobs", str(jobs), "--format", "json", "--quiet"]
    if store is not None:
        args += ["--results", str(store)]
    cpu_before, start = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds, cpu_s = time.perf_counter() - start, _children_cpu_s() - cpu_before
    if done.returncode not in (0, 1, 2) or not done.stdout:
        raise SystemExit(f"stab failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, cpu_s, done.returncode, sorted(done.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/stab-bench-store"))
    args = parser.parse_args()

    shutil.rmtree(args.dir, ignore_errors=True)
    root, store = args.dir / "runs", args.dir / "results.db"
    root.mkdir(parents=True)
    make_runs(root, args.runs)

    load_before = os.getloadavg()[0]
    plain = [sweep(root, args.jobs, None) for _ in range(args.repeats)]
    firsts, reruns = [], []
    for _ in range(args.repeats):
        store.unlink(missing_ok=True)
        firsts.append(sweep(root, args.jobs, store))
        reruns.append(sweep(root, args.jobs, store))
    plain_s, first_s, rerun_s = (min(t for t, _, _, _ in ts) for ts in (plain, firsts, reruns))
    rerun_cpu_s = min(cpu for _, cpu, _, _ in reruns)
    _, _, status, lines = plain[0]
    for _, _, other_status, other_lines in firsts + reruns:
        assert other_lines == lines, "a sweep with the store printed other documents"
        assert other_status == status, "a sweep with the store exited otherwise"

    load = f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"{args.runs:,} runs of {STEPS} steps, --jobs {args.jobs}, best of {args.repeats}")
    print(f"  load average (1 min)     {load}")
    print(f"  sweep without a store    {plain_s:7.2f} s")
    print(f"  first sweep, --results   {first_s:7.2f} s  (store {store.stat().st_size >> 20} MB)")
    print(f"  rerun, nothing changed   {rerun_s:7.2f} s  ({rerun_cpu_s:.2f} s of CPU)")
    print(f"  rerun / first sweep      {rerun_s / first_s:7.1%}  (target <= 5%)")


if __name__ == "__main__":
    main()
