"""The rules' arrays borrow the frame's memory instead of copying the run (issue 15).

numpy can use polars' buffer only when a column is one chunk; a frame joined from
pieces (a JSONL log read a piece at a time, a Parquet file's row groups) is many,
and every array the rules read was a copy held beside the frame: the run twice.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.core.model import SourceInfo
from stabilitycli.detect.series import build_view
from stabilitycli.frame import RunData


def _run_in_chunks(chunks: int, rows_each: int) -> RunData:
    rng = np.random.default_rng(5)
    loss = rng.gamma(50.0, 0.05, chunks * rows_each)
    loss[3], loss[5] = np.nan, np.inf
    pieces = [
        pl.DataFrame(
            {
                "step": np.arange(i * rows_each, (i + 1) * rows_each, dtype=np.int64),
                "loss": loss[i * rows_each : (i + 1) * rows_each],
                "lr": np.full(rows_each, 3e-4),
            }
        )
        for i in range(chunks)
    ]
    frame = pl.concat(pieces, rechunk=False)
    return RunData(frame=frame, source=SourceInfo(path="<chunks>", format="frame"))


def test_the_view_borrows_the_frames_columns_and_keeps_their_values() -> None:
    run = _run_in_chunks(chunks=8, rows_each=500)
    expected = {c: run.frame[c].to_numpy().copy() for c in run.frame.columns}
    assert run.frame["loss"].n_chunks() > 1

    view = build_view(run)

    assert {run.frame[c].n_chunks() for c in run.frame.columns} == {1}
    for name in ("loss", "lr"):
        np.testing.assert_array_equal(view.columns[name], expected[name])
        assert np.shares_memory(view.columns[name], run.frame[name].to_numpy())
    np.testing.assert_array_equal(view.steps, expected["step"])
    assert np.shares_memory(view.steps, run.frame["step"].to_numpy())
    assert np.isnan(view.columns["loss"][3]) and np.isposinf(view.columns["loss"][5])


def test_metrics_logged_at_every_step_share_one_read_only_mask() -> None:
    run = _run_in_chunks(chunks=2, rows_each=50)
    sparse_lr = run.frame["lr"].to_numpy().copy()
    frame = run.frame.with_columns(
        pl.Series("grad_norm", np.ones(run.frame.height)),
        pl.Series(
            "lr", np.where(np.arange(run.frame.height) % 10 == 0, sparse_lr, np.nan)
        ).fill_nan(None),
    )
    view = build_view(RunData(frame=frame, source=SourceInfo(path="<mask>", format="frame")))

    assert view.logged["loss"] is view.logged["grad_norm"]  # NaN and Inf still count as logged
    assert view.logged["loss"].all() and not view.logged["loss"].flags.writeable
    assert view.logged["lr"] is not view.logged["loss"]
    assert view.logged["lr"].sum() == 10 and view.points("lr")[0].tolist() == list(
        range(0, 100, 10)
    )
