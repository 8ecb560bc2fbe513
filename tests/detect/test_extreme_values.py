"""Detectors on values a damaged or unusual log can hold: steps near 2**63, a replay that
is Inf where the abandoned run was finite. Found by the reader fuzzer (#12): each made an
internal error where the analysis should say what it saw."""

from __future__ import annotations

import json
import math

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.ranks.check import find_rank_outliers
from stabilitycli.ingest import read
from stabilitycli.pipeline.run import analyze

INT64_MAX = int(np.iinfo(np.int64).max)


def _write_jsonl(path, rows) -> None:
    # bare Infinity, as Python's json writes it and training scripts log it
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_rank_picture_of_steps_spanning_int64(tmp_path) -> None:
    # (step - first) * buckets overflowed int64 when the steps span most of int64
    rng = np.random.default_rng(3)
    first = 0
    rows = [
        {"step": first + 10 * i, "rank": rank, "loss": 3.0 + 0.01 * rng.standard_normal()}
        for i in range(150)
        for rank in range(4)
    ]
    rows.append({"step": INT64_MAX, "rank": 0, "loss": 3.0})
    log = tmp_path / "ranks.jsonl"
    _write_jsonl(log, rows)
    run = read(log)
    assert run.frame["step"].max() == INT64_MAX  # kept exact, not through a float
    assert analyze(run).source.rows_read == len(rows)
    picture = find_rank_outliers(run, "loss", Thresholds()).picture
    assert picture is not None
    edges = picture.step_edges.tolist()
    assert edges[0] == first and edges[-1] == INT64_MAX  # the last edge clipped to int64
    assert edges == sorted(edges)
    # every rank's first bucket holds the 150 ordinary steps; rank 0 alone has the far step
    assert np.isfinite(picture.deviation[:, 0]).all()


def test_restart_replay_that_is_inf_where_the_abandoned_run_was_finite(tmp_path) -> None:
    # no replayed step has a finite difference: the message formatted a None mean
    rng = np.random.default_rng(5)
    rows = [{"step": s, "loss": 3.0 + 0.02 * rng.standard_normal()} for s in range(200)]
    rows += [{"step": s, "loss": math.inf} for s in range(150, 160)]
    log = tmp_path / "resume.jsonl"
    _write_jsonl(log, rows)
    result = analyze(read(log))
    replays = [f for f in result.findings if f.code == "restart-replay"]
    assert len(replays) == 1
    message = replays[0].message
    assert "no replayed step with a finite loss in both trajectories" in message
    assert "max +inf at step 150" in message


def test_divergence_from_a_loss_level_of_zero_says_it_has_no_relative_rise(tmp_path) -> None:
    # the relative rise divided by the level it rose from: ZeroDivisionError at a level of 0
    # a damaged log: the loss drops to exactly 0, stays there, then climbs (printed in steps
    # of 0.5, so the level the climb starts from is still exactly 0; a climb from 0.05 on has
    # a relative rise, from the step the loss left 0, since the drop's own step no longer
    # counts as noise for the 200 points after it)
    rows = [
        {"step": s, "loss": 2.0 if s < 100 else (0.0 if s < 600 else 0.5 * ((s - 600) // 50))}
        for s in range(0, 1200, 5)
    ]
    log = tmp_path / "zero.jsonl"
    _write_jsonl(log, rows)
    result = analyze(read(log))
    rises = [f for f in result.findings if f.code in ("divergence", "plateau")]
    assert rises, [f.code for f in result.findings]
    assert "no relative rise from 0" in rises[0].message
    assert rises[0].evidence["relative_rise"] is None
