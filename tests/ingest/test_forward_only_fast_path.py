"""The canonical frame of a log whose steps only go forward skips the resume machinery
(issue 15: restarts and merging cost ~3x a plain read); it must be the very same frame,
source accounting and (empty) rewritten-rows table as the full path gives."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import stabilitycli.frame as frame_module
from stabilitycli import read
from tests.conftest import FIXTURES

LOGS = sorted(
    p
    for group in ("runs", "torch-runs", "ranks", "llmc", "tensorboard", "hf_trainer")
    for p in (FIXTURES / group).rglob("*")
    if p.is_file() and p.suffix not in (".md", ".json", ".py", ".txt") and "expected" not in p.name
)


def _read_both(path, monkeypatch):
    fast = read(path)
    with monkeypatch.context() as patch:
        patch.setattr(frame_module, "_steps_only_forward", lambda table, keys: False)
        full = read(path)
    return fast, full


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fast_path_gives_the_same_run(path, monkeypatch) -> None:
    try:
        fast, full = _read_both(path, monkeypatch)
    except Exception as err:  # a fixture that is not a log on its own (a sidecar file)
        pytest.skip(f"not readable alone: {type(err).__name__}")
    assert_frame_equal(fast.frame, full.frame)
    assert fast.source.to_dict() == full.source.to_dict()
    assert fast.abandoned.height == full.abandoned.height


def test_the_fast_path_is_taken_exactly_when_steps_only_go_forward() -> None:
    rows = pl.DataFrame({"_row": [1, 2, 3, 4], "step": [0, 1, 2, 3], "loss": [1.0, 2.0, 3.0, 4.0]})
    assert frame_module._steps_only_forward(rows, [])
    assert not frame_module._steps_only_forward(rows.with_columns(step=pl.Series([0, 1, 1, 2])), [])
    assert not frame_module._steps_only_forward(rows.with_columns(step=pl.Series([0, 2, 1, 3])), [])
    ranked = rows.with_columns(rank=pl.Series([0, 1, 0, 1]), step=pl.Series([0, 0, 1, 1]))
    assert not frame_module._steps_only_forward(ranked, [])
    # per rank, the caller hands over each rank's rows together, in file order
    by_rank = ranked.sort("rank", maintain_order=True)
    assert frame_module._steps_only_forward(by_rank, ["rank"])  # rank 1 starts at step 0 again
    back = ranked.with_columns(step=pl.Series([1, 0, 0, 1])).sort("rank", maintain_order=True)
    assert not frame_module._steps_only_forward(back, ["rank"])  # rank 0: step 1, then 0
