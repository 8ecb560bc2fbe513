"""MLflow tracking server over REST, against a real `mlflow server` started on 127.0.0.1.

Skipped as a whole when mlflow is not installed: the server is the mlflow package.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip(
    "mlflow", reason="mlflow not installed: no tracking server to test against (pip install mlflow)"
)
pytest.importorskip("sqlalchemy", reason="mlflow server needs sqlalchemy for its sqlite backend")

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.mlflow import server as mlflow_server
from stabilitycli.ingest.options import ReadOptions
from tests.ingest._mlflow_server_proc import free_port
from tests.ingest._mlflow_server_proc import mlflow_server as start_server
from tests.ingest._synthetic_run import assert_same_values, log_mlflow, training_run

# the `server` fixture starts a real `mlflow server`: ~20 s before the first test that uses it
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module, with the runs every test reads."""
    workdir = tmp_path_factory.mktemp("mlflow-server")
    with start_server(workdir) as url:
        ids = {
            "spike": log_mlflow(
                training_run(spike_at=30),
                url,
                experiment="srv",
                run_name="spike",
                params={"precision": "bf16-mixed"},
            ),
            "nan": log_mlflow(
                training_run(spike_at=None, nonfinite_at=40), url, experiment="srv", run_name="nan"
            ),
            "empty": log_mlflow({"step": []}, url, experiment="srv-empty", run_name="empty"),
        }
        for rank in range(3):
            run = training_run(spike_at=None, nonfinite_at=20 if rank == 1 else None, seed=rank)
            log_mlflow(run, url, experiment="srv-ranks", run_name=f"rank_{rank}")
        yield url, ids


@slow
def test_spike_run_by_id(server):
    url, ids = server
    run = ingest.read(url, ReadOptions(run=ids["spike"]))
    assert run.source.format == "mlflow_server"
    expected = training_run(spike_at=30)
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(run.frame[column].to_list(), expected[key])
    assert run.frame["loss"][30] == 9.5 and run.source.dtype == "bf16"


@slow
def test_nan_and_inf_come_back_exactly(server):
    url, _ = server
    run = ingest.read(url, ReadOptions(run="nan"))  # by name: runs/search
    loss, grad = run.frame["loss"].to_list(), run.frame["grad_norm"].to_list()
    assert math.isnan(loss[40]) and math.isnan(grad[40])
    assert math.isinf(loss[41]) and loss[41] > 0
    assert math.isinf(grad[42]) and grad[42] < 0
    assert [s for s in range(60) if not (math.isfinite(loss[s]) and math.isfinite(grad[s]))] == [
        40,
        41,
        42,
    ]
    assert any("heuristic" in note for note in run.source.notes)  # the server's sqlite clamp


@slow
def test_paging_reads_every_point(server, monkeypatch):
    url, ids = server
    whole = ingest.read(url, ReadOptions(run=ids["nan"]))
    monkeypatch.setattr(mlflow_server, "PAGE_POINTS", 7)  # 60 points -> 9 pages per metric
    paged = ingest.read(url, ReadOptions(run=ids["nan"]))
    assert paged.frame.equals(whole.frame)
    assert paged.source.rows_used == 60


@slow
def test_a_pasted_ui_link_names_the_run(server):
    url, ids = server
    link = f"{url}/#/experiments/1/runs/{ids['spike']}"
    run = ingest.read(link)
    assert run.source.run == f"{ids['spike']} (spike)"


@slow
def test_rank_named_runs_are_one_per_rank_run(server):
    url, _ = server
    run = ingest.read(url, ReadOptions(experiment="srv-ranks"))
    assert run.source.ranks == 3
    rank1 = run.frame.filter(run.frame["rank"] == 1)
    assert math.isnan(rank1["loss"][20]) and rank1["loss"][21] == math.inf


@slow
def test_several_runs_and_empty_run_are_one_line_errors(server):
    url, ids = server
    with pytest.raises(StabInputError) as err:
        ingest.read(url, ReadOptions(experiment="srv"))
    assert "\n" not in str(err.value) and "(spike)" in str(err.value) and "--run" in str(err.value)
    with pytest.raises(StabInputError, match="has no metrics logged"):
        ingest.read(url, ReadOptions(run=ids["empty"]))
    with pytest.raises(StabInputError, match="no experiment 'nope'"):
        ingest.read(url, ReadOptions(experiment="nope"))


def test_unreachable_server_is_one_line():
    with pytest.raises(StabInputError) as err:
        ingest.read(f"http://127.0.0.1:{free_port()}", ReadOptions(run="x"))
    assert "cannot reach the MLflow server" in str(err.value) and "\n" not in str(err.value)
