"""The MLflow server follower against a real `mlflow server` on 127.0.0.1, the client logging
live. The server starts once for the module; if it does not answer within ~30 s the module is
skipped (and says why) rather than holding up the suite."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading

import pytest

pytest.importorskip("mlflow", reason="mlflow not installed: no tracking server to follow")
pytest.importorskip("sqlalchemy", reason="mlflow server needs sqlalchemy for its sqlite backend")

from stabilitycli import ingest
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.sources import mlflow_server as server_source
from tests.ingest import _mlflow_server_proc
from tests.watch.sources._same import assert_same_run

pytestmark = pytest.mark.slow  # a real server: ~20 s to start
READY_S = float(os.environ.get("STAB_TEST_MLFLOW_READY_S", "30"))


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mlflow-watch")
    bound, _mlflow_server_proc.START_TIMEOUT_S = _mlflow_server_proc.START_TIMEOUT_S, READY_S
    try:
        started = _mlflow_server_proc.mlflow_server(workdir)
        try:
            address = started.__enter__()
        except RuntimeError as err:
            pytest.skip(f"mlflow server did not start on 127.0.0.1 within {READY_S:.0f} s: {err}")
    finally:
        _mlflow_server_proc.START_TIMEOUT_S = bound
    yield address
    started.__exit__(None, None, None)


def _log(client, run_id: str, steps: range) -> None:
    from mlflow.entities import Metric

    special = {40: math.nan, 41: math.inf, 42: -math.inf}
    metrics = []
    for step in steps:
        stamp = 1_700_000_000_000 + step
        loss = special.get(step, 2.0 + math.sin(step / 7.0) / 4.0)
        metrics += [Metric("train/loss", loss, stamp, step)]
        metrics += [Metric("train/grad_norm", 1.0 + (step % 5) / 10.0, stamp, step)]
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])


def _run(url: str, name: str) -> tuple:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("watch") or client.create_experiment("watch")
    experiment_id = experiment if isinstance(experiment, str) else experiment.experiment_id
    return client, client.create_run(experiment_id, run_name=name).info.run_id


def test_live_client_until_finished(url):
    client, run_id = _run(url, "live")
    options = ReadOptions(run=run_id)
    _log(client, run_id, range(0, 20))
    follower = server_source.follow(url, options)
    assert follower.poll().records_read == 40
    for start in range(20, 140, 40):
        _log(client, run_id, range(start, start + 40))
        poll = follower.poll()
        assert poll.records_read == 80 and poll.ended is None and poll.problems == []
        assert_same_run(follower.snapshot(), ingest.read(url, options))
    loss = follower.snapshot().frame["loss"].to_list()
    # the server's sqlite store clamps Inf; it is mapped back as the reader maps it
    assert math.isnan(loss[40]) and loss[41] == math.inf and loss[42] == -math.inf
    client.set_terminated(run_id, "FINISHED")
    poll = follower.poll()
    assert poll.ended is not None and "FINISHED" in poll.ended
    assert_same_run(follower.snapshot(), ingest.read(url, options))


def test_a_poll_asks_for_the_new_points_only(url):
    client, run_id = _run(url, "long")
    _log(client, run_id, range(2500))
    follower = server_source.follow(url, ReadOptions(run=run_id))
    assert follower.poll().records_read == 5000
    points, requests = follower.points_fetched, follower.requests
    _log(client, run_id, range(2500, 2550))
    assert follower.poll().records_read == 100
    # per metric: the one known point and the 50 new, then the 50 again for the next token
    assert follower.points_fetched - points == 2 * (1 + 50 + 50)
    assert follower.requests - requests == 1 + 2 * 2
    points = follower.points_fetched
    assert follower.poll().records_read == 0 and follower.points_fetched - points == 2
    assert_same_run(follower.snapshot(), ingest.read(url, ReadOptions(run=run_id)))


class _Proxy:
    """A TCP forwarder on 127.0.0.1 that can be taken down and brought back on its port."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _mlflow_server_proc.free_port()
        self.listener: socket.socket | None = None

    def up(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:
                return
            outside = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def test_server_down_and_back(url):
    client, run_id = _run(url, "flaky")
    _log(client, run_id, range(30))
    proxy = _Proxy(int(url.rsplit(":", 1)[1]))
    proxy.up()
    through = f"http://127.0.0.1:{proxy.port}"
    options = ReadOptions(run=run_id)
    follower = server_source.follow(through, options)
    assert follower.poll().records_read == 60
    proxy.down()
    _log(client, run_id, range(30, 50))
    first, second = follower.poll(), follower.poll()
    assert len(first.problems) == 1 and "cannot reach the MLflow server" in first.problems[0]
    assert second.problems == [] and first.records_read == 0
    proxy.up()
    poll = follower.poll()
    assert poll.problems == [] and poll.records_read == 40
    assert_same_run(follower.snapshot(), ingest.read(url, options), paths={url: through})
    proxy.down()


def test_a_server_not_up_yet_is_a_problem_then_the_run(url):
    client, run_id = _run(url, "late")
    _log(client, run_id, range(10))
    proxy = _Proxy(int(url.rsplit(":", 1)[1]))
    follower = server_source.follow(f"http://127.0.0.1:{proxy.port}", ReadOptions(run=run_id))
    assert len(follower.poll().problems) == 1
    proxy.up()
    assert follower.poll().records_read == 20
    proxy.down()
