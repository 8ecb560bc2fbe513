"""The same training run, logged by each tool, reads into the same canonical values.

One synthetic run (a loss spike, then NaN, +Inf and -Inf) is written as JSONL,
as TensorBoard event files (tensorboardX and our own writer for the torch
new-style and TF2 encodings), to an MLflow file store, an MLflow sqlite store
and an MLflow tracking server, each with the real client where one is
installed. Every reader must hand back exactly the JSONL frame's `loss`,
`grad_norm` and `lr` at the same steps.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

from stabilitycli import ingest
from stabilitycli.ingest.options import ReadOptions
from tests._mlflow_store import new_sqlite_store
from tests.ingest._synthetic_run import (
    log_mlflow,
    training_run,
    write_events,
    write_jsonl,
    write_tensorboardx,
)

COLUMNS = ("step", "loss", "grad_norm", "lr")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _values(run) -> dict[str, list]:
    return {c: run.frame[c].to_list() for c in COLUMNS}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.slow  # ~20 s: writes and reads back every format, the MLflow stores included
def test_every_available_format_reads_the_jsonl_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow stores drop artifact folders in the working directory
    truth = training_run(spike_at=30, nonfinite_at=45)
    reference = _values(ingest.read(write_jsonl(truth, tmp_path / "run.jsonl")))
    assert math.isnan(reference["loss"][45]) and reference["loss"][46] == math.inf
    assert reference["grad_norm"][47] == -math.inf and reference["loss"][30] == 9.5

    targets: dict[str, tuple[str, ReadOptions]] = {}
    for encoding in ("simple", "float_val", "tf2"):
        folder = tmp_path / f"tb-{encoding}"
        write_events(folder / "events.out.tfevents.1700000000.host", truth, encoding)
        targets[f"tensorboard/{encoding}"] = (str(folder), ReadOptions())
    if _has("tensorboardX"):
        targets["tensorboard/tensorboardX"] = (
            str(write_tensorboardx(truth, tmp_path / "tbx")),
            ReadOptions(),
        )

    server = None
    if _has("mlflow"):
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        file_uri = f"file://{tmp_path / 'mlruns'}"
        log_mlflow(truth, file_uri, experiment="agree", run_name="run")
        targets["mlflow_file"] = (str(tmp_path / "mlruns"), ReadOptions(experiment="agree"))
        if _has("sqlalchemy"):
            db_uri = new_sqlite_store(tmp_path / "mlflow.db")
            log_mlflow(truth, db_uri, experiment="agree", run_name="run")
            targets["mlflow_db"] = (db_uri, ReadOptions(experiment="agree"))
            from tests.ingest._mlflow_server_proc import mlflow_server

            server_home = tmp_path / "server-home"
            server_home.mkdir()
            server = mlflow_server(server_home)  # started below, after the local formats

    def check(name: str, target: str, options: ReadOptions) -> None:
        got = _values(ingest.read(target, options))
        for column in COLUMNS:
            assert len(got[column]) == len(reference[column]), f"{name}: {column} length"
            for step, (a, b) in enumerate(zip(got[column], reference[column], strict=True)):
                assert _same(a, b), f"{name}: {column} at step {step}: {a!r} != JSONL {b!r}"

    for name, (target, options) in targets.items():
        check(name, target, options)
    checked = set(targets)
    if server is not None:
        with server as url:
            log_mlflow(truth, url, experiment="agree", run_name="run")
            check("mlflow_server", url, ReadOptions(experiment="agree"))
        checked.add("mlflow_server")
    expected_formats = {"tensorboard/simple", "tensorboard/float_val", "tensorboard/tf2"}
    if _has("mlflow") and _has("sqlalchemy"):
        expected_formats |= {"mlflow_file", "mlflow_db", "mlflow_server"}
    assert expected_formats <= checked
