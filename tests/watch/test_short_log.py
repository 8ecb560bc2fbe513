"""A log too short for the spike baseline is judged by its jumps between points; a run being
written is short only for now, so those findings wait for the run's final judgment."""

from __future__ import annotations

import json
import math
from pathlib import Path

from stabilitycli.core.config import Thresholds
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.pipeline import run as pipeline
from stabilitycli.watch.loop import WatchSettings
from stabilitycli.watch.session import WatchRequest, run_watch
from tests.watch._replay import ReplayClock

JUMP_AT = 20  # the grad norm triples here: over the short-log bar (2x), a warmup's usual jolt


def _lines(a: int, b: int) -> bytes:
    text = ""
    for s in range(a, b):
        loss, grad_norm = 3.0 - s / 1000 + 0.01 * math.sin(s), 3.0 if s >= JUMP_AT else 1.0
        text += json.dumps({"step": s, "loss": loss, "grad_norm": grad_norm}) + "\n"
    return text.encode()


def _watch(tmp_path: Path, points: int, per_poll: int):
    """(the log, the final analysis, the alerts) of a run written `per_poll` points a poll."""
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    writes = [
        lambda a=a: log.open("ab").write(_lines(a, min(a + per_poll, points)))
        for a in range(0, points, per_poll)
    ]
    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(str(log), ReadOptions(), Thresholds(), settings)
    alerts: list = []
    final = run_watch(request, alerts.append, lambda _: None, ReplayClock(writes))
    return log, final, alerts


def test_a_short_prefix_jump_of_a_long_run_is_never_alerted(tmp_path: Path) -> None:
    _, final, alerts = _watch(tmp_path, points=600, per_poll=50)
    # judged on its first 50 points, as the first poll was, the log has the jump
    first = tmp_path / "first.jsonl"
    first.write_bytes(_lines(0, 50))
    judged = pipeline.analyze(str(first), Thresholds())
    assert "grad-norm-jump" in {f.code for f in judged.findings}
    # the longer log has not: nothing was alerted, so nothing had to be withdrawn
    assert "grad-norm-jump" not in {f.code for f in final.findings}
    assert [a for a in alerts if a.code == "grad-norm-jump"] == []
    assert [a for a in alerts if a.status == "withdrawn"] == []


def test_a_run_that_ends_short_gets_its_jump_at_the_end(tmp_path: Path) -> None:
    _, final, alerts = _watch(tmp_path, points=60, per_poll=10)
    jumps = [a for a in alerts if a.code == "grad-norm-jump"]
    assert [(a.type, a.status, a.step) for a in jumps] == [("alert", "decided", JUMP_AT)]
    assert jumps[0].logged_step == 59  # from the final judgment, not a poll's
    assert "grad-norm-jump" in {f.code for f in final.findings}
