"""Every rule is documented, and every finding code has a log where it fires and one where it
does not."""

from __future__ import annotations

import functools
import re

import pytest

import stabilitycli
from stabilitycli import analyze
from stabilitycli.commands.explain import explain_text
from stabilitycli.core.config import Thresholds
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.registry import load_rules, select_rules
from stabilitycli.detect.series import build_view
from tests.conftest import FIXTURES, REAL_LOGS, RUNS, run_fixture

EXCERPTS = REAL_LOGS / "bigscience-chronicles-excerpts"

# finding code -> a log where it must fire
FIRES = {
    "nan": run_fixture("nan-fp32-origin"),
    "spike": run_fixture("spike-long-tail"),
    "recurring-spikes": FIXTURES / "rules" / "recurring-spikes" / "fires" / "run.jsonl.gz",
    "schedule-restart": FIXTURES / "rules" / "schedule-restart" / "fires" / "run.jsonl.gz",
    "blip": run_fixture("fp16-healthy-scaler"),
    "grad-norm-spike": run_fixture("spike-long-tail"),
    "loss-scale-halving": run_fixture("fp16-healthy-scaler"),
    "loss-scale-static": run_fixture("loss-scale-static"),
    "loss-scale-collapsed": run_fixture("loss-scale-collapsed"),
    "fp16-overflow": run_fixture("fp16-overflow"),
    "divergence": run_fixture("divergence-grad-norm"),
    "grad-norm-rising": run_fixture("divergence-grad-norm"),
    "plateau": run_fixture("plateau"),
    "lr-jump": run_fixture("spike-lr-jump"),
    "lr-increasing": run_fixture("divergence-lr-increasing"),
    "weight-norm-change": run_fixture("divergence-weight-norm"),
    "restart": run_fixture("restart-clean"),
    "duplicate-batch": run_fixture("spike-duplicate-batch"),
    "restart-replay": run_fixture("spike-after-restart"),
    "loss-jump": EXCERPTS / "tr1-13B-base__L161-L177.log",
    "grad-norm-jump": EXCERPTS / "tr8-104B-wide__L637-L644.log",
    "loss-rise": REAL_LOGS / "llmc-gpt2-124m-a100" / "main.log",
    "throughput-drop": EXCERPTS / "tr11-176B-ml__L256-L272.log",
    "rank-outlier": FIXTURES / "ranks" / "seed_64",
    "rank-nonfinite": FIXTURES / "ranks" / "nan_rank.jsonl.gz",
    "rank-silent": FIXTURES / "ranks" / "silent_rank.jsonl.gz",
    "straggler": FIXTURES / "ranks" / "straggler.jsonl.gz",
    "eval-nonfinite": FIXTURES / "rules" / "eval-nonfinite" / "fires" / "run.jsonl.gz",
    "overfitting": FIXTURES / "rules" / "overfitting" / "fires" / "run.jsonl.gz",
    "no-learning": FIXTURES / "rules" / "no-learning" / "fires" / "run.jsonl",
    "loss-collapse": FIXTURES / "rules" / "loss-collapse" / "fires" / "run.jsonl",
}
QUIET = run_fixture("healthy-low-noise")
ALL_CODES = sorted({code for rule in load_rules().values() for code in rule.emits})


@pytest.mark.parametrize("rule", list(load_rules().values()), ids=lambda r: r.code)
def test_rule_is_documented(rule) -> None:
    assert rule.summary and rule.section
    for heading in ("What it detects", "Why it matters"):
        assert heading in rule.doc, f"{rule.code}: no '{heading}'"


@pytest.mark.parametrize("rule", list(load_rules().values()), ids=lambda r: r.code)
def test_rule_summary_states_the_thresholds_in_force(rule) -> None:
    """A summary is a template over `Thresholds`: any number it states is a threshold's."""
    from dataclasses import asdict, fields

    defaults = Thresholds()
    assert "{" not in rule.summary_for(defaults)
    # no number written in by hand (fp16 is a name, not a number)
    assert not re.search(r"\b\d", re.sub(r"\{[^}]*\}", "", rule.summary)), rule.summary
    changed = Thresholds(
        **{
            f.name: getattr(defaults, f.name) * 3
            for f in fields(Thresholds)
            if type(getattr(defaults, f.name)) in (int, float)
        }
    )
    for name, value in asdict(defaults).items():
        if f"{{{name}" in rule.summary:
            shown = format(getattr(changed, name), "g")
            assert shown in rule.summary_for(changed), (name, rule.summary_for(changed))
            assert format(value, "g") not in rule.summary_for(changed).split(), rule.code


@pytest.mark.parametrize("code", ALL_CODES)
def test_each_finding_code_fires_somewhere(code: str) -> None:
    assert code in FIRES, f"{code}: add a fixture where it fires"
    path = FIRES[code]
    if not path.exists():
        # only the shared real logs may be absent (a checkout without ../shared)
        assert not path.is_relative_to(FIXTURES), f"{path}: the fixture is missing"
        pytest.skip(f"{path} not present")
    assert code in {f.code for f in analyze(path).findings}


@pytest.mark.parametrize(
    "code", [c for c in ALL_CODES if c not in ("blip", "loss-rise", "grad-norm-spike")]
)
def test_each_finding_code_is_quiet_on_a_healthy_run(code: str) -> None:
    assert code not in {f.code for f in analyze(QUIET).findings}


def test_fixture_folder_is_what_the_tests_expect() -> None:
    assert RUNS.is_dir() and len(list(RUNS.glob("*/expected.json"))) >= 20


# --- rules are whole units: what they read and provide is declared, and true -------------


class _RecordingThresholds:
    """Thresholds that note every field a rule reads."""

    def __init__(self, read: set[str]) -> None:
        self._inner = Thresholds()
        self._read = read

    def __getattr__(self, name: str):
        self._read.add(name)
        return getattr(self._inner, name)


_EVERY_KIND_OF_RUN = sorted({p for p in FIRES.values() if p.exists()}, key=str)


@functools.cache
def _thresholds_read() -> dict[str, set[str]]:
    """Per rule, every threshold it read over every kind of run: the rules run in their
    order once a run, each reading through its own recorder (one pass for all the rules,
    where a pass per rule ran the earlier ones again for each)."""
    read: dict[str, set[str]] = {code: set() for code in load_rules()}
    for path in _EVERY_KIND_OF_RUN:
        view = build_view(stabilitycli.read(path))
        facts = Facts()
        for rule in load_rules().values():
            found = rule.run(view, _RecordingThresholds(read[rule.code]), facts)
            facts.provide(rule.code, rule.provides, found.facts)
    return read


@pytest.mark.parametrize("rule", list(load_rules().values()), ids=lambda r: r.code)
def test_rule_reads_only_the_thresholds_it_declares(rule) -> None:
    undeclared = _thresholds_read()[rule.code] - set(rule.reads)
    assert not undeclared, f"{rule.code} reads {sorted(undeclared)} without declaring them"


def test_run_order_puts_every_provider_before_its_readers() -> None:
    order = list(load_rules())
    providers = {fact: r.code for r in load_rules().values() for fact in r.provides}
    for r in load_rules().values():
        for fact in r.needs:
            assert order.index(providers[fact]) < order.index(r.code), (r.code, fact)


def test_a_fact_a_rule_did_not_declare_is_refused() -> None:
    with pytest.raises(AssertionError, match="without declaring"):
        Facts().provide("nan", ("nan",), {"spikes": []})


@pytest.mark.parametrize("code", ["straggler", "rank-outlier", "rank-silent", "rank-nonfinite"])
def test_rank_codes_are_explained_and_selectable(code: str) -> None:
    assert code in explain_text(code)
    rules, dropped = select_rules(None, [code])
    assert code in dropped or all(code not in r.emits for r in rules)


def test_ignoring_a_rank_code_drops_it_from_the_findings() -> None:
    path = FIRES["rank-outlier"]
    assert "rank-outlier" in {f.code for f in analyze(path).findings}
    assert "rank-outlier" not in {f.code for f in analyze(path, ignore=["rank-outlier"]).findings}


def test_every_question_the_tree_asks_is_explained() -> None:
    from stabilitycli.classify.questions import QUESTIONS

    asked = set()
    for path in _EVERY_KIND_OF_RUN:
        asked |= {step.question for step in analyze(path).verdict.path}
    assert asked and asked <= set(QUESTIONS), asked - set(QUESTIONS)
    for question in asked:
        # the question, then what its answers lead to
        assert explain_text(question).startswith(f"{question}: {QUESTIONS[question]}\n")
