"""Alerts as events become decidable: a spike is provisional until its recovery window has
passed, then settles; each event is alerted, posted and acted on once."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.hooks import Hooks
from stabilitycli.watch.loop import WatchSettings
from stabilitycli.watch.session import WatchRequest, run_watch
from tests.watch._replay import ReplayClock
from tests.watch._runs import jsonl_lines

# the trainer's writes, one per poll: up to the spike, into it, past its recovery window
CUTS = (0, 590, 602, 640, 700, 720)


def _watch(tmp_path: Path, stays: bool, fail_on: Severity, hooks: Hooks | None = None):
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    writes = []
    for a, b in itertools.pairwise(CUTS):
        data = jsonl_lines(a, b, spike_at=600, stays=stays)
        writes.append(lambda data=data: log.open("ab").write(data))
    settings = WatchSettings(
        interval_s=1.0, idle_s=3.0, cpu_share=1.0, fail_on=fail_on, hooks=hooks or Hooks()
    )
    alerts: list = []
    said: list[str] = []
    request = WatchRequest(str(log), ReadOptions(), Thresholds(), settings)
    final = run_watch(request, alerts.append, said.append, ReplayClock(writes))
    return final, alerts, said


def test_a_spike_that_comes_back_is_pending_then_recovered(tmp_path: Path) -> None:
    final, alerts, _ = _watch(tmp_path, stays=False, fail_on=Severity.ERROR)
    spikes = [a for a in alerts if a.code == "spike"]
    assert [(a.type, a.status) for a in spikes] == [("alert", "pending"), ("update", "recovered")]
    pending = spikes[0]
    assert pending.step == 600 and pending.settles_at_step == 650
    assert pending.logged_step is not None and pending.logged_step >= 600  # never before it
    assert "provisional: recovery pending until step 650" in pending.line()
    assert final.verdict.code == "spike-recoverable"


def test_a_spike_that_stays_settles_persistent_and_is_acted_on_once(tmp_path: Path) -> None:
    touched = tmp_path / "stop-now"
    hooks = Hooks(touch=touched)
    final, alerts, said = _watch(tmp_path, stays=True, fail_on=Severity.ERROR, hooks=hooks)
    spikes = [a for a in alerts if a.code == "spike"]
    assert [(a.type, a.status) for a in spikes] == [("alert", "pending"), ("update", "persistent")]
    assert spikes[1].logged_step is not None and spikes[1].logged_step >= 650
    assert sum("--touch" in line for line in said) == 1  # one event, acted on once
    written = json.loads(touched.read_text())
    assert (written["code"], written["step"], written["status"]) == ("spike", 600, "persistent")
    assert final.verdict.code == "spike-persistent"


class _Receiver(BaseHTTPRequestHandler):
    posts: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet test output
        pass


@pytest.fixture
def receiver():
    _Receiver.posts = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", _Receiver.posts
    server.shutdown()
    server.server_close()


def test_webhook_gets_one_post_per_event(tmp_path: Path, receiver) -> None:
    url, posts = receiver
    # --fail-on warning: the recovered spike (a warning once settled) calls for the hooks
    _, alerts, said = _watch(
        tmp_path, stays=False, fail_on=Severity.WARNING, hooks=Hooks(webhook=url)
    )
    settled = [a for a in alerts if not a.provisional and a.status != "withdrawn"]
    assert len(posts) == len({a.key for a in settled}) == 1
    post = posts[0]
    assert post["code"] == "spike" and post["status"] == "recovered"
    assert post["text"].startswith("update job step 600 spike warning")
    assert not any("--webhook" in line for line in said)  # no failure said


def test_a_webhook_that_is_down_is_one_line(tmp_path: Path) -> None:
    hooks = Hooks(webhook="http://127.0.0.1:9/nothing-listens")
    _, _, said = _watch(tmp_path, stays=True, fail_on=Severity.ERROR, hooks=hooks)
    assert sum(line.startswith("--webhook: could not post") for line in said) == 1


def test_on_alert_command_gets_the_alert_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    hooks = Hooks(on_alert=f"cat > {out}")
    _watch(tmp_path, stays=True, fail_on=Severity.ERROR, hooks=hooks)
    got = json.loads(out.read_text())
    assert got["code"] == "spike" and got["severity"] == "error" and got["rank"] is None


def test_garbage_appended_is_counted_as_analyze_counts_it(tmp_path: Path) -> None:
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    chunks = [jsonl_lines(0, 300), b"\x00\x01 not json at all\n{broken\n", jsonl_lines(300, 400)]
    writes = [lambda c=c: log.open("ab").write(c) for c in chunks]
    said: list[str] = []
    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(str(log), ReadOptions(), Thresholds(), settings)
    final = run_watch(request, lambda _a: None, said.append, ReplayClock(writes))
    told = [line for line in said if "rejected so far" in line]
    # said once, when the garbage came, with the count analyze gives on the whole log
    assert len(told) == 1 and final.source.rows_rejected == 2
    assert "metrics.jsonl: 2 of 302 rows rejected so far (latest: line 302:" in told[0]
