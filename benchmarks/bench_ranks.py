"""Time `find_rank_outliers` on large in-memory per-rank frames, and its peak memory.

    /tmp/venv/bin/python benchmarks/bench_ranks.py [--steps 20000] [--ranks 256 512 1024]

Each size runs in its own process, so that the peak resident memory
(`resource.getrusage(...).ru_maxrss`) belongs to that size alone. It is
reported twice: after the frame is built (the input's own footprint) and after
detection. The frame is the canonical long shape (step Int64, rank Int64,
loss Float64, 24 bytes a row) with Student-t mini-batch noise and one rank
stuck at 20x the loss from the middle of the run; the check is that exactly
that rank is found. Ratios between sizes show whether the cost grows linearly
with rows.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _maxrss_mib() -> float:
    # Linux reports KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def one(ranks: int, steps: int) -> dict:
    import numpy as np
    import polars as pl

    sys.path.insert(0, str(ROOT))
    from stabilitycli.core.config import Thresholds
    from stabilitycli.core.model import SourceInfo
    from stabilitycli.detect.ranks.check import find_rank_outliers
    from stabilitycli.frame import RunData

    rng = np.random.default_rng(7)
    step_axis = np.arange(steps, dtype=np.int64)
    curve = 2.0 + 8.0 * (1.0 + step_axis / 200.0) ** -0.9
    bad = ranks // 3
    loss = np.empty(ranks * steps, dtype=np.float64)
    for r in range(ranks):  # row-block by row-block, to keep the generator's own peak small
        block = curve * (1.0 + 0.02 * rng.standard_t(5, size=steps) / np.sqrt(5 / 3))
        if r == bad:
            block[steps // 2 :] = 40.0
        loss[r * steps : (r + 1) * steps] = block
    frame = pl.DataFrame(
        {
            "step": np.tile(step_axis, ranks),
            "rank": np.repeat(np.arange(ranks, dtype=np.int64), steps),
            "loss": loss,
        }
    )
    del loss
    run = RunData(frame=frame, source=SourceInfo(path="memory", format="bench"))
    built = _maxrss_mib()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    report = find_rank_outliers(run, "loss", Thresholds())
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    found = [(o.rank, o.kind, o.onset_step) for o in report.outliers]
    return {
        "ranks": ranks,
        "steps": steps,
        "rows": frame.height,
        "seconds": round(seconds, 2),
        "rows_per_s": round(frame.height / seconds),
        "maxrss_after_build_mib": round(built),
        "maxrss_peak_mib": round(_maxrss_mib()),
        "found": found,
        # CPU seconds in user code vs in the kernel (page faults on fresh memory)
        "user_s": round(after.ru_utime - before.ru_utime, 2),
        "sys_s": round(after.ru_stime - before.ru_stime, 2),
        "page_faults": after.ru_minflt - before.ru_minflt,
        "expected": [(bad, "level", steps // 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps)))
        return
    results = []
    for ranks in args.ranks:
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(ranks), "--steps", str(args.steps)],
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(result)
        ok = (
            "ok"
            if [tuple(f) for f in result["found"]] == [tuple(e) for e in result["expected"]]
            else "WRONG"
        )
        print(
            f"{ranks:>5} ranks x {args.steps} steps = {result['rows']:>11,} rows: "
            f"{result['seconds']:7.2f} s wall (user {result['user_s']:.2f} s, sys "
            f"{result['sys_s']:.2f} s, {result['page_faults']:,} page faults)  "
            f"({result['rows_per_s'] / 1e6:.1f} M rows/s)  peak RSS {result['maxrss_peak_mib']:,} "
            f"MiB (frame alone {result['maxrss_after_build_mib']:,} MiB)  found {result['found']} "
            f"[{ok}]",
            flush=True,
        )
    base = results[0]
    for r in results[1:]:
        print(
            f"{r['ranks']}/{base['ranks']}: rows x{r['rows'] / base['rows']:.1f}, wall "
            f"x{r['seconds'] / base['seconds']:.2f}, user CPU "
            f"x{r['user_s'] / base['user_s']:.2f}, peak RSS "
            f"x{r['maxrss_peak_mib'] / base['maxrss_peak_mib']:.2f}"
        )


if __name__ == "__main__":
    main()
