"""Shared by the report tests: analyse a fixture once, keep its RunData."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from tests.conftest import run_fixture


@cache
def analysed(name: str):
    """(RunData, Analysis) for a committed fixture run (cached: renderers never mutate them)."""
    from stabilitycli.core.config import Thresholds
    from stabilitycli.pipeline import run as pipeline

    data = pipeline.load_run(str(run_fixture(name)))
    return data, pipeline.analyze(data, Thresholds())


def analyse_path(path: Path):
    from stabilitycli.core.config import Thresholds
    from stabilitycli.pipeline import run as pipeline

    data = pipeline.load_run(str(path))
    return data, pipeline.analyze(data, Thresholds())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def loss_rows(fixture: str) -> list[dict]:
    return [
        json.loads(line) for line in run_fixture(fixture).read_text().splitlines() if line.strip()
    ]
