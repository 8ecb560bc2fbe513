"""Line numbers where they exist (#37): a finding in a line-based log points at the file
line of its onset in the GitHub annotation and the concise format; a log without lines
(Parquet) names the file only. Logs written by real writers at test time."""

from __future__ import annotations

import json
import math
import re

import pytest

from stabilitycli import analyze
from stabilitycli.report import concise, github

NAN_STEP = 200


def _losses(n: int = 300) -> list[float]:
    return [math.nan if s == NAN_STEP else 4.0 / (1 + s / 50) + 0.01 * (s % 3) for s in range(n)]


def _line_of_step(path, pattern: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if re.search(pattern, line))


def _nan_finding(result):
    return next(f for f in result.findings if f.code == "nan")


def test_jsonl_points_at_the_line_of_the_onset(tmp_path) -> None:
    log = tmp_path / "metrics.jsonl"
    with log.open("w") as out:
        for step, loss in enumerate(_losses()):
            # json.dumps writes NaN as the bare token Python's json reads back
            out.write(json.dumps({"step": step, "loss": loss}) + "\n")
    result = analyze(log)
    line = _line_of_step(log, rf'"step": {NAN_STEP},')
    assert result.line_of(_nan_finding(result)) == line == NAN_STEP + 1
    assert f",line={line},title=stab nan at step {NAN_STEP}::step {NAN_STEP}: " in github.render(
        result
    )
    assert f"{log}:{line}: nan error step {NAN_STEP}: " in concise.render(result)


def test_a_text_log_points_at_its_line_past_the_preamble(tmp_path) -> None:
    log = tmp_path / "train.log"
    preamble = ["starting training", "config: lr=6e-4 batch=12", ""]
    body = [f"step {s}: train loss {v:.4f}, lr 6.0e-04" for s, v in enumerate(_losses())]
    log.write_text("\n".join(preamble + body) + "\n")
    result = analyze(log)
    line = _line_of_step(log, rf"^step {NAN_STEP}:")
    assert result.line_of(_nan_finding(result)) == line == NAN_STEP + 1 + len(preamble)
    assert f"{log}:{line}: nan error step {NAN_STEP}: " in concise.render(result)


def test_csv_written_by_pandas_counts_its_header_line(tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    log = tmp_path / "metrics.csv"
    pd.DataFrame({"step": range(300), "loss": _losses()}).to_csv(log, index=False, na_rep="NaN")
    result = analyze(log)
    assert result.line_of(_nan_finding(result)) == _line_of_step(log, rf"^{NAN_STEP},") == 202


def test_parquet_has_no_lines_and_names_the_file_only(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    log = tmp_path / "metrics.parquet"
    pq.write_table(pa.table({"step": list(range(300)), "loss": _losses()}), log)
    result = analyze(log)
    assert result.line_of(_nan_finding(result)) is None
    annotations = github.render(result)
    assert "line=" not in annotations and f"title=stab nan at step {NAN_STEP}::" in annotations
    assert f"{log}: nan error step {NAN_STEP}: " in concise.render(result)


def test_a_resumed_log_points_at_the_line_kept(tmp_path) -> None:
    log = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "loss": 3.0 - s / 500} for s in range(150)]
    rows += [{"step": s, "loss": 3.0 - s / 500} for s in range(100, 300)]  # resumed at 100
    rows[150 + NAN_STEP - 100]["loss"] = math.nan
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = analyze(log)
    assert result.line_of(_nan_finding(result)) == 150 + NAN_STEP - 100 + 1
