"""Every finding kind is a whole unit: one loop over the declared kinds checks each part.

A kind (`stabilitycli/detect/kinds/`) carries its doc (What, Why, an Example
rendered from its `fires` fixture), its evidence schema, its remedy and its
`stab explain` entry. A new kind that leaves one of them out fails here by name.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import fields
from pathlib import Path

import pytest

from stabilitycli import analyze
from stabilitycli.classify.questions import QUESTIONS, VERDICTS, fill
from stabilitycli.classify.remedies import remedy_causes
from stabilitycli.commands.explain import explain_text
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import FindingKind, Severity
from stabilitycli.core.quantities import KINDS as QUANTITY_KINDS
from stabilitycli.core.quantity_schema import By, EachItem, Spec
from stabilitycli.detect.kinds import all_kinds
from stabilitycli.detect.registry import load_rules

ROOT = Path(__file__).resolve().parents[2]
RULE_FIXTURES = ROOT / "fixtures" / "rules"
DEFAULTS = Thresholds()


def _load_generator():
    """scripts/gen_rules_doc.py is a script, not a package module."""
    spec = importlib.util.spec_from_file_location(
        "gen_rules_doc_for_kinds", ROOT / "scripts" / "gen_rules_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
KINDS = list(all_kinds().values())


def _id(kind: FindingKind) -> str:
    return kind.code


def _spec_kinds(node) -> set[str]:
    """The quantity kinds a schema entry declares (a nested dict or list: all of its entries)."""
    if isinstance(node, Spec):
        return {node.kind}
    if isinstance(node, By):
        return {s.kind for s in node.specs.values()}
    if isinstance(node, EachItem):
        return {k for sub in node.schemas.values() for k in _spec_kinds(sub)}
    return {k for sub in node.values() for k in _spec_kinds(sub)}


def test_every_code_a_rule_emits_is_a_declared_kind_and_back() -> None:
    emitted = [k for rule in load_rules().values() for k in rule.kinds]
    assert sorted(k.code for k in emitted) == sorted(all_kinds())
    assert len(emitted) == len(set(emitted)), "a kind emitted by two rules"


@pytest.mark.parametrize("kind", KINDS, ids=_id)
def test_kind_is_declared_whole(kind: FindingKind) -> None:
    rule = load_rules()[kind.rule]
    assert kind in rule.kinds and kind.section == rule.section
    assert isinstance(kind.severity, Severity)
    assert kind.question is None or kind.question in QUESTIONS
    for text in (kind.meaning, kind.todo, kind.why):
        assert fill(text, DEFAULTS).strip(), f"{kind.code}: an empty text"


@pytest.mark.parametrize("kind", KINDS, ids=_id)
def test_kind_doc_has_what_why_and_a_rendered_example(kind: FindingKind) -> None:
    doc = "\n".join(gen.kind_lines(kind, DEFAULTS))
    assert f"#### Finding `{kind.code}`" in doc
    for part in ("**What:** ", "**Why:** ", "**Example** ("):
        assert part in doc, f"{kind.code}: no {part.strip()}"
    _command, finding = gen.example(kind.code)
    assert finding.kind is kind
    assert f'"code": "{kind.code}"' in doc
    # the generated doc holds this very text
    assert doc in (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", KINDS, ids=_id)
def test_kind_has_both_fixtures_and_they_behave(kind: FindingKind) -> None:
    for expect in ("fires", "quiet"):
        folder = RULE_FIXTURES / kind.code / expect
        want = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
        assert (want["code"], want["expect"]) == (kind.code, expect)
        settings = {str(k): str(v) for k, v in want.get("set", {}).items()}
        thresholds = DEFAULTS.with_overrides(settings, "the fixture")
        found = [f for f in analyze(folder / want["input"], thresholds).findings if f.kind is kind]
        assert bool(found) == (expect == "fires"), f"{kind.code}/{expect}"


@pytest.mark.parametrize("kind", KINDS, ids=_id)
def test_kind_declares_what_every_evidence_number_is(kind: FindingKind) -> None:
    assert kind.evidence_type is not None, f"{kind.code}: no typed evidence"
    _command, finding = gen.example(kind.code)
    assert isinstance(finding.evidence, kind.evidence_type)
    # every field says what it is: a quantity kind, or None for a name, a flag or a text
    for spec in fields(kind.evidence_type):
        assert "quantity" in spec.metadata, f"{kind.code}.{spec.name}: no quantity declared"
    declared = _spec_kinds(kind.evidence)
    assert declared <= set(QUANTITY_KINDS), sorted(declared - set(QUANTITY_KINDS))
    numbers = {
        key
        for key, value in finding.evidence.items()
        if isinstance(value, (int, float, list, dict)) and not isinstance(value, bool)
    }
    undeclared = sorted(numbers - set(kind.evidence))
    assert not undeclared, f"{kind.code}: evidence keys with no quantity kind: {undeclared}"


@pytest.mark.parametrize("kind", KINDS, ids=_id)
def test_kind_has_a_remedy_and_an_explain_entry(kind: FindingKind) -> None:
    text = explain_text(kind.code, DEFAULTS)
    assert fill(kind.meaning, DEFAULTS) in text
    assert fill(kind.todo, DEFAULTS) in text
    if kind.code in VERDICTS:  # a kind that names a verdict has the verdict's remedies
        assert remedy_causes(kind.code), f"{kind.code}: a verdict with no remedy row"


def test_a_kind_crossing_a_process_is_the_same_kind_there() -> None:
    """A finding sent through a process pool keeps its kind by identity, and the basement
    (`core.model`) reaches the kinds only through the lookup their package hands it."""
    import pickle
    import subprocess
    import sys

    from stabilitycli.detect.kinds.spike import SPIKE

    load_and_compare = (
        "import pickle, sys\n"
        "import stabilitycli.core.model\n"
        "assert 'stabilitycli.detect' not in sys.modules, 'core.model imported detect'\n"
        "kind = pickle.loads(sys.stdin.buffer.read())\n"
        "from stabilitycli.detect.kinds.spike import SPIKE\n"
        "print(kind is SPIKE, kind.code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", load_and_compare],
        input=pickle.dumps(SPIKE),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["True", "spike"]


def test_every_kinds_module_is_declared() -> None:
    # the package names its modules (start-up, #40): a new one left out of MODULES would
    # leave its kinds undeclared
    import stabilitycli.detect.kinds as package

    here = Path(package.__file__).parent
    on_disk = sorted(p.stem for p in here.glob("*.py") if p.stem != "__init__")
    assert list(package.MODULES) == on_disk
