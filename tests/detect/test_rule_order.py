"""The rules run in one order, whichever rule module a caller happened to import first:
the order decides the order of findings with equal severity and step, and of the
coverage lists, so it must not depend on what else was imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stabilitycli.detect.registry import RULE_MODULES

ORDER = "from stabilitycli.detect.registry import load_rules; print(' '.join(load_rules()))"


def _order(first_import: str | None) -> str:
    code = (f"import stabilitycli.detect.{first_import}; " if first_import else "") + ORDER
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


@pytest.mark.slow  # ~2 s: one Python subprocess per rule module
def test_importing_a_rule_module_first_does_not_change_the_run_order() -> None:
    plain = _order(None)
    assert len(plain.split()) >= len(RULE_MODULES)
    for module in ("throughput", "divergence", "nan"):
        assert _order(module) == plain, module
