"""The spike rule's local level worked out only at the rows that may pass its first bar
(`detect/spike_open.py`, issue 40): every other row is judged as the whole local level
judges it, to the bit, and the rule's findings are the same."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect import level as level_module
from stabilitycli.detect import spike, windows
from stabilitycli.detect.autocorr import noise_memory_of
from stabilitycli.detect.fall_curve import read_fall
from stabilitycli.detect.spike_open import open_rows
from stabilitycli.pipeline import run as pipeline


def _curve(rng: np.random.Generator, rows: int, kind: str) -> np.ndarray:
    """A noisy loss: a fast fall then a slow one, with bumps, steps and a NaN stretch."""
    steps = np.arange(rows, dtype=np.float64)
    if kind == "warmup":
        values = 2.5 + 6.0 * np.exp(-steps / 150) + 0.03 * rng.standard_normal(rows)
    elif kind == "heavy":  # t(3) noise under the floor's scale and over it
        values = 3.0 + 2.0 * np.exp(-steps / 400) + 0.08 * rng.standard_t(3, rows)
    else:  # a flat stretch at 0 (no floor, no noise) and a signed stretch
        values = 0.05 * rng.standard_normal(rows)
        values[rows // 4 : rows // 2] = 0.0
    values[rng.integers(0, rows, rows // 50)] += rng.uniform(0.1, 1.5, rows // 50)
    values[rows // 2 :] -= 0.4  # a step down
    values[rows // 3 : rows // 3 + 15] = np.nan
    values[rows // 5] = np.inf
    return values


@pytest.mark.parametrize("kind", ["warmup", "heavy", "flat"])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("planned", [False, True])
def test_rows_left_out_are_judged_as_the_whole_level_judges_them(kind, seed, planned) -> None:
    rng = np.random.default_rng(seed)
    rows = 3_000
    loss = _curve(rng, rows, kind)
    steps = np.arange(rows, dtype=np.int64)
    thresholds = Thresholds()
    plan = windows.plan_window(steps, 100, 8, 20)
    stats = windows.trailing_chunk_at(steps, loss, 100, plan, level_module.WINDOW_NAMES, 0)
    plan_rows = steps <= 400 if planned else None
    memory = noise_memory_of(loss, thresholds)
    fall = read_fall(loss, 0, stats["count"], False, thresholds, memory)
    whole = level_module.local_level(stats, thresholds, None, fall, plan_rows)

    picked, std = open_rows(stats, loss, plan_rows, thresholds)
    out = np.setdiff1d(np.arange(rows), picked)
    assert not whole.falling[out].any()  # a row that falls is picked
    assert whole.level[out].tobytes() == stats["mean"][out].tobytes()
    assert whole.sigma[out].tobytes() == std[out].tobytes()
    with np.errstate(invalid="ignore"):
        bar = whole.sigma * thresholds.spike_sigma + whole.level
        assert not (np.isfinite(loss[out]) & (loss[out] > bar[out])).any()
    assert out.size > rows // 4  # many rows are left out

    at = level_module.local_level_at(stats, thresholds, fall, plan_rows, picked, {})
    for name in level_module._LEVEL_FIELDS:
        a, b = getattr(whole, name)[picked], getattr(at, name)
        assert a.dtype == b.dtype, name
        assert a.tobytes() == b.tobytes(), name
    if kind == "warmup":
        assert whole.falling.any()  # the rows of a fall are exercised


def _every_row(stats, loss, planned, thresholds):
    """`open_rows` that picks every row: the local level over the whole chunk."""
    _, std = open_rows(stats, loss, planned, thresholds)
    return np.arange(loss.size), std


@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("chunk_rows", [333, 1 << 20])
def test_the_counts_at_rows_are_those_of_every_row(gaps, chunk_rows, monkeypatch) -> None:
    rng = np.random.default_rng(chunk_rows + gaps)
    rows = 2_000
    loss = _curve(rng, rows, "heavy")
    steps = np.cumsum(rng.integers(1, 4, rows)) if gaps else np.arange(rows, dtype=np.int64)
    monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
    names = level_module.WINDOW_NAMES
    for plan in (windows.plan_window(steps, 100, 8, 20), windows.WindowPlan(True, 0, 1, False, "")):
        for first, stats in windows.trailing_chunks(
            steps, loss, 100, plan, names, spike.LEVEL_AT_ROWS
        ):
            whole = windows.trailing_chunk_at(steps, loss, 100, plan, names, first // chunk_rows)
            later = tuple(name for name in names if name not in stats)
            assert set(later) == set(spike.LEVEL_AT_ROWS)
            size = whole["count"].size
            at = np.unique(np.concatenate([[0, size - 1], rng.integers(0, size, 50)]))
            chunk = (first, first + size)
            part = windows.trailing_counts_at(steps, loss, 100, plan, later, chunk, at)
            for name in later:
                assert part[name].tobytes() == whole[name][at].tobytes(), name


@pytest.mark.parametrize("kind", ["warmup", "heavy", "flat"])
@pytest.mark.parametrize("chunk_rows", [777, 1 << 20])
def test_the_spike_findings_are_those_of_the_level_at_every_row(
    kind, chunk_rows, monkeypatch
) -> None:
    rng = np.random.default_rng(7)
    rows = 4_000
    loss = _curve(rng, rows, kind)
    lr = np.minimum(np.arange(rows) / 300.0, 1.0) * 1e-3 + 1e-6  # a linear warmup
    frame = pl.DataFrame({"step": np.arange(rows), "loss": loss, "learning_rate": lr})
    monkeypatch.setattr(windows, "CHUNK_ROWS", chunk_rows)
    picked = pipeline.analyze(frame, select=["spike"])
    monkeypatch.setattr(spike, "open_rows", _every_row)
    every = pipeline.analyze(frame, select=["spike"])
    assert [f.to_dict() for f in picked.findings] == [f.to_dict() for f in every.findings]
    assert picked.findings  # something is found
