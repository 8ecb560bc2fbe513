"""Per finding code: a log where it must fire, and a near miss where it must stay quiet.

The fixtures under fixtures/rules/<code>/{fires,quiet}/ are written by
scripts/make_rule_fixtures.py; each expected.json names the input, the code,
and for `fires` the step (rank, severity) the finding must carry. Every code a
registered rule can emit, and every per-rank code, must have both folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stabilitycli import analyze
from stabilitycli.core.settings import load_settings
from stabilitycli.detect.registry import load_rules
from tests.conftest import FIXTURES

RULE_FIXTURES = FIXTURES / "rules"
KINDS = ("fires", "quiet")


def rank_codes() -> set[str]:
    from stabilitycli.detect.kinds.ranks import RANK_KINDS

    return {kind.code for kind in RANK_KINDS}


def every_code() -> set[str]:
    return {c for r in load_rules().values() for c in r.emits} | rank_codes()


def cases() -> list[Path]:
    return sorted(p.parent for p in RULE_FIXTURES.glob("*/*/expected.json"))


def _findings(path: Path, settings: dict[str, str], code: str) -> tuple[list, list[str]]:
    """Findings of `code` as `stab analyze PATH --set ...` reports them, and every code seen."""
    result = analyze(path, load_settings(path, settings)[0])
    return [f for f in result.findings if f.code == code], sorted({f.code for f in result.findings})


def _id(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


@pytest.mark.parametrize("folder", cases(), ids=_id)
def test_rule_fixture(folder: Path) -> None:
    want = json.loads((folder / "expected.json").read_text())
    code, expect = want["code"], want["expect"]
    # the folder layout and the file must agree, or a copied folder tests the wrong thing
    assert (folder.parent.name, folder.name) == (code, expect)
    path = folder / want["input"]
    settings = {k: str(v) for k, v in want.get("set", {}).items()}
    found, seen = _findings(path, settings, code)
    if expect == "fires":
        assert found, f"{code} did not fire ({want['why']}); findings: {seen}"
        _check_where(found, want, want.get("step"))
        if "severity" in want:
            assert want["severity"] in [str(f.severity) for f in found]
        return
    assert not found, f"{code} fired on its near miss ({want['why']}): {found[0].message}"
    if "fires_with" in want:
        # the same log with the bar moved past its event fires there: a near miss
        moved = {**settings, **{k: str(v) for k, v in want["fires_with"].items()}}
        found, seen = _findings(path, moved, code)
        assert found, f"{code} silent even with --set {moved}; findings: {seen}"
        _check_where(found, want, want.get("event_step"))


def _check_where(found: list, want: dict, step: int | None) -> None:
    if step is not None:
        tolerance = want.get("step_tolerance", 0)
        steps = [f.step for f in found]
        assert any(s is not None and abs(s - step) <= tolerance for s in steps), (
            f"{want['code']} at {steps}, expected {step} +- {tolerance}"
        )
    if "rank" in want:
        assert want["rank"] in [f.rank for f in found]


def test_every_finding_code_has_a_fires_and_a_quiet_fixture() -> None:
    missing = [
        f"{code}/{kind}"
        for code in sorted(every_code())
        for kind in KINDS
        if not (RULE_FIXTURES / code / kind / "expected.json").is_file()
    ]
    assert not missing, f"add fixtures (scripts/make_rule_fixtures.py) for: {missing}"


def test_no_fixture_for_a_code_no_rule_emits() -> None:
    stale = sorted({p.parent.name for p in cases()} - every_code())
    assert not stale, f"fixtures for codes no rule emits: {stale}"
