"""Real training processes watched from outside, logging through real writers: a tensorboardX
SummaryWriter, and the MLflow client to a sqlite store and (slow) to a tracking server on
127.0.0.1. `stab watch --stop-pid` stops each job once its loss spike is decided persistent,
within the latency docs/watch.md states (counted in logged steps, not wall-clock); an MLflow
run's FINISHED status then ends the watch with `stab analyze`'s status on the final run.
The latency is test_real_job's (LATENCY_STEPS): these writers log fewer steps a second than
the JSONL trainer (tensorboardX flushing each step; the MLflow client slower), so a poll
spans fewer steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.watch.test_real_job import SPIKE_AT, watch_job, with_sgd_step

# the JSONL trainer of test_real_job, logging through a writer chosen by argv[1]; on SIGTERM
# it stops after the step in hand and closes its run cleanly (an MLflow run ends FINISHED)
TRAINER = with_sgd_step(r"""
import json, signal, sys, time
import numpy as np

backend, target, steps, spike_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
if backend == "tensorboard":
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(target)

    def log(step, values):
        for name, value in values.items():
            writer.add_scalar(f"train/{name}", value, step)
        writer.flush()  # what a reader sees is what is flushed: once a step

    end = writer.close
else:
    import mlflow

    mlflow.set_tracking_uri(target)
    run = mlflow.start_run(run_name="job")

    def log(step, values):
        mlflow.log_metrics({f"train/{k}": v for k, v in values.items()}, step=step)

    def end():
        mlflow.end_run("FINISHED")

print(json.dumps({"ready": True}), flush=True)
rng = np.random.default_rng(0)
w_true = rng.normal(size=16)
w = np.zeros(16)
last = None
for step in range(steps):
    if stopped:
        break
    SGD_STEP
    log(step, {"loss": loss, "lr": 0.002})
    last = step
    time.sleep(0.01)
end()
print(json.dumps({"stopped_after_step": last if stopped else None}), flush=True)
""")


def _job(tmp_path: Path, backend: str, target: str) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    job = subprocess.Popen(
        [sys.executable, str(script), backend, target, "5000", str(SPIKE_AT)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert job.stdout is not None
    ready = job.stdout.readline()  # the writer is set up (an MLflow store created)
    assert json.loads(ready) == {"ready": True}, ready
    return job


def _analyze(target: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "stabilitycli", "analyze", target, "--format", "json"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip


def test_tensorboard_job_stopped_after_a_persistent_spike(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX", reason="the job writes through tensorboardX")
    folder = tmp_path / "runs" / "job"
    job = _job(tmp_path, "tensorboard", str(folder))
    while not any(folder.glob("events.out.tfevents.*")):
        time.sleep(0.05)
    # TensorBoard says nothing of a run's end: the writer going quiet for --idle ends it
    code, out, _ = watch_job(tmp_path, job, str(folder), "--idle", "3")
    assert code == 1  # analyze's status on the final log: an error was found
    assert json.loads(out)["verdict"]["code"] == "spike-persistent"
    assert out == _analyze(str(folder)).stdout


def _mlflow_job(tmp_path: Path, target: str) -> None:
    """The job's run, ended FINISHED when it stops, ends the watch: analyze's document and
    status on the final run, and no --idle needed."""
    job = _job(tmp_path, "mlflow", target)
    code, out, err = watch_job(tmp_path, job, target, "--idle", "0")
    assert "is FINISHED" in err, err
    analyze = _analyze(target)
    assert code == analyze.returncode == 1
    assert json.loads(out)["verdict"]["code"] == "spike-persistent"
    assert out == analyze.stdout


def test_mlflow_sqlite_job_stopped_and_its_finished_run_ends_the_watch(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the job logs through the MLflow client")
    from tests._mlflow_store import new_sqlite_store

    _mlflow_job(tmp_path, new_sqlite_store(tmp_path / "mlflow.db"))


@pytest.mark.slow  # a real server: ~20 s to start
def test_mlflow_server_job_stopped_and_its_finished_run_ends_the_watch(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the job logs through the MLflow client")
    pytest.importorskip("sqlalchemy", reason="mlflow server needs sqlalchemy for its store")
    from tests.ingest import _mlflow_server_proc

    with _mlflow_server_proc.mlflow_server(tmp_path) as url:
        _mlflow_job(tmp_path, url)
