"""Rules that work a long log out a block of rows at a time (issue 40: the peak memory of a
rule is a block's temporaries, not a few copies of the log) give the very numbers the whole
log gives: the loss-collapse scan in chunks of points, the local level in blocks of rows.
The LR plan's step decays in chunks of changes, the noise of the no-learning rule with its
differences overwritten. The chunks and blocks are made tiny here so that every boundary
falls inside the data."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect import level as level_module
from stabilitycli.detect import lr_plan, windows
from stabilitycli.detect.learning import _MAD_TO_SIGMA, _diff_sigma, _first_collapse
from stabilitycli.pipeline import run as pipeline
from tests.detect.test_learning import _collapse, _gradual, _slow_collapse


def _whole_log_collapse(
    loss: np.ndarray, k: int, b: int, thresholds: Thresholds
) -> tuple[int, float] | None:
    """The scan as it was written over the whole log at once: the reference."""
    series = pl.Series(loss)
    level = series.rolling_median(b, min_samples=1).shift(k).to_numpy().copy()
    top = series.rolling_max(b, min_samples=1).shift(k).to_numpy()
    low = series.rolling_min(b, min_samples=1).shift(k).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        steady = top < thresholds.collapse_level_spread * low
        down = (loss <= thresholds.collapse_near_zero_loss) & (
            loss * thresholds.collapse_min_ratio <= level
        )
    short = np.arange(loss.size) <= k
    level[short], steady[short] = loss[0], True
    down[short] = (loss[short] <= thresholds.collapse_near_zero_loss) & (
        loss[short] * thresholds.collapse_min_ratio <= loss[0]
    )
    hits = np.flatnonzero(down & steady & (level > 0))
    return None if not hits.size else (int(hits[0]), float(level[hits[0]]))


def test_the_collapse_scan_in_chunks_finds_what_the_whole_log_scan_finds(monkeypatch) -> None:
    rng = np.random.default_rng(40)
    thresholds = Thresholds()
    found = 0
    for _ in range(400):
        n = int(rng.integers(2, 240))
        loss = rng.choice([2.0, 1.9, 2.1, 1e-5, 0.0, 3.0, 1e-3, 0.5], n) * rng.uniform(0.9, 1.1, n)
        if rng.random() < 0.5:  # a steady level first, so that a fall after it can count
            loss[: n // 2] = 2.0 + rng.normal(0, 0.01, n // 2)
        k, b = int(rng.integers(1, 40)), int(rng.integers(1, 30))
        want = _whole_log_collapse(loss, k, b, thresholds)
        found += want is not None
        for chunk_rows in (1, 2, 7, 50, 1 << 20):
            monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
            assert _first_collapse(loss, k, b, thresholds) == want
    assert 50 < found < 400  # both outcomes are drawn


@pytest.mark.parametrize("make", [_collapse, _slow_collapse, _gradual])
def test_the_loss_collapse_finding_does_not_depend_on_the_chunk(make, monkeypatch) -> None:
    frame = pl.DataFrame(make())
    whole = pipeline.analyze(frame, select=["loss-collapse"])
    for chunk_rows in (3, 64, 777):
        monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
        chunked = pipeline.analyze(frame, select=["loss-collapse"])
        assert [f.to_dict() for f in chunked.findings] == [f.to_dict() for f in whole.findings]
    assert (make is _gradual) == (not whole.findings)


def _window_stats(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    """Trailing statistics of a falling, noisy curve with a NaN stretch, as polars gives them."""
    steps = np.arange(rows, dtype=np.int64)
    values = 3.0 + 5.0 * np.exp(-steps / 300) + 0.05 * rng.standard_normal(rows)
    values[rows // 3 : rows // 3 + 20] = np.nan
    plan = windows.plan_window(steps, 100, 10, 50)
    return windows.trailing_chunk_at(steps, values, 100, plan, level_module.WINDOW_NAMES, 0)


@pytest.mark.parametrize("block_rows", [1, 5, 64, 999])
@pytest.mark.parametrize("pooled", [False, True])
def test_the_local_level_in_blocks_has_the_bits_of_the_level_in_one_go(
    block_rows, pooled, monkeypatch
) -> None:
    rng = np.random.default_rng(block_rows)
    stats = _window_stats(rng, 2_000)
    noise = np.abs(rng.normal(0.05, 0.01, 2_000)) if pooled else None
    if noise is not None:
        noise[::17] = np.nan
    thresholds = Thresholds()
    whole = level_module.local_level(stats, thresholds, noise)
    monkeypatch.setattr(level_module, "LEVEL_BLOCK_ROWS", block_rows)
    blocks = level_module.local_level(stats, thresholds, noise)
    for name in ("level", "sigma", "falling", "rise_slope", "line"):
        a, b = getattr(whole, name), getattr(blocks, name)
        assert a.dtype == b.dtype, name
        assert a.tobytes() == b.tobytes(), name
    assert whole.falling.any() and not whole.falling.all()  # both branches are exercised


def _whole_log_decays(
    steps: np.ndarray, lr: np.ndarray, thresholds: Thresholds
) -> tuple[tuple[int, float], ...]:
    """The step decays as they were found over the whole log at once: the reference."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = lr[1:] / lr[:-1]
    flat = np.abs(ratio - 1) <= lr_plan._FLAT
    flat_before = np.concatenate(([False], flat[:-1]))
    flat_after = np.concatenate((flat[1:], [True]))
    material = lr[:-1] >= lr_plan._DECAY_MIN_FRAC * np.max(lr)
    drop = (ratio <= 1 / (1 + thresholds.lr_jump_ratio)) & (ratio > 0) & flat_before & flat_after
    at = np.flatnonzero(drop & material)[:20]
    return tuple((int(steps[i + 1]), round(float(ratio[i]), 4)) for i in at)


def test_step_decays_in_chunks_are_the_decays_of_the_whole_log(monkeypatch) -> None:
    rng = np.random.default_rng(4)
    thresholds = Thresholds()
    found = 0
    for _ in range(300):
        n = int(rng.integers(1, 200))
        halvings = np.cumsum(rng.random(n) < rng.choice([0.05, 0.3, 0.6]))
        lr = 1e-3 * 0.5 ** np.floor(halvings)  # step decays, some past the first 20
        if rng.random() < 0.3:
            lr[rng.integers(0, n)] = rng.choice([np.nan, 0.0, np.inf, 1e-9])
        steps = np.arange(n) * 10
        want = _whole_log_decays(steps, lr, thresholds)
        found += bool(want)
        for chunk_rows in (1, 2, 3, 17, 1 << 20):
            monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
            assert lr_plan._step_decays(steps, lr, thresholds) == want
    assert 30 < found < 300


def test_the_difference_noise_is_the_median_of_the_deviations() -> None:
    rng = np.random.default_rng(5)
    for n in (2, 3, 10, 1001):
        values = np.cumsum(rng.standard_normal(n))
        kept = values.copy()
        diff = np.diff(values)
        mad = float(np.median(np.abs(diff - np.median(diff))))
        assert _diff_sigma(values) == _MAD_TO_SIGMA * mad / math.sqrt(2)
        assert values.tobytes() == kept.tobytes()  # the log's own values are not written


def test_the_first_fall_and_the_last_rise_of_the_lr_are_found_chunk_by_chunk(monkeypatch) -> None:
    rng = np.random.default_rng(6)
    for _ in range(500):
        n = int(rng.integers(1, 120))
        shape = int(rng.integers(0, 3))
        if shape == 0:  # flat runs, rises, falls, NaN and zeros
            lr = rng.choice([1.0, 2.0, 0.5, np.nan, 0.0], n)
        elif shape == 1:  # warmup, stable, decay to zero
            third = n // 3
            lr = np.concatenate(
                [np.linspace(0, 1, third), np.ones(third), np.linspace(1, 0, n - 2 * third)]
            )
        else:  # only up or only down
            lr = np.sort(rng.random(n))[:: int(rng.choice([1, -1]))]
        change = np.diff(lr)
        falls, not_falling = np.flatnonzero(change < 0), np.flatnonzero(change >= 0)
        first_fall = int(falls[0]) if falls.size else None
        last_not_falling = int(not_falling[-1]) if not_falling.size else None
        for chunk_rows in (1, 2, 5, 1 << 20):
            monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
            assert lr_plan._first_change(lr, falling=True) == first_fall
            found = lr_plan._first_change(lr, falling=False, from_end=True)
            assert found == last_not_falling
