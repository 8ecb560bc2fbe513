"""Quadratic ramps that start mid-decay on a cosine LM curve with AR(1) noise (#36), written
as pandas CSV: dated within 5% of their length, logged every step and every 100, and the
finding says the range of starts that fit as well."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from stabilitycli import analyze
from tests.detect.test_divergence_lr_clock import lm_run


def divergence_in(frame: pl.DataFrame, path: Path):
    frame.to_pandas().to_csv(path, index=False)
    found = [f for f in analyze(path).findings if f.code == "divergence"]
    assert found, "the ramp was not found"
    return found[0]


@pytest.mark.parametrize("interval", [1, 100])
@pytest.mark.parametrize("rise", [0.25, 0.5])
def test_a_ramp_starting_mid_decay_is_dated_within_five_percent(
    interval: int, rise: float, tmp_path: Path
) -> None:
    frame, onset, length = lm_run(30 + interval + int(100 * rise), interval, rise, 0.85)
    f = divergence_in(frame, tmp_path / "run.csv")
    assert abs(f.step - onset) <= 0.05 * length, (f.step, onset, length)


def test_the_finding_says_which_starts_fit_as_well(tmp_path: Path) -> None:
    frame, _, _ = lm_run(41, 1, 0.5, 0.8)
    f = divergence_in(frame, tmp_path / "run.csv")
    evidence = f.to_dict()["evidence"]
    lo, hi = evidence["onset_range_steps"]
    first, last = evidence["onset_fit_steps"]
    assert first <= lo <= f.step <= hi <= last
    if lo < hi:
        assert f"a rise from any step in {lo}-{hi} fits as well" in f.message
