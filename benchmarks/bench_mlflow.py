"""How fast stab reads one 1,000,000-point MLflow metric, against the MLflow client.

    /tmp/venv/bin/python benchmarks/bench_mlflow.py [--points 1000000] [--client-points 200000]

The run, experiment, params and tags are created by the real `MlflowClient`
(file store and sqlite store). The points themselves are written in bulk in
the exact on-disk form the client writes (`"<ms> <value> <step>\\n"` lines;
`metrics` rows with `is_nan` and the Inf clamp), because logging 1M points
through the client takes about 400 s.

Baselines, measured in this run:

* `MlflowClient.get_metric_history` on the file store. It pages 25,000 points
  at a time and re-parses the whole file for every page, so its cost grows as
  n^2 (about 300 s at 1M points). It is timed on `--client-points` points;
  its 1M time is then *extrapolated* as t x (1M / n)^2 and printed as such.
  Pass `--client-points 1000000` to measure it for real.
* The same for the sqlite store (ORM paging; closer to linear, scaled
  linearly and labelled as extrapolated when not measured at full size).
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _series import loss_curve

KEY = "train/loss"


def make_values(points: int) -> np.ndarray:
    return loss_curve(points)


def client_run(uri: str) -> tuple[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("bench")
    run = client.create_run(experiment, run_name="bench")
    client.log_param(run.info.run_id, "precision", "bf16-mixed")
    client.log_metric(run.info.run_id, KEY, 1.0, step=0)  # let the client create the metric
    return run.info.run_id, experiment


def fill_file_store(root: Path, run_id: str, experiment: str, values: np.ndarray) -> None:
    path = root / experiment / run_id / "metrics" / "train" / "loss"
    steps = np.arange(values.size)
    ts = 1_700_000_000_000 + steps
    with open(path, "w") as handle:
        # str(float) is what the client writes: nan, inf, shortest repr
        handle.writelines(
            f"{t} {float(v)!s} {s}\n" for t, v, s in zip(ts, values, steps, strict=True)
        )


def fill_sqlite(db: Path, run_id: str, values: np.ndarray) -> None:
    bound = sys.float_info.max
    rows = []
    for step, value in enumerate(values.tolist()):
        is_nan = math.isnan(value)
        stored = 0.0 if is_nan else max(-bound, min(bound, value))
        rows.append((KEY, stored, 1_700_000_000_000 + step, run_id, step, int(is_nan)))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM metrics WHERE run_uuid = ?", (run_id,))
        conn.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument(
        "--client-points",
        type=int,
        default=200_000,
        help="points for the MLflow client baselines (their cost is ~n^2 / n)",
    )
    args = parser.parse_args()
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    from mlflow.tracking import MlflowClient

    from stabilitycli import ingest
    from stabilitycli.ingest.options import ReadOptions

    work = Path(tempfile.mkdtemp(prefix="stab-bench-mlflow-"))
    os.chdir(work)  # the sqlite store drops artifact folders in the working directory
    print(
        f"work dir {work}; {args.points:,} points of {KEY!r}; client baselines at "
        f"{args.client_points:,}"
    )
    results = []
    for store in ("file", "sqlite"):
        uri = (
            f"file://{work / store / 'mlruns'}"
            if store == "file"
            else f"sqlite:///{work / 'mlflow.db'}"
        )
        target = work / store / "mlruns" if store == "file" else work / "mlflow.db"
        run_id, experiment = client_run(uri)
        client = MlflowClient(tracking_uri=uri)
        row = {"store": store}
        for label, n in (("full", args.points), ("small", args.client_points)):
            values = make_values(n)
            if store == "file":
                fill_file_store(target, run_id, experiment, values)
            else:
                fill_sqlite(target, run_id, values)
            seconds, run = timed(ingest.read, target, ReadOptions(run=run_id))
            assert run.frame.height == n, run.frame.height
            assert (
                math.isnan(run.frame["loss"][n // 2]) and run.frame["loss"][n // 2 + 1] == math.inf
            )
            row[f"stab_{label}"] = seconds
            if label == "small":
                seconds, history = timed(client.get_metric_history, run_id, KEY)
                assert len(history) == n
                row["client_small"] = seconds
        results.append(row)

    scale = args.points / args.client_points
    for row in results:
        power = 2 if row["store"] == "file" else 1
        measured = args.client_points == args.points
        client_full = row["client_small"] * scale**power
        tag = (
            "measured"
            if measured
            else f"extrapolated x{scale:g}^{power} from {args.client_points:,} points"
        )
        print(f"\nMLflow {row['store']} store")
        print(f"  stab reader, {args.points:>9,} points: {row['stab_full']:8.2f} s")
        if measured:
            print(
                f"  MlflowClient.get_metric_history, {args.points:,} points: "
                f"{row['client_small']:8.2f} s (measured); ratio "
                f"{row['client_small'] / row['stab_small']:.0f}x (against stab's second read of "
                f"the same size, {row['stab_small']:.2f} s)"
            )
            continue
        print(f"  stab reader, {args.client_points:>9,} points: {row['stab_small']:8.2f} s")
        print(
            f"  MlflowClient.get_metric_history, {args.client_points:,} points: "
            f"{row['client_small']:8.2f} s (ratio {row['client_small'] / row['stab_small']:.0f}x, "
            "measured)"
        )
        print(
            f"  MlflowClient.get_metric_history, {args.points:,} points: {client_full:8.1f} s "
            f"({tag}); ratio {client_full / row['stab_full']:.0f}x"
        )


if __name__ == "__main__":
    main()
