"""Issue 40: the rank check's passes over every row read x, z and pos as numpy (`arrays`),
not as a frame per chunk (`part`); the picture finds a row's cell from its step's bucket and
its rank's index; the throughput cohort is judged in a thread beside the metric's. Each new
path against the one it replaces, on a dense (lockstep) and a sparse (ragged) cohort with
NaN and +Inf ranks, bit for bit."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core import threads
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import SourceInfo
from stabilitycli.detect.ranks import check as check_module
from stabilitycli.detect.ranks import cohort as cohort_module
from stabilitycli.detect.ranks.check import find_rank_outliers
from stabilitycli.detect.ranks.cohort import build_cohort, last_rows, rank_index
from stabilitycli.detect.ranks.picture import (
    PICTURE_BUCKETS,
    PICTURE_CLIP_Z,
    rank_picture,
    step_buckets,
)
from stabilitycli.frame import RunData
from tests.detect.test_rank_cohort_chunks import troubled_run

SHAPES = [False, True]
SHAPE_IDS = ["dense", "sparse"]


def cohort_of(ragged: bool, seed: int = 4):
    frame = troubled_run(seed=seed, ragged=ragged).frame
    if not ragged:  # rank 5 stops early: without it every rank logs every step
        frame = frame.filter(pl.col("rank") < 5)
    cohort = build_cohort(frame, "loss", 0.01, [], pool_points=5)
    assert (cohort.per_rank is not None) is not ragged  # the path the shape is meant to take
    assert not np.isfinite(cohort.rows["x"].to_numpy()).all()  # NaN and +Inf rows in it
    return cohort


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("ragged", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("chunk_rows", [7, 64, 1 << 20])
def test_arrays_are_the_rows_part_gives(ragged, chunk_rows, monkeypatch) -> None:
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
    cohort = cohort_of(ragged)
    height = cohort.rows.height
    # chunk-sized ranges (the repeated pattern), longer ones (a rank's rows), and an empty one
    ranges = [*cohort_module.row_chunks(height), (0, height), (3, 3), (height - 1, height)]
    ranges += [(start, min(start + 2 * chunk_rows + 5, height)) for start in (0, 11, 299)]
    for start, stop in ranges:
        part = cohort.part(start, stop)
        x, z, pos = cohort.arrays(start, stop)
        assert same_bits(x, part["x"].to_numpy()), (start, stop)
        assert same_bits(z, part["z"].to_numpy()), (start, stop)
        assert same_bits(pos, part["pos"].to_numpy()), (start, stop)


@pytest.mark.parametrize("ragged", SHAPES, ids=SHAPE_IDS)
def test_rank_index_counts_the_ranks_before_each_row(ragged) -> None:
    cohort = cohort_of(ragged)
    rank = cohort.rows["rank"].to_numpy()
    ranks, last_i = last_rows(cohort.rows)
    want = np.searchsorted(ranks, rank)
    for start in range(0, rank.size, 97):
        for stop in (start, start + 1, start + 250, rank.size):
            stop = min(stop, rank.size)
            assert np.array_equal(rank_index(last_i, start, stop), want[start:stop])


@pytest.mark.parametrize("ragged", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("chunk_rows", [5, 1 << 20])
def test_the_picture_is_one_bincount_over_every_row(ragged, chunk_rows, monkeypatch) -> None:
    """Each row's cell the way it was found before (its rank searched for, its own step's
    bucket), summed over the whole log at once."""
    monkeypatch.setattr(cohort_module, "COHORT_CHUNK_ROWS", chunk_rows)
    cohort = cohort_of(ragged)
    whole = cohort.whole()
    t, x, z = whole["t"].to_numpy(), whole["x"].to_numpy(), whole["z"].to_numpy()
    ranks, _ = last_rows(cohort.rows)
    first, span = int(t.min()), int(t.max()) - int(t.min()) + 1
    buckets = min(PICTURE_BUCKETS, span)
    cell = np.searchsorted(ranks, whole["rank"].to_numpy()) * buckets
    cell += step_buckets(t, first, span, buckets)
    finite = np.isfinite(x) & np.isfinite(z)
    cells = ranks.size * buckets
    total = np.bincount(
        cell[finite], np.clip(z[finite], -PICTURE_CLIP_Z, PICTURE_CLIP_Z), minlength=cells
    )
    count = np.bincount(cell[finite], minlength=cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.where(count > 0, total / count, np.nan)
    want[np.unique(cell[~np.isfinite(x)])] = np.inf
    picture = rank_picture(cohort)
    assert picture is not None
    assert same_bits(picture.deviation, want.reshape(ranks.size, buckets).astype(np.float32))


def straggling_run() -> RunData:
    """Five ranks in lockstep, rank 4 with NaN and +Inf losses, rank 3 at half speed from
    step 200."""
    frame = troubled_run(seed=11).frame.filter(pl.col("rank") < 5)
    slow = (pl.col("rank") == 3) & (pl.col("step") >= 200)
    frame = frame.with_columns(
        pl.when(slow)
        .then(pl.col("tokens_per_s") * 0.5)
        .otherwise(pl.col("tokens_per_s"))
        .alias("tokens_per_s")
    )
    return RunData(frame=frame, source=SourceInfo(path="memory", format="test"))


def test_stragglers_judged_beside_the_metric_are_the_ones_judged_after(monkeypatch) -> None:
    run = straggling_run()
    beside = []
    judged_beside = check_module._judged_beside

    def spy(*args, **kwargs):
        beside.append(judged_beside(*args, **kwargs))
        return beside[-1]

    monkeypatch.setattr(check_module, "_judged_beside", spy)
    with threads.lending(2):  # as the pipeline lends it, outside a memory cap
        threaded = find_rank_outliers(run, "loss", Thresholds())
    assert beside and beside[0] is not None  # the thread did the judging
    monkeypatch.setattr(check_module, "_judged_beside", lambda *args, **kwargs: None)
    in_turn = find_rank_outliers(run, "loss", Thresholds())
    kinds = {o.kind for o in threaded.outliers}
    assert {"straggler", "nonfinite"} <= kinds
    assert threaded.to_dict() == in_turn.to_dict()


def test_without_a_second_thread_lent_the_stragglers_are_judged_after() -> None:
    """A library caller lends none, and a process under a memory cap is lent none
    (`pipeline.run.rank_report`): the two cohorts' temporaries at once broke the
    bounded-memory test's 40 MiB."""
    run = straggling_run()
    cohort = build_cohort(run.frame, "loss", 0.01, [], pool_points=5)
    throughput = ("tokens_per_s", False)
    assert check_module._judged_beside(run.frame, "loss", throughput, Thresholds(), cohort) is None
    with threads.lending(2):
        future = check_module._judged_beside(run.frame, "loss", throughput, Thresholds(), cohort)
    assert future is not None and [o.kind for o in future.result()] == ["straggler"]


def test_a_log_with_gaps_judges_its_stragglers_after(monkeypatch) -> None:
    """A throughput missing on some rows would be a filtered copy of its rows: not beside."""
    run = straggling_run()
    gappy = run.frame.with_columns(
        pl.when(pl.col("step") == 100)
        .then(None)
        .otherwise(pl.col("tokens_per_s"))
        .alias("tokens_per_s")
    )
    run = RunData(frame=gappy, source=run.source)
    cohort = build_cohort(run.frame, "loss", 0.01, [], pool_points=5)
    throughput = ("tokens_per_s", False)
    assert check_module._judged_beside(run.frame, "loss", throughput, Thresholds(), cohort) is None
