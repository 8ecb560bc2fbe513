"""What one poll of each `stab watch` follower costs on a long run (issue #38).

    .venv/bin/python benchmarks/bench_watch_sources.py [--points 100000] [--new 100] [--server]

For each follower a run of `--points` metric points is written by the real writer
(TensorBoard's framing, the MLflow client on a file store and on sqlite, and on a local
`mlflow server` with `--server`; W&B's framing as the client writes it), the
follower catches up once, then `--new` points are logged and one poll takes them,
five times over. Printed per follower: the median seconds of a poll with the new
points, of a poll with nothing new, and of a `snapshot` (the whole run as a frame,
which a poll does not build).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _series import tfrecord  # noqa: E402

from stabilitycli.ingest.options import ReadOptions  # noqa: E402
from stabilitycli.watch.sources import (  # noqa: E402
    mlflow_db,
    mlflow_file,
    mlflow_server,
    tensorboard,
    wandb_offline,
)

REPEATS = 5


def _value(step: int) -> float:
    return 2.0 + math.sin(step / 9.0) / 4.0


class TensorBoardRun:
    """Events framed as tensorboardX frames `add_scalar` (as `bench_tensorboard.write_own`
    does), appended at once: tensorboardX's writer thread would trickle them in."""

    def __init__(self, folder: Path) -> None:
        from stabilitycli.ingest.tensorboard import _proto as tbp

        folder.mkdir()
        self.target, self.event = str(folder), tbp.messages()["Event"]
        self.file = folder / "events.out.tfevents.1700000000.bench"
        version = self.event(wall_time=1.7e9, file_version="brain.Event:2")
        self.file.write_bytes(tfrecord(version.SerializeToString()))

    def log(self, steps: range) -> None:
        records = []
        for step in steps:
            event = self.event(wall_time=1.7e9 + step, step=step)
            event.summary.value.add(tag="train/loss", simple_value=_value(step))
            records.append(tfrecord(event.SerializeToString()))
        with open(self.file, "ab") as handle:
            handle.write(b"".join(records))


class MlflowRun:
    def __init__(self, uri: str, target: str) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.create_experiment("bench")
        self.run_id = self.client.create_run(experiment).info.run_id
        self.target = target

    def log(self, steps: range) -> None:
        from mlflow.entities import Metric

        metrics = [Metric("train/loss", _value(s), 1_700_000_000_000 + s, s) for s in steps]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])


class WandbRun:
    def __init__(self, folder: Path) -> None:
        run = folder / "offline-run-20260101_000000-bench123"
        run.mkdir()
        self.file, self.target, self.data = run / "run-bench123.wandb", str(run), b""

    def log(self, steps: range) -> None:
        from tests.ingest.test_hostile_wandb import _frame_log, _history_record

        before = self.data or b":W&B\xe1\xbe\x00"
        self.data = _frame_log([_history_record(s, _value(s)) for s in steps], before=before)
        with open(self.file, "ab") as handle:
            handle.write(self.data[self.file.stat().st_size if self.file.exists() else 0 :])


def measure(name: str, run, module, options: ReadOptions, points: int, new: int) -> None:
    started = time.perf_counter()
    run.log(range(points))
    written = time.perf_counter() - started
    follower = module.follow(run.target, options)
    started = time.perf_counter()
    first = follower.poll()
    catch_up = time.perf_counter() - started
    with_new, idle, snap = [], [], []
    step = points
    for _ in range(REPEATS):
        run.log(range(step, step + new))
        step += new
        started = time.perf_counter()
        poll = follower.poll()
        with_new.append(time.perf_counter() - started)
        assert poll.records_read == new, (name, poll)
        started = time.perf_counter()
        follower.poll()
        idle.append(time.perf_counter() - started)
        started = time.perf_counter()
        follower.snapshot()
        snap.append(time.perf_counter() - started)
    print(
        f"{name:15s} {first.records_read:>8,d} points read at first in {catch_up:6.2f} s "
        f"(written in {written:5.1f} s); a poll with {new} new points: "
        f"{statistics.median(with_new):.4f} s, with none: {statistics.median(idle):.4f} s; "
        f"snapshot {statistics.median(snap):.3f} s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=100)
    parser.add_argument("--server", action="store_true", help="also a local mlflow server")
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        cases = [
            ("tensorboard", lambda: TensorBoardRun(tmp / "tb"), tensorboard),
            ("wandb_offline", lambda: WandbRun(tmp), wandb_offline),
            (
                "mlflow_file",
                lambda: MlflowRun((tmp / "mlruns").as_uri(), str(tmp / "mlruns")),
                mlflow_file,
            ),
            (
                "mlflow_db",
                lambda: MlflowRun(f"sqlite:///{tmp / 'm.db'}", f"sqlite:///{tmp / 'm.db'}"),
                mlflow_db,
            ),
        ]
        for name, make, module in cases:
            run = make()
            options = ReadOptions(run=getattr(run, "run_id", None))
            measure(name, run, module, options, args.points, args.new)
        if args.server:
            from tests.ingest._mlflow_server_proc import mlflow_server as start_server

            (tmp / "srv").mkdir()
            with start_server(tmp / "srv") as url:
                run = MlflowRun(url, url)
                options = ReadOptions(run=run.run_id)
                measure("mlflow_server", run, mlflow_server, options, args.points, args.new)


if __name__ == "__main__":
    main()
