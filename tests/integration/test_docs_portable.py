"""Committed docs and benchmark reports name no path of the machine that wrote them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# an absolute path into a place that exists on one machine only
MACHINE_PATH = re.compile(r"(?<![\w.$~])/(?:tmp|work|root|home|Users|private/var)/[\w.-]")


def _committed_texts() -> list[Path]:
    # CONTRIBUTING's example commands and the CHANGELOG's history name /tmp on purpose
    return sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


@pytest.mark.parametrize("path", _committed_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths(path: Path) -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not hits, "machine paths in a committed doc:\n" + "\n".join(hits)


def test_portable_rewrites_machine_paths() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _paths import portable

    written = portable(
        f"python benchmarks/run.py --out {ROOT}/docs/x.md --real-logs "
        f"{ROOT.parent / 'shared'}/real-logs"
    )
    assert written == "python benchmarks/run.py --out ./docs/x.md --real-logs ../shared/real-logs"
    assert not MACHINE_PATH.search(portable("--json /tmp/s30/bench.json"))
