"""Issue 16 item 1: `stab explain` states every rule's numbers as the thresholds in force
(`--set`, a config file), never the defaults written into a docstring; and `stab explain
<TAB>` completes every code it accepts."""

from __future__ import annotations

import re
from dataclasses import asdict, fields
from string import Formatter

import pytest

from stabilitycli.commands.explain import complete_code, explain_text, plain_words
from stabilitycli.core.config import Thresholds
from stabilitycli.detect.registry import Rule, load_rules

DEFAULTS = Thresholds()
RULES = load_rules()

# rules whose docstrings their owner is converting to templates (#16); remove once done
PENDING: set[str] = set()


def _spaced(text: str) -> str:
    """Any run of whitespace as one space: `stab explain` refills a docstring's lines."""
    return re.sub(r"\s+", " ", text)


def _overridden(name: str) -> str:
    """A value that reads differently from the default in every format the docs use."""
    default = getattr(DEFAULTS, name)
    if isinstance(default, float) and 0 < default < 1 and default * 3 >= 1:
        return f"{(1 + default) / 2:g}"  # still a fraction: 0.5 -> 0.75 (50% -> 75%)
    return f"{default * 3 + (1 if isinstance(default, int) else 0):g}"


def _placeholders(rule: Rule) -> list[tuple[str, str, str, str]]:
    """(threshold, format spec, the text just before it, just after it) per `{field}`."""
    parts = list(Formatter().parse(rule.doc))
    found = []
    for i, (before, name, spec, _conversion) in enumerate(parts):
        if name is None:
            continue
        after = parts[i + 1][0] if i + 1 < len(parts) else ""
        found.append((name, spec or "", _spaced(before)[-12:], _spaced(after)[:12]))
    return found


STATED = [
    pytest.param(code, name, spec, before, after, id=f"{code}:{name}:{before}|{after}")
    for code, rule in RULES.items()
    for name, spec, before, after in _placeholders(rule)
]


def test_rule_docs_state_thresholds() -> None:
    # the check below must have something to check: most rules state a threshold
    assert len({code for code, *_ in (p.values for p in STATED)}) >= len(RULES) // 2


@pytest.mark.parametrize(("code", "name", "spec", "before", "after"), STATED)
def test_explain_states_the_rule_threshold_in_force(
    cli, tmp_path, monkeypatch, code, name, spec, before, after
) -> None:
    monkeypatch.chdir(tmp_path)  # no config file above: only --set moves a threshold
    value = _overridden(name)
    changed = Thresholds().with_overrides({name: value}, "--set")

    def phrase(thresholds: Thresholds) -> str:
        return plain_words(before + format(getattr(thresholds, name), spec) + after)

    result = cli("explain", code, "--set", f"{name}={value}")
    assert result.exit_code == 0, result.output
    out = _spaced(result.stdout)
    assert phrase(changed) != phrase(DEFAULTS), (name, value)
    assert phrase(changed) in out, f"{name}={value}: {phrase(changed)!r} not in `explain {code}`"
    assert phrase(DEFAULTS) not in out, f"{name}={value}: `explain {code}` states the default"
    assert f"{name} = {value} (default" in out  # and says which threshold it moved


def _default_texts(name: str) -> list[str]:
    """How a doc would write a threshold's default: 3, 1.5 (as in 1.5x), 5%."""
    value = getattr(DEFAULTS, name)
    if isinstance(value, (tuple, bool)):  # a list of steps or a flag: no number to write
        return []
    return [f"{value:g}", *([f"{value:.0%}"] if isinstance(value, float) and value < 1 else [])]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(code, marks=pytest.mark.xfail(strict=True, reason="converted by its owner"))
        if code in PENDING
        else code
        for code in RULES
    ],
)
def test_a_rule_doc_writes_no_threshold_default_by_hand(code: str) -> None:
    """A number in a doc that is the default of a threshold the rule reads (or names) must be
    that threshold's `{field}`, so that `--set` changes it."""
    rule = RULES[code]
    literal = re.sub(r"\{[^{}]*\}", " ", rule.doc)
    named = {f.name for f in fields(Thresholds) if f"`{f.name}`" in rule.doc}
    by_hand = [
        (name, text)
        for name in sorted({*rule.reads, *named})
        for text in _default_texts(name)
        # a number standing alone (or as 30x, 200-step), not a digit of Q2.1, 1/64, 1-3, §2
        if re.search(rf"(?<![\w./§\-]){re.escape(text)}x?(?![\w/]|\.\d)", literal)
    ]
    assert not by_hand, f"{code}: defaults written by hand: {by_hand}"


def test_a_docstring_that_is_no_template_fails_at_registration() -> None:
    from stabilitycli.detect.registry import rule

    def run(view, thresholds, facts):
        """What it detects: {no_such_threshold}.\n\nWhy it matters: it does."""

    with pytest.raises(ValueError, match="no template"):
        rule("no-template-rule", "2", "made up")(run)


def test_the_defaults_fill_every_doc() -> None:
    # docs/rules.md and `stab explain` without --set say these
    for rule in RULES.values():
        assert "{" not in rule.doc_for(DEFAULTS).replace("{{", ""), rule.code
        assert rule.doc_for(Thresholds(**asdict(DEFAULTS))) == rule.doc_for(DEFAULTS)


def test_explain_states_the_clip_a_remedy_advises_in_force(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    norm, value = f"{DEFAULTS.remedy_clip_percentile:g}", f"{DEFAULTS.remedy_clip_value:g}"
    sets = ("--set", "remedy_clip_percentile=95", "--set", "remedy_clip_value=40")
    q24, q14 = cli("explain", "Q2.4", *sets).stdout, cli("explain", "Q1.4", *sets).stdout
    assert "near the 95th percentile" in " ".join(q24.split()) and f"{norm}th" not in q24
    assert "(+-40)" in q14 and f"(+-{value})" not in q14
    # with no run, the remedy says how to choose the clip, at the percentile in force
    persistent = " ".join(cli("explain", "spike-persistent", *sets).stdout.split())
    assert "about its 95th percentile" in persistent and f"its {norm}th" not in persistent
    shown = cli("explain", "thresholds", *sets).stdout
    assert f"remedy_clip_percentile = 95.0  (default {DEFAULTS.remedy_clip_percentile!r})" in shown


# ---------------------------------------------------------------- stab explain <TAB>


def _every_code() -> set[str]:
    from stabilitycli.classify.questions import CAUSE_TEXT, QUESTIONS, VERDICTS

    codes = {c for r in RULES.values() for c in (r.code, *r.emits)}
    return codes | set(VERDICTS) | set(CAUSE_TEXT) | set(QUESTIONS) | {"thresholds", "questions"}


def test_tab_offers_every_code_explain_accepts() -> None:
    offered = dict(complete_code(""))
    assert set(offered) == _every_code()
    for code, what in offered.items():
        assert explain_text(code), code  # accepted: an unknown code raises
        assert what, code
    assert "rule" in offered["divergence"] and "verdict" in offered["divergence"]
    assert offered["Q2.1"] == "question"


def test_tab_completes_the_prefix_typed() -> None:
    spikes = [code for code, _ in complete_code("spike-")]
    assert spikes and all(c.startswith("spike-") for c in spikes)
    assert {"spike-persistent", "spike-recoverable"} <= set(spikes)
    assert {c for c, _ in complete_code("Q2.")} == {q for q in _every_code() if q[:3] == "Q2."}
    assert complete_code("no-such-") == []


def test_the_explain_argument_completes_through_click() -> None:
    import typer.main

    from stabilitycli.cli import app

    explain = typer.main.get_command(app).commands["explain"]  # type: ignore[attr-defined]
    code = next(p for p in explain.params if p.name == "code")
    ctx = explain.make_context("explain", [], resilient_parsing=True)
    items = code.shell_complete(ctx, "loss-scale-")
    assert {i.value for i in items} == {c for c in _every_code() if c.startswith("loss-scale-")}
    assert all(i.help for i in items)
