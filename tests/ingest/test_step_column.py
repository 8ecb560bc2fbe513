"""The step column: an integer log's steps are taken as they are, and only a value that
cannot be a step gets a reason (issue 15: the column of reasons cost three times the
step column on a 10M-row log, for a log that has no bad step)."""

from __future__ import annotations

import polars as pl

from stabilitycli.frame import _step_column


def test_whole_non_negative_integer_steps_need_no_column_of_faults() -> None:
    raw = pl.DataFrame({"step": pl.Series([0, 1, 2, None, 4], dtype=pl.Int32)})
    step, fault = _step_column(raw, "step", "run.jsonl")
    assert fault is None
    assert step.dtype == pl.Int64
    assert step.to_list() == [0, 1, 2, None, 4]


def test_a_negative_integer_step_is_named() -> None:
    raw = pl.DataFrame({"step": [0, 1, -5, 3]})
    step, fault = _step_column(raw, "step", "run.jsonl")
    assert fault is not None
    assert fault.to_list() == [None, None, "negative", None]
    assert step.to_list() == [0, 1, -5, 3]


def test_an_unsigned_step_past_int64_is_no_step() -> None:
    raw = pl.DataFrame({"step": pl.Series([1, 2**64 - 1], dtype=pl.UInt64)})
    step, fault = _step_column(raw, "step", "run.jsonl")
    assert step.to_list() == [1, None]  # rejected later as a record without a usable step
    assert fault is not None and fault.to_list() == [None, None]


def test_a_fractional_step_is_named() -> None:
    raw = pl.DataFrame({"step": [0.0, 1.5, 2.0]})
    step, fault = _step_column(raw, "step", "run.jsonl")
    assert fault is not None and fault.to_list() == [None, "fraction", None]
    assert step.to_list() == [0, None, 2]
