"""MLflow sqlite store: read-only SQL, NaN from is_nan, the Inf clamp undone, run selection."""

from __future__ import annotations

import hashlib
import math
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.mlflow import database as mlflow_db
from stabilitycli.ingest.options import ReadOptions
from tests._mlflow_store import new_sqlite_store
from tests.ingest._synthetic_run import assert_same_values, log_mlflow, training_run

DB = Path(__file__).resolve().parents[2] / "fixtures" / "mlflow" / "mlflow.db"


def test_spike_run_from_a_path_and_from_a_uri():
    by_path = ingest.read(DB, ReadOptions(run="spike"))
    by_uri = ingest.read(f"sqlite:///{DB}", ReadOptions(run="spike"))
    assert by_path.source.format == by_uri.source.format == "mlflow_db"
    assert by_path.frame.equals(by_uri.frame)
    expected = training_run(spike_at=30)
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(by_path.frame[column].to_list(), expected[key])
    assert by_path.frame["loss"][30] == 9.5
    assert by_path.source.dtype == "bf16"
    assert by_path.source.notes == []  # no clamped value, no Inf note


def test_tracking_uri_option_with_the_run_as_target():
    run = ingest.read("spike", ReadOptions(tracking_uri=f"sqlite:///{DB}"))
    assert run.source.format == "mlflow_db" and run.source.run.endswith("(spike)")


def test_nan_rebuilt_from_is_nan_and_the_inf_clamp_undone():
    raw = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    stored = raw.execute(
        "SELECT m.step, m.value, m.is_nan FROM metrics m JOIN runs r USING (run_uuid) "
        "WHERE r.name = 'nan' AND m.key = 'train/loss' AND m.step IN (40, 41) ORDER BY m.step"
    ).fetchall()
    raw.close()
    assert stored == [(40, 0.0, 1), (41, sys.float_info.max, 0)]  # what MLflow really stores
    run = ingest.read(DB, ReadOptions(run="nan"))
    loss, grad = run.frame["loss"].to_list(), run.frame["grad_norm"].to_list()
    assert math.isnan(loss[40]) and math.isnan(grad[40])
    assert math.isinf(loss[41]) and loss[41] > 0
    assert math.isinf(grad[42]) and grad[42] < 0
    assert [s for s in range(60) if not (math.isfinite(loss[s]) and math.isfinite(grad[s]))] == [
        40,
        41,
        42,
    ]
    assert any("heuristic" in note and "(2 point(s))" in note for note in run.source.notes)


def test_rank_tags_make_one_per_rank_run():
    run = ingest.read(DB, ReadOptions(experiment="stab-ranks"))
    frame = run.frame
    assert run.source.ranks == 4 and frame.height == 240
    rank2 = frame.filter(frame["rank"] == 2)
    assert math.isnan(rank2["loss"][20]) and rank2["loss"][21] == math.inf
    rank3 = frame.filter(frame["rank"] == 3)["loss"].to_list()
    assert_same_values(rank3, training_run(spike_at=None, seed=3)["train/loss"])


def test_several_runs_without_a_choice_list_them_on_one_line():
    with pytest.raises(StabInputError) as err:
        ingest.read(DB, ReadOptions(experiment="stab-fixtures"))
    assert "\n" not in str(err.value) and "(spike)" in str(err.value) and "(nan)" in str(err.value)


def test_empty_run_is_a_one_line_input_error():
    with pytest.raises(StabInputError, match=r"\(empty\) has no metrics logged"):
        ingest.read(DB, ReadOptions(experiment="stab-empty"))


def test_reading_never_writes(tmp_path):
    copy = tmp_path / "mlflow.db"
    shutil.copy(DB, copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    ingest.read(copy, ReadOptions(run="nan"))
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no journal, no WAL


def test_detection(tmp_path):
    assert ingest.detect_format(DB) == "mlflow_db"
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert not mlflow_db.sniff(other, other.read_bytes()[:100])


def test_truncated_database_is_a_one_line_input_error(tmp_path):
    copy = tmp_path / "mlflow.db"
    copy.write_bytes(DB.read_bytes()[: 60 * 1024])  # a copy that stopped part way
    with pytest.raises(StabInputError) as err:
        mlflow_db.read(copy, ReadOptions(run="spike"))
    assert "\n" not in str(err.value) and str(copy) in str(err.value)


@pytest.mark.slow  # ~2 s: the MLflow client writes a sqlite store
def test_mlflow_client_sqlite_round_trip(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow not installed (pip install mlflow)")
    pytest.importorskip("sqlalchemy", reason="the mlflow sqlite store needs sqlalchemy")
    monkeypatch.chdir(tmp_path)  # the store puts artifacts under ./mlruns
    expected = training_run(spike_at=30, nonfinite_at=45)
    uri = new_sqlite_store(tmp_path / "m.db")
    log_mlflow(expected, uri, experiment="e", run_name="both", params={"precision": "16-mixed"})
    run = ingest.read(uri)
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(run.frame[column].to_list(), expected[key])
    assert math.isnan(run.frame["loss"][45]) and run.frame["loss"][46] == math.inf
    assert run.frame["grad_norm"][47] == -math.inf
    assert run.source.dtype == "fp16"
