"""Sniffing by content (issue 39, item 3): a file of any name and standard input go through
the same detection, and a Python-repr dict line (`{'loss': 2.5, ...}`, what
`grep "{'loss'" train.log` leaves of a Hugging Face Trainer's stdout) is a dict line,
not a JSON line to refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.ingest import detect_format
from tests.conftest import REAL_LOGS

# the Trainer's `self.log` dict printed by `print(output)` (the `{'loss': ...}` lines)
GREPPED = (
    "{'loss': 2.5, 'grad_norm': 0.81, 'learning_rate': 0.0001, 'epoch': 0.5}\n"
    "{'loss': 2.41, 'grad_norm': 0.8, 'learning_rate': 0.0001, 'epoch': 0.6}\n"
    "{'loss': 2.33, 'grad_norm': 0.79, 'learning_rate': 0.0001, 'epoch': 0.7}\n"
    "{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.0001, 'epoch': 0.8}\n"
)
SHARED_TEXT_LOGS = sorted(
    p
    for top in (REAL_LOGS, REAL_LOGS.parent / "pasted-logs")
    if top.is_dir()
    for p in top.rglob("*")
    if p.is_file() and p.suffix in (".log", ".out", ".txt")
)


def _stdin(data: bytes) -> dict:
    result = CliRunner().invoke(app, ["analyze", "-", "-f", "json"], input=data)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.output) if result.output.lstrip().startswith("{") else {}


@pytest.mark.parametrize("name", ["train.log", "grep.txt", "trainer_stdout", "out.dat"])
def test_repr_dict_lines_are_dict_lines_under_any_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(GREPPED)
    assert detect_format(path) == "dictlog"
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [3]  # line order, said so


def test_repr_dict_lines_on_stdin() -> None:
    out = _stdin(GREPPED.encode())
    assert out["source"]["format"] == "dictlog" and out["verdict"]["code"] == "nan"


def test_json_objects_in_a_log_are_still_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.log"
    path.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": NaN}\n')
    assert detect_format(path) == "jsonl"


@pytest.mark.skipif(not SHARED_TEXT_LOGS, reason="no shared text logs beside the checkout")
@pytest.mark.parametrize("path", SHARED_TEXT_LOGS, ids=lambda p: p.name[:40])
def test_every_shared_text_log_gives_one_verdict_by_path_other_name_and_stdin(
    tmp_path: Path, path: Path
) -> None:
    by_path = _stdin_like(path, tmp_path)
    other = tmp_path / (path.stem + (".txt" if path.suffix != ".txt" else ".log"))
    shutil.copyfile(path, other)
    assert _stdin_like(other, tmp_path) == by_path
    bare = tmp_path / "stdout"  # no extension at all, as `kubectl logs > stdout` leaves it
    shutil.copyfile(path, bare)
    assert _stdin_like(bare, tmp_path) == by_path
    piped = _stdin(path.read_bytes())
    assert (piped.get("verdict", {}).get("code"), piped.get("source", {}).get("format")) == (
        by_path
    )


def _stdin_like(path: Path, tmp_path: Path) -> tuple[str | None, str | None]:
    """(verdict code, reader) of `stab analyze PATH -f json`, (None, None) on an input error."""
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if not result.output.lstrip().startswith("{"):
        return None, None
    out = json.loads(result.output)
    return out["verdict"]["code"], out["source"]["format"]
