"""docs/rules.md is exactly what scripts/gen_rules_doc.py writes from the code now, and it
names every rule, finding code, threshold, question, verdict, cause and remedy."""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import fields
from pathlib import Path

import pytest

from stabilitycli.classify.questions import (
    cause_texts,
    finding_texts,
    question_next,
    questions,
    verdicts,
)
from stabilitycli.classify.remedies import fill_remedy, remedy_causes, remedy_rows
from stabilitycli.core.config import Thresholds
from stabilitycli.detect import registry
from stabilitycli.detect.registry import Rule, RuleResult, load_rules

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "rules.md"


def _load_generator():
    """scripts/gen_rules_doc.py is a script, not a package module."""
    spec = importlib.util.spec_from_file_location(
        "gen_rules_doc", ROOT / "scripts" / "gen_rules_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
DEFAULTS = Thresholds()


def _part(doc: str, start: str, end: str | None) -> str:
    """The doc from the line `start` up to the line `end` (or the end of the doc)."""
    lines = doc.splitlines()
    first = lines.index(start)
    last = lines.index(end, first + 1) if end else len(lines)
    return "\n".join(lines[first:last])


def _block(part: str, heading: str) -> str:
    """One `### `/`#### ` entry of a part, up to the next heading of any level."""
    lines = part.splitlines()
    first = lines.index(heading)
    rest = [i for i in range(first + 1, len(lines)) if lines[i].startswith("#")]
    return "\n".join(lines[first : rest[0] if rest else len(lines)])


def _fake_rule(code: str, doc: str) -> Rule:
    def run(view, thresholds, facts) -> RuleResult:
        return RuleResult()

    run.__doc__ = doc
    return Rule(code, "2", "a made-up rule", (), run, reads=("spike_sigma",))


def test_doc_is_what_the_generator_writes_now() -> None:
    written, fresh = DOC.read_text(encoding="utf-8"), gen.render()
    diff = list(difflib.unified_diff(written.splitlines(), fresh.splitlines(), lineterm="", n=0))
    assert not diff, f"docs/rules.md is stale: run `{gen.REGENERATE}`\n" + "\n".join(diff[:30])


def test_a_changed_threshold_makes_the_doc_stale(tmp_path, capsys) -> None:
    out = tmp_path / "rules.md"
    out.write_text(gen.render(Thresholds(spike_sigma=4.0)), encoding="utf-8")
    assert gen.main(["--check", "--out", str(out)]) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "stale" in message and gen.REGENERATE in message
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0
    assert "mu + 3 sigma of the trailing 100 steps" in out.read_text(encoding="utf-8")


def test_a_new_rule_makes_the_doc_stale(monkeypatch) -> None:
    load_rules()  # every real rule registered before the made-up one joins them
    doc = "Made up.\n\nWhat it detects: nothing.\n\nWhy it matters: it shows the check works."
    monkeypatch.setitem(registry.RULES, "made-up-rule", _fake_rule("made-up-rule", doc))
    fresh = gen.render()
    assert "### `made-up-rule` (section 2)" in fresh
    assert fresh != DOC.read_text(encoding="utf-8")


def test_private_names_never_reach_the_doc(monkeypatch) -> None:
    load_rules()
    pointer = (
        "What it detects: a sum (see\n`_helper_sum`), nothing else.\n\nWhy it matters: it does."
    )
    monkeypatch.setitem(registry.RULES, "pointer-rule", _fake_rule("pointer-rule", pointer))
    assert "_helper_sum" not in gen.render()
    assert "**What it detects:** a sum, nothing else." in gen.render()
    named = "What it detects: what `_private_thing` counts.\n\nWhy it matters: it does."
    monkeypatch.setitem(registry.RULES, "private-rule", _fake_rule("private-rule", named))
    with pytest.raises(gen.PrivateNameError, match="_private_thing"):
        gen.render()


def test_the_doc_names_every_rule_and_what_it_emits_and_reads() -> None:
    doc = DOC.read_text(encoding="utf-8")
    rules_part = _part(doc, "## Rules", "## The decision tree")
    meanings = finding_texts(DEFAULTS)
    for rule in load_rules().values():
        block = _block(rules_part, f"### `{rule.code}` (section {rule.section})")
        assert gen.escape(rule.summary_for(DEFAULTS)) in block, rule.code
        rows = [line for line in block.splitlines() if line.startswith("| `")]
        listed = {row.split("`")[1] for row in rows}
        for code in rule.emits:
            assert code in listed, (rule.code, code)
            if code in meanings:
                meaning, todo = (gen.escape(text, in_table=True) for text in meanings[code])
                assert f"| `{code}` | {meaning} | {todo} |" in block, (rule.code, code)
        for name in rule.reads:
            assert f"| `{name}` | {getattr(DEFAULTS, name)!r} |" in block, (rule.code, name)
        assert "**What it detects:**" in block and "**Why it matters:**" in block, rule.code
    thresholds_part = _part(doc, "## Thresholds", None)
    for spec in fields(Thresholds):
        assert f"| `{spec.name}` | {getattr(DEFAULTS, spec.name)!r} |" in thresholds_part


def test_the_doc_names_every_question_verdict_cause_and_remedy() -> None:
    doc = DOC.read_text(encoding="utf-8")
    tree = _part(doc, "## The decision tree", "## Thresholds")
    answers = question_next(DEFAULTS)
    for qid, text in questions(DEFAULTS).items():
        row = f"| {qid} | {gen.escape(text, in_table=True)} |"
        if qid in answers:
            row += f" {gen.escape(answers[qid], in_table=True)} |"
        assert row in tree, qid
    verdicts_part = _part(tree, "### Verdicts", "### Causes")
    for code, (_section, severity, text) in verdicts(DEFAULTS).items():
        block = _block(verdicts_part, f"#### `{code}`")
        assert f"Severity: {severity}." in block and gen.escape(text) in block, code
        for cause in remedy_causes(code):
            for remedy in remedy_rows(code, cause):
                assert f"- {gen.escape(fill_remedy(remedy, DEFAULTS))}" in block, (code, cause)
    causes_part = _part(tree, "### Causes", None)
    for cause, text in cause_texts(DEFAULTS).items():
        assert gen.escape(text) in _block(causes_part, f"#### `{cause}`"), cause
    for code in verdicts(DEFAULTS):
        for cause in filter(None, remedy_causes(code)):
            assert f"[`{code}`](#verdict-{code})" in _block(causes_part, f"#### `{cause}`"), (
                code,
                cause,
            )


def test_the_doc_has_no_private_python_names() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert re.findall(r"(?<![\w/.])_[A-Za-z]\w*", doc) == []
