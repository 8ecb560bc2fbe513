"""A bug is never dressed as bad input (issue 33, item 3): an unexpected exception inside a
reader is an internal error that says it is a bug in stab (exit 2, `--debug` for the
traceback), while what a decoder raises on damaged bytes stays an input error."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from tests.conftest import run_fixture


def _raising(err: BaseException):
    def read(path, options):
        raise err

    return read


@pytest.mark.parametrize(
    "err",
    [
        KeyError("step"),
        TypeError("int() argument must be a string, not 'NoneType'"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        ValueError("a reader's own slip"),
    ],
)
def test_an_unexpected_exception_in_a_reader_is_an_internal_error(monkeypatch, err) -> None:
    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(err))
    result = CliRunner().invoke(app, ["analyze", str(run_fixture("plateau"))])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1, result.stderr
    assert f"internal error {type(err).__name__}" in line
    assert "this is a bug in stab" in line and "--debug" in line
    assert "cannot parse" not in line  # never worded as the input's fault


def test_debug_gives_the_traceback_of_a_reader_bug(monkeypatch) -> None:
    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(KeyError("step")))
    result = CliRunner().invoke(app, ["--debug", "analyze", str(run_fixture("plateau"))])
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert "this is a bug in stab" in result.stderr.splitlines()[-1]


def test_a_reader_bug_in_a_sweep_is_that_run_s_internal_error(monkeypatch, tmp_path) -> None:
    import shutil

    shutil.copy(run_fixture("plateau"), tmp_path / "run.jsonl")
    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(KeyError("step")))
    result = CliRunner().invoke(app, ["analyze", "-r", str(tmp_path), "-q", "--jobs", "1"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert "internal error KeyError" in result.stderr
    assert "this is a bug in stab" in result.stderr
