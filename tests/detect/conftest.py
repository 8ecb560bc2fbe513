"""Fixtures of the rule tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def synth():
    """benchmarks/_dq_lm_synth, imported from its folder (a script's module, not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_dq_lm_synth")
    finally:
        sys.path.remove(str(BENCH))
