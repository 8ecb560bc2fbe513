"""Golden snapshots of what `stab analyze` prints, with syrupy.

Six bundled runs of six different verdicts, each in every output a user or CI reads
(terminal at 100 columns, concise, Markdown, JUnit, GitHub annotations, JSON), and the
exit status with stderr, here and for two refused inputs. A change to any number,
sentence or layout fails here with a diff of what changed; when the change is meant:

    .venv/bin/python -m pytest tests/commands/test_snapshots.py --snapshot-update

and review the diff of tests/commands/__snapshots__/test_snapshots.ambr before committing.

The CLI runs in-process from the repository root on relative paths; whatever could still
differ between machines is normalised first (`_normalised`): the repository's absolute
path, wall-clock times and the version, were any of them printed.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, RUNS, expected, run_fixture

# one run per verdict, each of them a different exit path through the tree
FIXTURES = (
    "healthy-low-noise",
    "spike-long-tail",
    "spike-persistent",
    "divergence-grad-norm",
    "nan-fp16-overflow",
    "loss-scale-collapsed",
)
FORMATS = ("terminal", "concise", "markdown", "junit", "github", "json")
WIDTH = "100"

# keys a JSON document may carry that depend on when or with what it ran, never on the log
_VOLATILE_KEY = re.compile(r"elapsed|^timings?$|timestamp|generated_at|wall_seconds|^version$")
# the same in JUnit's attributes (time="0.12", timestamp="...", hostname="...")
_VOLATILE_ATTR = re.compile(r' (time|timestamp|hostname)="[^"]*"')


def _relative(fixture: str) -> str:
    return run_fixture(fixture).relative_to(ROOT).as_posix()


@functools.cache
def _run(*args: str) -> tuple[int, str, str]:
    """`stab <args>` from the repository root: (exit status, stdout, stderr)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        env = {"COLUMNS": WIDTH, "NO_COLOR": "1", "STAB_DEBUG": None}
        from stabilitycli.cli import app

        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(cwd)
    # a crash in CliRunner is exit 1 too, our "instability found": never let it pass
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _text(text: str) -> str:
    text = text.replace(ROOT.as_posix(), "<repo>").replace(str(ROOT), "<repo>")
    text = text.replace(f"stab {_version()}", "stab <version>")
    return _VOLATILE_ATTR.sub("", text)


@functools.cache
def _version() -> str:
    import stabilitycli

    return stabilitycli.__version__


def _data(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items() if not _VOLATILE_KEY.search(k)}
    if isinstance(value, list):
        return [_data(v) for v in value]
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float):
        # the last bits of a float computed with numpy may differ between CPUs
        return float(f"{value:.12g}")
    return value


def _normalised(output: str, stdout: str) -> Any:
    if output == "json":
        return _data(json.loads(stdout))
    return _text(stdout)


@pytest.mark.parametrize("output", FORMATS)
@pytest.mark.parametrize("fixture", FIXTURES)
def test_output(fixture: str, output: str, snapshot) -> None:
    _, stdout, _ = _run("analyze", _relative(fixture), "--format", output)
    assert _normalised(output, stdout) == snapshot


@pytest.mark.parametrize("fixture", FIXTURES)
def test_exit_status_and_stderr(fixture: str, snapshot) -> None:
    code, _, stderr = _run("analyze", _relative(fixture), "--format", "terminal")
    assert {"exit_status": int(code), "stderr": _text(stderr)} == snapshot
    # every format exits the same way: the status is the verdict's, not the renderer's
    for output in FORMATS:
        assert _run("analyze", _relative(fixture), "--format", output)[0] == code, output


REFUSED = {
    "missing-file": ("analyze", "fixtures/runs/no-such-run/run.jsonl"),
    "bad-dtype": ("analyze", "--dtype", "fp61", "fixtures/runs/plateau/run.jsonl"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_input_exit_status_and_stderr(case: str, snapshot) -> None:
    code, stdout, stderr = _run(*REFUSED[case])
    assert {"exit_status": int(code), "stdout": stdout, "stderr": _text(stderr)} == snapshot


def test_the_six_runs_are_six_verdicts() -> None:
    # the choice above stays a spread: one fixture per verdict, none of them renamed away
    verdicts = {expected(name)["verdict"] for name in FIXTURES}
    assert len(verdicts) == len(FIXTURES)
    assert all((RUNS / name).is_dir() for name in FIXTURES)


def test_normalising_removes_what_varies_between_machines() -> None:
    document = {
        "path": f"{ROOT}/fixtures/runs/x/run.jsonl",
        "elapsed_seconds": 1.5,
        "timings": {"read": 0.1},
        "version": _version(),
        "schema": "stab.analysis/1",
        "z": 29.400000000000002,
        "step_time": 0.25,
    }
    assert _data(document) == {
        "path": "<repo>/fixtures/runs/x/run.jsonl",
        "schema": "stab.analysis/1",
        "z": 29.4,
        "step_time": 0.25,
    }
    xml = f'<testsuite name="stab" time="0.12" timestamp="2026-12-01T19:00:00" tests="3">{ROOT}'
    assert _text(xml) == '<testsuite name="stab" tests="3"><repo>'
