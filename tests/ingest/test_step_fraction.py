"""Steps written as `N/M` text under a step-like key (issue 39, item 2).

ms-swift writes `"global_step/max_steps": "8280/11043"` on every line of its
`logging.jsonl` (and prints the same dict, as a Python repr, to stdout) and no numeric
step: the step is N, the planned length M is kept in a note. The records here are
written as ms-swift writes them: `json.dumps` of its log dict for the JSONL, `repr` of
the same dict for stdout (the keys are those of ms-swift's trainer log).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from stabilitycli import analyze, read
from stabilitycli.cli import app

NAN_STEP = 8280
PLANNED = 11043


def _swift_logs(steps: range, planned: int = PLANNED) -> list[dict]:
    return [
        {
            "loss": math.nan if step == NAN_STEP else round(1.6 - 0.001 * i, 4),
            "grad_norm": 0.8 + 0.01 * (i % 3),
            "learning_rate": 1e-5,
            "memory(GiB)": 60.12,
            "train_speed(iter/s)": 0.121,
            "epoch": 2.25,
            "global_step/max_steps": f"{step}/{planned}",
            "percentage": f"{100 * step / planned:.2f}%",
            "elapsed_time": "1d 6h 54m 2s",
            "remaining_time": "10h 2m 11s",
        }
        for i, step in enumerate(steps)
    ]


def _jsonl(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "logging.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN written bare
    return path


def _nan_steps(result) -> list[int]:
    return [f.step for f in result.findings if f.code == "nan"]


def test_ms_swift_jsonl_nan_is_at_its_step(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, _swift_logs(range(8200, 8301, 5)))
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert _nan_steps(result) == [NAN_STEP]  # it was step 16, the row's order
    run = read(path)
    assert run.frame["step"].to_list() == list(range(8200, 8301, 5))
    assert not any("order of metric records" in w for w in run.source.warnings)
    note = next(n for n in run.source.notes if "N/M" in n)
    assert "'global_step/max_steps'" in note and f"M = {PLANNED}" in note
    assert "global_step/max_steps" not in run.frame.columns  # an axis, not a metric


def test_ms_swift_stdout_dicts_and_stdin(tmp_path: Path) -> None:
    """The same dicts as ms-swift prints them (a Python repr per line, tqdm bars between)."""
    lines = []
    for record in _swift_logs(range(8200, 8301, 5)):
        lines.append(f"Train:  75%|#######5  | {record['global_step/max_steps']} [1:00<0:20]")
        lines.append(repr(record))
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    result = analyze(path)
    assert result.source.format == "dictlog"
    assert _nan_steps(result) == [NAN_STEP]
    assert any(f"M = {PLANNED}" in n for n in result.source.notes)
    piped = CliRunner().invoke(app, ["analyze", "-", "-f", "json"], input=path.read_bytes())
    assert piped.exit_code == 1, piped.output  # the NaN; a crash would also be 1, so:
    assert isinstance(piped.exception, SystemExit)
    out = json.loads(piped.output)
    assert out["verdict"]["code"] == "nan"
    assert [f["step"] for f in out["findings"] if f["code"] == "nan"] == [NAN_STEP]


def test_a_changed_planned_length_is_named(tmp_path: Path) -> None:
    """A resume with a longer schedule: both planned lengths are said."""
    records = _swift_logs(range(8200, 8251, 5)) + _swift_logs(range(8255, 8301, 5), 12000)
    run = read(_jsonl(tmp_path, records))
    note = next(n for n in run.source.notes if "N/M" in n)
    assert f"{PLANNED}, 12000" in note


@pytest.mark.parametrize("key", ["step", "iter"])
def test_n_over_m_under_a_plain_step_key(tmp_path: Path, key: str) -> None:
    path = tmp_path / "m.jsonl"
    rows = [{key: f"{s}/500", "loss": 2.0 - s / 1000} for s in range(10, 200, 10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = read(path)
    assert run.frame["step"].to_list() == list(range(10, 200, 10))
    assert any("M = 500" in n for n in run.source.notes)


def test_other_text_under_a_step_like_key_is_no_step(tmp_path: Path) -> None:
    """Only `N/M` is read: `epoch 1 of 3` under `step` leaves the rows without a step,
    and each is rejected with its reason, as before."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": "first", "loss": 2.0}\n{"step": 2, "loss": 1.9}\n')
    run = read(path)
    assert run.frame.filter(pl.col("step") == 2)["loss"].to_list() == [1.9]
    assert not any("N/M" in n for n in run.source.notes)


def test_n_over_m_in_a_pandas_csv(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "log.csv"
    # pandas writes NaN as an empty cell (no value) unless told otherwise
    pd.DataFrame(_swift_logs(range(8200, 8301, 5))).to_csv(path, index=False, na_rep="nan")
    result = analyze(path)
    assert result.source.format == "tabular"
    assert _nan_steps(result) == [NAN_STEP]
    assert any(f"M = {PLANNED}" in n for n in result.source.notes)
