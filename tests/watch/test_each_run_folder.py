"""`stab watch --each-run` on a folder of runs: a run folder that appears while it is watched
joins, is followed on its own (with the tail judgment of its format), and ends with the
verdict `stab analyze` gives on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.pipeline import run as pipeline
from stabilitycli.report.formats import Format
from stabilitycli.watch.experiment import watch_each_run
from stabilitycli.watch.loop import WatchSettings
from stabilitycli.watch.session import WatchRequest
from tests.watch._replay import ReplayClock
from tests.watch._runs import jsonl_lines, loss_at


def _nan_lines(first: int, last: int, nan_at: int) -> bytes:
    steps = np.arange(first, last)
    loss = np.where(steps >= nan_at, np.nan, loss_at(np.arange(0, last))[first:last])
    return b"".join(
        json.dumps({"step": int(s), "loss": float(v)}).encode() + b"\n"
        for s, v in zip(steps, loss, strict=True)
    )


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as sink:
        sink.write(data)


def test_a_run_folder_that_appears_later_joins_and_is_judged_on_its_own(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first, later = runs / "lr-1e-3" / "metrics.jsonl", runs / "lr-3e-3" / "metrics.jsonl"
    _append(first, jsonl_lines(0, 300))
    writes = [
        lambda: _append(first, jsonl_lines(300, 400)),
        lambda: _append(later, _nan_lines(0, 200, 10_000)),
        lambda: _append(later, _nan_lines(200, 300, 250)),
        lambda: _append(first, jsonl_lines(400, 500)),
    ]
    settings = WatchSettings(interval_s=1.0, idle_s=3.0, cpu_share=1.0)
    request = WatchRequest(str(runs), ReadOptions(), Thresholds(), settings)
    alerts: list = []
    said: list[str] = []
    finals = watch_each_run(request, alerts.append, said.append, ReplayClock(writes))

    assert "run lr-1e-3/metrics.jsonl joined the watch" in said
    assert "run lr-3e-3/metrics.jsonl joined the watch" in said
    nan = [a for a in alerts if a.code == "nan"]
    assert [(a.run, a.step, a.logged_step) for a in nan] == [("lr-3e-3", 250, 299)]
    assert not [a for a in alerts if a.run == "lr-1e-3"]
    documents = [json.loads(Format.json.render(f)) for f in finals]
    expected = [pipeline.analyze(str(p), Thresholds()) for p in (first, later)]
    assert documents == [json.loads(Format.json.render(e)) for e in expected]
