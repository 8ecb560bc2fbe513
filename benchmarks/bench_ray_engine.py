"""Throughput of the Ray engine against the local process pool and one worker, on many small runs.

    python benchmarks/bench_ray_engine.py [--runs 2000] [--jobs 2] [--cpus 2]

Makes `--runs` small runs as `bench_batch.py` does (the committed fixture runs,
1,500-2,000 steps each, every verdict, copied round-robin into a temporary folder
under /tmp), then analyses all of them three ways and prints runs/s for each and
their ratios, measured in this one process so the machine's load is the same:

- the Ray engine (`stabilitycli.pipeline.ray_engine`) on a fresh local instance
  with `--cpus` CPUs; the sweep is timed on its own and with starting Ray;
- the local engine (`batch.analyze_many`) with `--jobs` worker processes;
- the local engine with one worker (in-process).

It lowers its own priority (nice 10): the machine is shared.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from bench_batch import make_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    args = parser.parse_args()
    os.nice(10)
    import ray

    from stabilitycli.pipeline import batch, ray_engine

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        paths = make_runs(Path(tmp), args.runs)
        print(f"{len(paths)} runs, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        batch.analyze_many(paths[:2], batch.BatchSettings(), jobs=1)  # file cache, imports

        start = time.perf_counter()
        ray.init(
            num_cpus=args.cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
        started_s = time.perf_counter() - start
        sweep_start = time.perf_counter()
        by_ray = ray_engine.analyze_many(paths, batch.BatchSettings())
        ray_s = time.perf_counter() - sweep_start
        ray.shutdown()
        report("ray engine", by_ray, ray_s, f"+ {started_s:.1f} s to start Ray")

        start = time.perf_counter()
        pooled = batch.analyze_many(paths, batch.BatchSettings(), jobs=args.jobs)
        pool_s = time.perf_counter() - start
        report(f"local pool -j {args.jobs}", pooled, pool_s, "starting the workers included")

        start = time.perf_counter()
        alone = batch.analyze_many(paths, batch.BatchSettings(), jobs=1)
        one_s = time.perf_counter() - start
        report("one worker -j 1", alone, one_s, "in-process")

        print(
            f"ratios (runs/s): ray / pool = {pool_s / ray_s:.2f}, ray / one = {one_s / ray_s:.2f}, "
            f"pool / one = {one_s / pool_s:.2f}; ray with its start / pool = "
            f"{pool_s / (ray_s + started_s):.2f} (load now {os.getloadavg()[0]:.2f})"
        )


def report(name: str, results: list, elapsed_s: float, note: str) -> None:
    analysed = sum(r.ok for r in results)
    print(
        f"{name:<18} {elapsed_s:7.1f} s  {len(results) / elapsed_s:6.1f} runs/s  "
        f"({analysed} analysed; {note})"
    )


if __name__ == "__main__":
    main()
