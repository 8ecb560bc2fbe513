"""How fast `stab analyze` is on a 1,000,000-line JSONL log.

    python benchmarks/bench_analyze.py [--lines 1000000]

Baselines measured in the same run, on the same file: polars' NDJSON reader
alone (the floor: parsing with no analysis) and a stdlib `json.loads` loop
(what a naive tool would do). Two logs: a clean one, and one with bare NaN /
Infinity tokens (which sends stab to pyarrow's reader).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np


def write_log(path: Path, lines: int, with_nan: bool) -> None:
    rng = np.random.default_rng(0)
    t = np.arange(lines, dtype=float)
    loss = 2.2 + 8.6 * (1 + t / 40.0) ** -0.75 + 0.04 * (rng.standard_gamma(2.0, lines) - 2.0)
    grad = 0.4 * rng.lognormal(0, 0.15, lines)
    lr = 3e-4 * np.minimum(1.0, (t + 1) / 2000)
    if with_nan:
        loss[lines - 1000 :] = np.nan
        grad[lines - 1000 : lines - 990] = np.inf
    with open(path, "w") as handle:
        handle.writelines(
            json.dumps(
                {
                    "step": i,
                    "train/loss": round(loss[i], 5),
                    "train/grad_norm": round(grad[i], 5),
                    "train/lr": lr[i],
                }
            )
            + "\n"
            for i in range(lines)
        )


def parse_with_stdlib(path: Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    import polars as pl

    from stabilitycli import analyze

    with tempfile.TemporaryDirectory() as tmp:
        for with_nan in (False, True):
            path = Path(tmp) / f"run{'-nan' if with_nan else ''}.jsonl"
            write_log(path, args.lines, with_nan)
            size_mb = path.stat().st_size / 1e6
            t_polars = timed(partial(pl.read_ndjson, path)) if not with_nan else float("nan")
            start = time.perf_counter()
            analysis = analyze(path)
            t_stab = time.perf_counter() - start
            t_stdlib = timed(partial(parse_with_stdlib, path))
            verdict = analysis.verdict.code
            print(
                f"{args.lines:,} lines ({size_mb:.0f} MB)"
                f"{' with NaN tokens' if with_nan else ''}: "
                f"stab analyze {t_stab:.2f} s (verdict {verdict}); "
                f"polars read_ndjson only {t_polars:.2f} s; "
                f"stdlib json.loads loop {t_stdlib:.2f} s; "
                f"ratio stab/polars-read {t_stab / t_polars:.2f}, "
                f"stab/stdlib-parse {t_stab / t_stdlib:.2f}"
            )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
