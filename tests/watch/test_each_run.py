"""`stab watch --each-run`: an MLflow experiment watched while the real MLflow client logs
into it; a run that starts after the watch joins it and is judged on its own, with its run
name in its alerts, and each run ends with the verdict `stab analyze --run ID` gives."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("mlflow", reason="the MLflow client writes the stores these tests follow")

from stabilitycli.core.config import Thresholds
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.pipeline import run as pipeline
from stabilitycli.report.formats import Format
from stabilitycli.watch.experiment import watch_each_run
from stabilitycli.watch.loop import WatchSettings
from stabilitycli.watch.session import WatchRequest
from tests._mlflow_store import new_sqlite_store
from tests.watch._replay import ReplayClock

NAN_AT = 200


def _loss(step: int, nan: bool) -> float:
    if nan and step >= NAN_AT:
        return math.nan
    return 2.0 + 1.5 * math.exp(-step / 100.0) + math.sin(step * 1.3) / 100.0


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    """A real MLflow tracking server on 127.0.0.1 (sqlite backend), for the slow tests."""
    pytest.importorskip("sqlalchemy", reason="mlflow server needs sqlalchemy")
    from tests.ingest import _mlflow_server_proc

    started = _mlflow_server_proc.mlflow_server(tmp_path_factory.mktemp("mlflow-each-run"))
    try:
        address = started.__enter__()
    except RuntimeError as err:
        pytest.skip(f"mlflow server did not start on 127.0.0.1: {err}")
    yield address
    started.__exit__(None, None, None)


@pytest.fixture(
    params=[
        "file",
        pytest.param("sqlite", marks=pytest.mark.slow),
        pytest.param("server", marks=pytest.mark.slow),
    ]
)
def store(request, tmp_path, monkeypatch):
    """(the client, the experiment's id, the target `stab watch` takes, the experiment)."""
    from mlflow.tracking import MlflowClient

    if request.param == "file":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        uri = (tmp_path / "mlruns").as_uri()
        target = str(tmp_path / "mlruns")
    elif request.param == "sqlite":
        uri = target = new_sqlite_store(tmp_path / "mlflow.db")
    else:
        uri = target = request.getfixturevalue("server_url")
    client = MlflowClient(tracking_uri=uri)
    name = f"sweep-{request.node.name}"  # one server holds every test's experiment
    return client, client.create_experiment(name), target, name


def _log(client, run_id: str, steps: range, nan: bool = False) -> None:
    from mlflow.entities import Metric

    stamp = 1_700_000_000_000
    metrics = [Metric("train/loss", _loss(s, nan), stamp + s, s) for s in steps]
    for start in range(0, len(metrics), 1000):  # the client's batch limit
        client.log_batch(run_id, metrics=metrics[start : start + 1000])


def _document(analysis) -> dict:
    return json.loads(Format.json.render(analysis))


def test_a_run_that_starts_later_joins_and_is_judged_on_its_own(store) -> None:
    client, experiment, target, sweep = store
    alpha = client.create_run(experiment, run_name="alpha").info.run_id
    _log(client, alpha, range(0, 150))
    beta: list[str] = []

    def start_beta() -> None:
        beta.append(client.create_run(experiment, run_name="beta").info.run_id)
        _log(client, beta[0], range(0, 150), nan=True)

    writes = [
        lambda: _log(client, alpha, range(150, 300)),
        start_beta,
        lambda: (
            _log(client, beta[0], range(150, 300), nan=True),
            _log(client, alpha, range(300, 400)),
        ),
        lambda: client.set_terminated(alpha, "FINISHED"),
        lambda: client.set_terminated(beta[0], "FAILED"),
    ]
    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(target, ReadOptions(experiment=sweep), Thresholds(), settings)
    alerts: list = []
    said: list[str] = []
    finals = watch_each_run(request, alerts.append, said.append, ReplayClock(writes))

    assert any(line == f"run {alpha} (alpha) joined the watch" for line in said)
    assert any(line == f"run {beta[0]} (beta) joined the watch" for line in said)
    assert any("MLflow run" in line and "FAILED" in line for line in said)
    nan = [a for a in alerts if a.code == "nan"]
    assert [(a.run, a.step) for a in nan] == [(f"{beta[0]} (beta)", NAN_AT)]
    assert nan[0].logged_step is not None and nan[0].logged_step < 300  # before the end
    assert not [a for a in alerts if "alpha" in a.run]
    assert len(finals) == 2
    for final, run_id in zip(finals, (alpha, beta[0]), strict=True):
        alone = pipeline.analyze(target, Thresholds(), options=ReadOptions(run=run_id))
        assert _document(final) == _document(alone)
    assert finals[1].verdict.code != finals[0].verdict.code


def test_an_empty_experiment_waits_for_its_first_run(store) -> None:
    client, experiment, target, sweep = store
    gamma: list[str] = []

    def start() -> None:
        gamma.append(client.create_run(experiment, run_name="gamma").info.run_id)
        _log(client, gamma[0], range(0, 300))

    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(target, ReadOptions(experiment=sweep), Thresholds(), settings)
    said: list[str] = []
    finals = watch_each_run(request, lambda _a: None, said.append, ReplayClock([start]))
    assert any(line == f"run {gamma[0]} (gamma) joined the watch" for line in said)
    assert len(finals) == 1 and finals[0].source.run == f"{gamma[0]} (gamma)"


def test_each_run_on_the_command_line_prints_one_verdict_a_run(store, tmp_path) -> None:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    client, experiment, target, sweep = store
    ids = []
    for name, nan in (("alpha", False), ("beta", True)):
        ids.append(client.create_run(experiment, run_name=name).info.run_id)
        _log(client, ids[-1], range(0, 300), nan=nan)
        client.set_terminated(ids[-1], "FINISHED")
    args = ["--format", "json", "--experiment", sweep]
    alerts = tmp_path / "alerts.jsonl"
    result = CliRunner().invoke(
        app,
        ["watch", target, "--each-run", "--idle", "0.2", "--interval", "0.1", "--alerts",
         str(alerts), *args],
    )  # fmt: skip
    assert result.exception is None or isinstance(result.exception, SystemExit)
    documents, text, decoder = [], result.stdout.strip(), json.JSONDecoder()
    while text:  # the documents one after the other
        document, end = decoder.raw_decode(text)
        documents.append(document)
        text = text[end:].strip()
    analyzed = [
        CliRunner().invoke(app, ["analyze", target, "--run", run_id, *args]) for run_id in ids
    ]
    by_run = sorted(documents, key=lambda d: d["source"]["run"])  # in the store's order
    assert by_run == sorted(
        (json.loads(a.stdout) for a in analyzed), key=lambda d: d["source"]["run"]
    )
    assert result.exit_code == max(a.exit_code for a in analyzed) == 1
    codes = [json.loads(line)["code"] for line in alerts.read_text().splitlines()]
    assert "nan" in codes


def test_each_run_on_a_log_file_is_one_line_and_exit_2(tmp_path) -> None:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0, "loss": 2.0}\n')
    result = CliRunner().invoke(app, ["watch", str(log), "--each-run", "--idle", "0.1"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert "--each-run follows the runs of an MLflow store" in result.stderr
    assert "not jsonl inputs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
