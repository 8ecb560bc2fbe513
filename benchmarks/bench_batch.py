"""How much `stab analyze` gains from worker processes on many small runs.

    python benchmarks/bench_batch.py [--runs 200] [--jobs 2]

Copies the committed fixture runs (`fixtures/runs/*`, 1,500-2,000 steps each,
every verdict) round-robin into a temporary directory until there are
`--runs` of them, then analyses them all with 1 worker (in-process) and with
`--jobs` worker processes, through `stabilitycli.pipeline.batch` (what
`stab analyze --recursive DIR` runs), and prints both times and the speed-up.
With `--rows N` the runs are synthetic logs of N steps each instead (large
runs, where the ~0.5 s it takes to start the workers and import polars in
them is amortised). Each timing is the best of `--repeats`; the load average is printed beside
them: on a machine shared with other jobs, a speed-up below the core count is
often the neighbours' doing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_runs(target: Path, count: int) -> list[str]:
    sources = sorted(p for p in (ROOT / "fixtures" / "runs").iterdir() if p.is_dir())
    for i in range(count):
        src = sources[i % len(sources)]
        dst = target / f"{i:03d}-{src.name}"
        dst.mkdir()
        for item in src.iterdir():
            if item.name.startswith(("run.", "manifest")):
                shutil.copy(item, dst / item.name)
    from stabilitycli.pipeline.batch import discover

    return discover([str(target)], recursive=True)


def make_large_runs(target: Path, count: int, rows: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        t = np.arange(rows, dtype=float)
        loss = 2.2 + 8.6 * (1 + t / 40.0) ** -0.75 + 0.04 * (rng.standard_gamma(2.0, rows) - 2.0)
        grad = 0.4 * rng.lognormal(0, 0.15, rows)
        path = target / f"run-{i:03d}.jsonl"
        with open(path, "w") as handle:
            handle.writelines(
                json.dumps({"step": k, "loss": round(loss[k], 5), "grad_norm": round(grad[k], 5)})
                + "\n"
                for k in range(rows)
            )
        paths.append(str(path))
    return paths


def timed(paths: list[str], jobs: int, repeats: int) -> tuple[float, int]:
    """Best wall time of `repeats` (the least disturbed by other jobs on the machine)."""
    from stabilitycli.pipeline.batch import BatchSettings, analyze_many

    best, ok = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        results = analyze_many(paths, BatchSettings(), jobs=jobs)
        best = min(best, time.perf_counter() - start)
        ok = sum(r.ok for r in results)
    return best, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--rows", type=int, default=0, help="synthetic runs of this many steps instead of fixtures"
    )
    parser.add_argument("--repeats", type=int, default=3, help="best of this many timings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.rows:
            paths = make_large_runs(Path(tmp), args.runs, args.rows)
        else:
            paths = make_runs(Path(tmp), args.runs)
        rows = sum(Path(p).read_bytes().count(b"\n") for p in paths if p.endswith(".jsonl"))
        print(
            f"{len(paths)} runs ({rows:,} JSONL rows in total), {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        from stabilitycli.pipeline.batch import BatchSettings, analyze_many

        analyze_many(paths[:2], BatchSettings(), jobs=1)  # imports and file cache, not timed
        one, ok1 = timed(paths, 1, args.repeats)
        print(
            f"1 worker (in-process):  {one:6.2f} s  {one / len(paths) * 1000:7.1f} ms/run  "
            f"({ok1} analysed)"
        )
        many, ok2 = timed(paths, args.jobs, args.repeats)
        print(
            f"{args.jobs} workers (processes): {many:6.2f} s  {many / len(paths) * 1000:7.1f} "
            f"ms/run  ({ok2} analysed; includes starting the workers)"
        )
        print(f"speed-up: {one / many:.2f}x (load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
