"""A JSONL log is parsed by polars with a schema taken from its first lines, or else in
blocks of 1-64 MB by pyarrow (issue 15: both far faster than a whole-file schema pass):
what a later line or block holds must never be lost or changed."""

from __future__ import annotations

import math

from stabilitycli import read

LINES = 120_000  # ~3 MB: several of pyarrow's smallest (1 MB) blocks


def _write(path, lines) -> None:
    path.write_text("\n".join(lines) + "\n")


def test_an_integer_loss_that_turns_fractional_in_a_later_block_keeps_every_value(tmp_path):
    lines = [f'{{"step": {i}, "loss": 2}}' for i in range(LINES)]
    lines += [f'{{"step": {LINES + i}, "loss": 2.5}}' for i in range(10)]
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    frame = read(log).frame
    assert frame.height == LINES + 10
    assert frame["loss"].tail(10).to_list() == [2.5] * 10


def test_a_key_first_logged_in_a_later_block_is_read(tmp_path):
    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(LINES)]
    lines += [f'{{"step": {LINES}, "loss": 2.0, "eval_loss": 1.75}}']
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    run = read(log)
    assert "eval_loss" in run.frame.columns
    assert run.frame["eval_loss"].drop_nulls().to_list() == [1.75]


def test_non_finite_tokens_in_a_later_block_stay_exactly_what_they_were(tmp_path):
    lines = [f'{{"step": {i}, "loss": 2.0}}' for i in range(LINES)]
    lines += [
        f'{{"step": {LINES}, "loss": NaN}}',
        f'{{"step": {LINES + 1}, "loss": Infinity}}',
        f'{{"step": {LINES + 2}, "loss": -Infinity}}',
    ]
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    tail = read(log).frame["loss"].tail(3).to_list()
    assert math.isnan(tail[0]) and tail[1] == math.inf and tail[2] == -math.inf


def test_a_key_written_with_a_space_before_its_colon_after_the_first_lines_is_read(tmp_path):
    # polars infers its schema from the first 100 lines and drops a key it did not see
    # there; the check that catches it counts colons, which a space cannot hide
    lines = [f'{{"step" : {i}, "loss" : 2.0}}' for i in range(500)]
    lines += ['{"step" : 500, "loss" : 2.0, "eval_loss" : 1.75}']
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    frame = read(log).frame
    assert frame["eval_loss"].drop_nulls().to_list() == [1.75]


def test_a_key_whose_first_value_comes_late_after_nulls_is_read(tmp_path):
    lines = [f'{{"step": {i}, "loss": 2.0, "eval_loss": null}}' for i in range(500)]
    lines += ['{"step": 500, "loss": 2.0, "eval_loss": 1.75}']
    log = tmp_path / "run.jsonl"
    _write(log, lines)
    assert read(log).frame["eval_loss"].drop_nulls().to_list() == [1.75]
