"""What one judgment of `stab watch` costs as the run grows, and the alert delay it implies.

    python benchmarks/bench_watch_judge.py [--steps 1000,10000,100000] [--ranks 1,64]

A judgment is the follower's snapshot and `stab analyze`'s rules over it, the whole run so
far. For each run length (logged steps, one JSON line a step and rank, as bench_watch.py's
writer logs them) the log is followed to its end and judged 3 times, by a fresh follower
each time so that the snapshot is built as after a poll; the least CPU time is reported.
Under the CPU throttle (`--cpu-share`, default 0.04) the watch judges at most once every
judgment / share seconds, and never more often than a poll (2 s): that spacing is what an
alert can wait beyond the poll that brings its decisive point.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stabilitycli.core.config import Thresholds  # noqa: E402
from stabilitycli.ingest.options import ReadOptions  # noqa: E402
from stabilitycli.pipeline import run as pipeline  # noqa: E402
from stabilitycli.watch.session import open_follower  # noqa: E402


def write_run(folder: Path, steps: int, ranks: int) -> Path:
    rng = np.random.default_rng(0)
    step = np.arange(steps)
    level = 2.0 + 1.5 * np.exp(-step / max(steps / 10, 1))
    target = folder / "metrics.jsonl" if ranks == 1 else folder / "ranks"
    if ranks > 1:
        target.mkdir()
    for rank in range(ranks):
        loss = level + rng.normal(0, 0.01, steps)
        path = target if ranks == 1 else target / f"rank_{rank:02d}.jsonl"
        with open(path, "w") as sink:
            for s, value in zip(step.tolist(), loss.tolist(), strict=True):
                row = {"step": s, "loss": value, "lr": 3e-4}
                sink.write(json.dumps(row if ranks == 1 else {**row, "rank": rank}) + "\n")
    return target


def judge_cpu(target: Path) -> float:
    """The least of 3: a fresh follower each, so the snapshot is built as after a poll."""
    best = float("inf")
    for _ in range(3):
        follower, _ = open_follower(str(target), ReadOptions())
        try:
            follower.poll()
            began = time.process_time()
            pipeline.analyze(follower.snapshot(), Thresholds())
            best = min(best, time.process_time() - began)
        finally:
            follower.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,10000,100000")
    parser.add_argument("--ranks", default="1,64")
    parser.add_argument("--cpu-share", type=float, default=0.04)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    print("| ranks | logged steps | points | judgment CPU s | judged at most every (s) |")
    print("|---|---|---|---|---|")
    for ranks in map(int, args.ranks.split(",")):
        for steps in map(int, args.steps.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                cpu = judge_cpu(write_run(Path(tmp), steps, ranks))
            spacing = max(args.interval, cpu / args.cpu_share)
            print(f"| {ranks} | {steps:,} | {steps * ranks:,} | {cpu:.3f} | {spacing:.1f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
