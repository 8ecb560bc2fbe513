"""The rule registry: every rule's code, section, the finding codes it emits,
and its documentation, in one table that `stab explain` and `--select/--ignore`
read, so the docs cannot drift from the code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stabilitycli.model import Finding, Skip


@dataclass
class RuleResult:
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    # structured facts for the classifier (spike events, overflow counts...)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    code: str
    section: str
    summary: str
    emits: tuple[str, ...]
    run: Callable[..., RuleResult]

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.run.__doc__ or "")


RULES: dict[str, Rule] = {}


def rule(code: str, section: str, summary: str, emits: tuple[str, ...] = ()):
    """Register a rule function `(view, thresholds, context) -> RuleResult`."""

    def register(func: Callable[..., RuleResult]) -> Callable[..., RuleResult]:
        if code in RULES:
            raise ValueError(f"rule code {code!r} registered twice")
        doc = func.__doc__ or ""
        for heading in ("What it detects", "Why it matters"):
            if heading not in doc:
                raise ValueError(f"rule {code!r}: docstring lacks a '{heading}' section")
        RULES[code] = Rule(code, section, summary, emits or (code,), func)
        return func

    return register


def load_rules() -> dict[str, Rule]:
    """Import every rule module (registration happens at import)."""
    import importlib

    for module in RULE_MODULES:
        importlib.import_module(f"stabilitycli.detect.{module}")

    # rules run in the tree's order: later sections read earlier facts (§3 and
    # §4 need the spike events of §2)
    order = {code: i for i, code in enumerate(RUN_ORDER)}
    return dict(sorted(RULES.items(), key=lambda item: order.get(item[0], len(order))))


# the modules whose import registers rules
RULE_MODULES: tuple[str, ...] = (
    "data",
    "divergence",
    "mixed_precision",
    "nan",
    "restart_replay",
    "restarts",
    "schedule",
    "spike",
    "throughput",
)

RUN_ORDER: tuple[str, ...] = (
    "restart",
    "restart-replay",
    "nan",
    "spike",
    "grad-norm-spike",
    "duplicate-batch",
    "loss-scale",
    "divergence",
    "lr-jump",
    "lr-increasing",
    "weight-norm-change",
    "throughput-drop",
)


def select_rules(select: list[str] | None, ignore: list[str] | None) -> tuple[list[Rule], set[str]]:
    """Rules to run, and finding codes to drop.

    A code names either a rule or a finding code a rule emits, or a section
    (`S2` / `2`); unknown codes are refused.
    """
    rules = load_rules()
    finding_codes = {c for r in rules.values() for c in r.emits}

    def matches(code: str, r: Rule) -> bool:
        code = code.strip()
        section = code.upper().removeprefix("S").removeprefix("§")
        return code == r.code or code in r.emits or section == r.section

    for code in [*(select or []), *(ignore or [])]:
        if not any(matches(code, r) for r in rules.values()):
            from stabilitycli.errors import StabUsageError

            raise StabUsageError(f"unknown rule or finding code {code!r} (see `stab explain`)")
    chosen = [r for r in rules.values() if not select or any(matches(c, r) for c in select)]
    dropped: set[str] = set()
    for code in ignore or []:
        if code in finding_codes and code not in rules:
            dropped.add(code)
        else:
            chosen = [r for r in chosen if not matches(code, r)]
    return chosen, dropped
