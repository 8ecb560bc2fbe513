"""detect/level.py: the local level a few rows at a time is the one the whole series gives,
and it is the mean wherever the curve does not fall (issue 36)."""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.level import WINDOW_NAMES, LevelAt, local_level
from stabilitycli.detect.windows import plan_window, trailing_chunks
from tests.detect import _lm_curves as lm


def _whole(steps, values, thresholds):
    plan = plan_window(steps, thresholds.spike_window_steps, 8, 20)
    parts = [
        local_level(stats, thresholds).level
        for _, stats in trailing_chunks(steps, values, 100, plan, WINDOW_NAMES)
    ]
    return plan, np.concatenate(parts)


@pytest.mark.parametrize(
    "every,points", [(1, 3000), (7, 3000), (100, 1000)], ids=["dense", "by-step", "widened"]
)
def test_level_at_a_few_rows_is_the_whole_series_level(every, points):
    thresholds = Thresholds()
    run = lm.sparse(every=every, points=points, sigma=0.01, seed=5)
    steps, values = run["step"], run["grad_norm"]
    plan, whole = _whole(steps, values, thresholds)
    rows = np.array([3, 40, 41, 150, points // 2, points - 1])
    few = LevelAt(steps, values, 100, plan, thresholds)[rows]
    np.testing.assert_allclose(few, whole[rows], rtol=1e-9, equal_nan=True)


def test_the_level_is_the_mean_where_the_curve_is_flat():
    thresholds = Thresholds()
    rng = np.random.default_rng(0)
    steps = np.arange(1, 5001)
    values = 2.0 * (1 + 0.01 * rng.standard_normal(steps.size))
    plan = plan_window(steps, 100, 8, 20)
    for _, stats in trailing_chunks(steps, values, 100, plan, WINDOW_NAMES):
        level = local_level(stats, thresholds)
        assert not level.falling.any()
        np.testing.assert_array_equal(level.level, stats["mean"])


def test_level_changes_on_two_threads_are_the_ones_in_turn(monkeypatch):
    """Issue 40: with a thread lent, `level_changes` works out two chunks at once; the
    changes, and their order, are the ones one chunk after another gives, including a
    change that falls next to a chunk's edge."""
    from stabilitycli.core import threads
    from stabilitycli.detect import windows
    from stabilitycli.detect.level import level_changes

    run = lm.epochs(epoch_steps=2500, count=8, drop=0.12)
    loss = lm.loss_of(run)
    monkeypatch.setattr(windows, "CHUNK_ROWS", 2500)  # an epoch boundary at every edge
    thresholds = Thresholds()
    in_turn = level_changes(run["step"], loss, thresholds)
    with threads.lending(2):
        at_once = level_changes(run["step"], loss, thresholds)
    assert in_turn.size >= 6  # the epoch boundaries are found
    np.testing.assert_array_equal(at_once, in_turn)


def test_local_level_blocks_on_two_threads_are_the_ones_in_turn(monkeypatch):
    """Issue 40: with a thread lent, `local_level` works out two blocks of rows at once;
    every field of every row has the bits one block after another gives."""
    import dataclasses

    from stabilitycli.core import threads
    from stabilitycli.detect import level

    thresholds = Thresholds()
    run = lm.epochs(epoch_steps=1500, count=3)
    steps, values = run["step"], lm.loss_of(run)
    plan = plan_window(steps, thresholds.spike_window_steps, 8, 20)
    ((_, stats),) = trailing_chunks(steps, values, 100, plan, WINDOW_NAMES)
    monkeypatch.setattr(level, "LEVEL_BLOCK_ROWS", 512)
    in_turn = local_level(stats, thresholds)
    with threads.lending(2):
        at_once = local_level(stats, thresholds)
    for field in dataclasses.fields(in_turn):
        np.testing.assert_array_equal(getattr(at_once, field.name), getattr(in_turn, field.name))
