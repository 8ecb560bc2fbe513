"""The MLflow file-store and sqlite followers, with the real MLflow client logging between polls."""

from __future__ import annotations

import math
import shutil
import sqlite3

import pytest

pytest.importorskip("mlflow", reason="the MLflow client writes the stores these tests follow")

from stabilitycli import ingest
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.sources import mlflow_db as db_source
from stabilitycli.watch.sources import mlflow_file as file_source
from tests._mlflow_store import new_sqlite_store
from tests.watch.sources._same import assert_same_run, refuse_reading

SPECIAL = {40: math.nan, 41: math.inf, 42: -math.inf}


def _loss(step: int) -> float:
    return SPECIAL.get(step, 2.0 + math.sin(step / 7.0) / 4.0)


# a sqlite store: MLflow's migrations (~10 s) for the first one a worker makes
# (tests/_mlflow_store.py copies that one for the rest), and the sqlite client
SQLITE_IS_SLOW = pytest.mark.slow


@pytest.fixture(params=["file", pytest.param("sqlite", marks=SQLITE_IS_SLOW)])
def store(request, tmp_path, monkeypatch):
    """(tracking URI the client logs to, target the follower and reader take, follower module)."""
    from mlflow.tracking import MlflowClient

    if request.param == "file":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        uri = (tmp_path / "mlruns").as_uri()
        target, module = str(tmp_path / "mlruns"), file_source
    else:
        uri = new_sqlite_store(tmp_path / "mlflow.db")
        target, module = uri, db_source
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("watch")
    return client, experiment, target, module


def _log(client, run_id: str, steps: range) -> None:
    from mlflow.entities import Metric

    metrics = []
    for step in steps:
        stamp = 1_700_000_000_000 + step
        metrics.append(Metric("train/loss", _loss(step), stamp, step))
        metrics.append(Metric("train/grad_norm", 1.0 + (step % 5) / 10.0, stamp, step))
    for start in range(0, len(metrics), 1000):  # the client's batch limit
        client.log_batch(run_id, metrics=metrics[start : start + 1000])


def test_live_client_then_finished(store):
    client, experiment, target, module = store
    run = client.create_run(experiment, run_name="live")
    run_id = run.info.run_id
    options = ReadOptions(run=run_id)
    client.log_metric(run_id, "train/loss", 3.0, step=0, timestamp=1_700_000_000_000)
    follower = module.follow(target, options)
    assert follower.poll().records_read == 1
    for start in range(1, 200, 50):
        _log(client, run_id, range(start, start + 50))
        if start == 101:
            client.log_param(run_id, "precision", "bf16-mixed")  # a param logged late counts
        poll = follower.poll()
        assert poll.records_read == 100 and poll.ended is None and poll.problems == []
        snapshot = follower.snapshot()
        assert_same_run(snapshot, ingest.read(target, options))
    assert snapshot.source.dtype == "bf16"
    loss = snapshot.frame["loss"].to_list()
    assert math.isnan(loss[40]) and loss[41] == math.inf and loss[42] == -math.inf
    assert snapshot.frame["grad_norm"].null_count() == 1  # step 0 logged the loss only
    client.set_terminated(run_id, "FINISHED")
    poll = follower.poll()
    assert poll.ended is not None and "FINISHED" in poll.ended and poll.records_read == 0
    assert_same_run(follower.snapshot(), ingest.read(target, options))
    follower.close()


def test_a_poll_reads_only_what_was_added(store):
    client, experiment, target, module = store
    run_id = client.create_run(experiment, run_name="long").info.run_id
    _log(client, run_id, range(2500))  # 5,000 points
    follower = module.follow(target, ReadOptions(run=run_id))
    assert follower.poll().records_read == 5000
    cost = _cost(follower)
    _log(client, run_id, range(2500, 2550))
    assert follower.poll().records_read == 100
    added = _cost(follower) - cost
    assert follower.poll().records_read == 0 and _cost(follower) - cost == added
    # the file store counts bytes (100 lines of ~30 bytes), the database rows
    assert added == 100 if module is db_source else 100 * 20 < added < 100 * 60
    assert follower.snapshot().frame.height == 2550


def _cost(follower) -> int:
    return follower.rows_fetched if hasattr(follower, "rows_fetched") else follower.bytes_read


def test_store_gone_and_back(store, tmp_path, monkeypatch):
    client, experiment, target, module = store
    run_id = client.create_run(experiment).info.run_id
    _log(client, run_id, range(30))
    options = ReadOptions(run=run_id)
    follower = module.follow(target, options)
    follower.poll()
    kept = follower.snapshot()
    moved = tmp_path / "moved"
    place = tmp_path / ("mlruns" if module is file_source else "mlflow.db")
    shutil.move(place, moved)
    first, second = follower.poll(), follower.poll()
    assert len(first.problems) == 1 and "gone" in first.problems[0] and second.problems == []
    assert_same_run(follower.snapshot(), kept)
    shutil.move(moved, place)
    _log(client, run_id, range(30, 40))
    poll = follower.poll()
    assert poll.problems == [] and poll.records_read == 20
    assert_same_run(follower.snapshot(), ingest.read(target, options))


def _file_store_run(tmp_path, monkeypatch):
    """A file-store run with 10 steps logged, and a follower that has read them."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run_id = client.create_run(client.create_experiment("w")).info.run_id
    _log(client, run_id, range(10))
    follower = file_source.follow(str(tmp_path / "mlruns"), ReadOptions())
    follower.poll()
    return client, run_id, follower


def test_a_file_store_metric_unreadable_then_readable(tmp_path, monkeypatch):
    client, run_id, follower = _file_store_run(tmp_path, monkeypatch)
    refuse_reading(monkeypatch, lambda path: path.name == "loss")
    _log(client, run_id, range(10, 20))
    poll = follower.poll()
    assert len(poll.problems) == 1 and "permission denied" in poll.problems[0]
    assert poll.records_read == 10  # the grad norm is still read
    monkeypatch.undo()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert follower.poll().records_read == 10
    assert_same_run(follower.snapshot(), ingest.read(tmp_path / "mlruns", ReadOptions()))


@SQLITE_IS_SLOW
def test_a_cut_line_waits_and_bad_rows_are_rejected_as_the_reader_does(tmp_path, monkeypatch):
    """A half-written history line is not read until its newline comes; hand-damaged sqlite
    rows are rejected by rowid with the reader's reasons."""
    client, run_id, follower = _file_store_run(tmp_path, monkeypatch)
    (history,) = (tmp_path / "mlruns").glob("*/*/metrics/train/loss")
    with open(history, "ab") as handle:
        handle.write(b"1700000000010 0.5 1")
    assert follower.poll().records_read == 0
    with open(history, "ab") as handle:
        handle.write(b"0\nnot a line\n")
    assert follower.poll().records_read == 2
    want = ingest.read(tmp_path / "mlruns", ReadOptions())
    assert want.source.rows_rejected == 1
    assert_same_run(follower.snapshot(), want)

    from mlflow.tracking import MlflowClient

    uri = new_sqlite_store(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("w")).info.run_id
    _log(client, run_id, range(10))
    follower = db_source.follow(uri, ReadOptions())
    follower.poll()
    _log(client, run_id, range(10, 12))
    with sqlite3.connect(tmp_path / "mlflow.db") as conn:  # damaged before the poll sees them
        conn.execute("UPDATE metrics SET step = 3.5 WHERE step = 10 AND key = 'train/loss'")
        conn.execute("UPDATE metrics SET value = 'x' WHERE step = 11")
    assert follower.poll().records_read == 4
    want = ingest.read(uri, ReadOptions())
    assert want.source.rows_rejected == 3
    assert_same_run(follower.snapshot(), want)
