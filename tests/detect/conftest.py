"""Fixtures of the rule tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench_module(name: str):
    """A module of benchmarks/, imported from its folder (a script's module, not a
    package), the folder on the path while the tests use it."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def synth():
    """The LM families' generator (benchmarks/_dq_lm_synth)."""
    yield from _bench_module("_dq_lm_synth")


@pytest.fixture(scope="module")
def grid_synth():
    """The #11 grid's generator (benchmarks/_dq_synth)."""
    yield from _bench_module("_dq_synth")
