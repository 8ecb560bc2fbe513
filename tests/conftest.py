"""Shared test helpers: where fixtures live, and running the CLI like a user."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
RUNS = FIXTURES / "runs"
REAL_LOGS = ROOT.parent / "shared" / "real-logs"

# The test files that take longest (test-seconds summed per file by scripts/test_file_times.py
# from a `-n auto --durations=0` run, 2026-12-06), longest first: they are collected first, and
# with `--dist loadfile --no-loadscope-reorder` (pyproject.toml) xdist hands files to the
# workers in collection order. Its default order (most tests first) hands out
# test_real_job_writers.py (3 tests, ~160 s) last: with three workers, one runs it alone at
# the end (replaying the scheduler on the measured times: 696 s against 640 s).
LONGEST_FILES = (
    "tests/watch/test_equivalence.py",
    "tests/ingest/test_fuzz_readers.py",
    "tests/pipeline/test_ray_engine.py",
    "tests/watch/test_real_job_writers.py",
    "tests/report/test_html_every_fixture.py",
    "tests/integration/test_action.py",
    "tests/ingest/test_mlflow_server.py",
    "tests/detect/test_divergence_memory.py",
    "tests/detect/test_properties.py",
    "tests/detect/test_ranks.py",
    "tests/detect/test_overflow_ledger.py",
    "tests/ingest/test_roundtrip_properties.py",
    "tests/report/test_console.py",
    "tests/integration/test_read_only.py",
    "tests/watch/test_each_run.py",
    "tests/report/test_html.py",
    "tests/commands/test_medium_snapshots.py",
    "tests/ingest/test_formats_agree.py",
    "tests/detect/test_rule_blocks.py",
    "tests/ingest/test_object_store.py",
    "tests/pipeline/test_results_store.py",
    "tests/detect/ranks/test_drift_onset.py",
    "tests/pipeline/test_engine_option.py",
    "tests/core/test_quantities.py",
    "tests/watch/test_real_job.py",
    "tests/watch/sources/test_mlflow_server.py",
)


def run_fixture(name: str) -> Path:
    folder = RUNS / name
    matches = sorted(folder.glob("run.jsonl*"))
    assert matches, f"no run.jsonl in {folder}"
    return matches[0]


def expected(name: str) -> dict:
    return json.loads((RUNS / name / "expected.json").read_text())


def all_runs() -> list[str]:
    return sorted(p.parent.name for p in RUNS.glob("*/expected.json"))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker a core, and one more. A good part of the suite waits rather than
    computes (a server starting, a watched job logging at its own pace, sqlite commits, a
    subprocess's start-up): on 2 cores, 2 workers left ~330 of 1234 core-seconds idle. The
    extra worker runs a file while another waits. PYTEST_XDIST_AUTO_NUM_WORKERS still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    if hasattr(os, "sched_getaffinity"):  # the cores this process may run on (Linux)
        return len(os.sched_getaffinity(0)) + 1
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FILES first, in its order; every other file after them in the
    order collected, and each file's tests in their own order (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """The spill's temp folder, watched: every file in it must be gone when read returns."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def mapped_spill_columns() -> int:
    """How many of the spill's column files (`frame.spill`) this process maps now."""
    with open("/proc/self/maps") as maps:
        return sum("stab-spill-" in line for line in maps)


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
