"""Shared test helpers: where fixtures live, and running the CLI like a user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
RUNS = FIXTURES / "runs"
REAL_LOGS = ROOT.parent / "shared" / "real-logs"


def run_fixture(name: str) -> Path:
    folder = RUNS / name
    matches = sorted(folder.glob("run.jsonl*"))
    assert matches, f"no run.jsonl in {folder}"
    return matches[0]


def expected(name: str) -> dict:
    return json.loads((RUNS / name / "expected.json").read_text())


def all_runs() -> list[str]:
    return sorted(p.parent.name for p in RUNS.glob("*/expected.json"))


@pytest.fixture
def cli():
    """Invoke `stab` in-process; a crash must never masquerade as exit 1."""
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, [str(a) for a in args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    return invoke


@pytest.fixture(autouse=True)
def _no_terminal_size_from_the_runner(monkeypatch):
    """Every test starts without COLUMNS and LINES, as in a shell that does not export them.

    pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, and
    `stab` sizes a piped terminal output by COLUMNS when it is set: without this, a long
    temporary path wraps on a worker and not in a serial run. A test that means a width
    sets one itself."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


def _written_beside_the_checkout() -> set[Path]:
    """The files `report` and `postmortem` write by default, found in the checkout's root."""
    return {*ROOT.glob("*.postmortem.md"), *ROOT.glob("*.stab.html")}


@pytest.fixture(autouse=True, scope="session")
def _tests_write_nothing_into_the_checkout():
    """`report` and `postmortem` write into the current directory unless told `-o`: a test
    that forgets `-o -` (or a tmp_path) leaves its file in the checkout, and its assertions
    read only the `wrote ...` line. Fail the session instead."""
    before = _written_beside_the_checkout()
    yield
    new = sorted(p.name for p in _written_beside_the_checkout() - before)
    assert not new, f"tests wrote into the checkout: {', '.join(new)}"
