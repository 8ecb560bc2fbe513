"""The rule registry: every rule's code, section, the finding codes it emits,
and its documentation, in one table that `stab explain` and `--select/--ignore`
read, so the docs cannot drift from the code.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import asdict, field
from typing import TYPE_CHECKING, Any

from stabilitycli.core.model import Finding, FindingKind, Skip
from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from stabilitycli.core.config import Thresholds


@dataclass
class RuleResult:
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    # facts for later rules and the classifier, by `Facts` field name; only the
    # names the rule declares in `provides` are accepted
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    code: str
    section: str
    summary: str
    kinds: tuple[FindingKind, ...]  # the kinds of finding it emits, declared beside it
    run: Callable[..., RuleResult]
    reads: tuple[str, ...] = ()  # `Thresholds` fields the rule's result depends on
    needs: tuple[str, ...] = ()  # `Facts` fields it reads (so it runs after their providers)
    provides: tuple[str, ...] = ()  # `Facts` fields it sets
    # the series it judges (canonical names), for the coverage of each series read
    series: tuple[str, ...] = ()
    # reads nothing of the view but its run (`SeriesView.run`) and no fact: the pipeline
    # may start it before the view's series are built (`pipeline.rules.started_early`)
    before_view: bool = False

    @property
    def emits(self) -> tuple[str, ...]:
        """The codes of the findings it emits."""
        return tuple(kind.code for kind in self.kinds)

    def summary_for(self, thresholds: Thresholds) -> str:
        """The summary with the thresholds in force (summaries are `str.format` templates)."""
        return self.summary.format(**asdict(thresholds))

    @property
    def doc(self) -> str:
        """The docstring as written: a `str.format` template over the `Thresholds` fields."""
        return inspect.cleandoc(self.run.__doc__ or "")

    def doc_for(self, thresholds: Thresholds) -> str:
        """The documentation with the thresholds in force (`{spike_sigma:g}` -> 4)."""
        return self.doc.format(**asdict(thresholds))


RULES: dict[str, Rule] = {}


def rule(
    code: str,
    section: str,
    summary: str,
    emits: tuple[FindingKind, ...] = (),
    *,
    reads: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    provides: tuple[str, ...] = (),
    series: tuple[str, ...] = (),
    before_view: bool = False,
) -> Callable[[Callable[..., RuleResult]], Callable[..., RuleResult]]:
    """Register a rule function `(view, thresholds, facts) -> RuleResult`.

    Its summary and its docstring are `str.format` templates over the `Thresholds` fields
    (`{spike_sigma:g}`), so `stab explain` states the thresholds in force. Registration
    refuses a rule whose declarations do not check out, so a wiring mistake fails at
    import, not on some user's log.
    """
    from stabilitycli.core.config import THRESHOLD_NAMES
    from stabilitycli.detect.facts import FACT_NAMES

    def register(func: Callable[..., RuleResult]) -> Callable[..., RuleResult]:
        if code in RULES:
            raise ValueError(f"rule code {code!r} registered twice")
        doc = func.__doc__ or ""
        for heading in ("What it detects", "Why it matters"):
            if heading not in doc:
                raise ValueError(f"rule {code!r}: docstring lacks a '{heading}' section")
        strays = [k.code for k in emits if (k.rule, k.section) != (code, section)]
        if strays:
            raise ValueError(f"rule {code!r} emits kinds declared for another rule: {strays}")
        unknown = [name for name in reads if name not in THRESHOLD_NAMES]
        unknown += [name for name in (*needs, *provides) if name not in FACT_NAMES]
        if unknown:
            raise ValueError(f"rule {code!r} declares unknown threshold(s) or fact(s): {unknown}")
        _check_template(code, doc)
        if before_view and needs:
            raise ValueError(f"rule {code!r} starts before the view: it can need no fact")
        RULES[code] = Rule(
            code, section, summary, emits, func, reads, needs, provides, series, before_view
        )
        return func

    return register


@functools.cache
def _default_values() -> dict[str, Any]:
    # once, not once a registered rule: `asdict` copies each of the fields (about 0.35 ms
    # a call, paid at every start-up for each of the rules)
    from stabilitycli.core.config import default_thresholds

    return asdict(default_thresholds())


def _check_template(code: str, doc: str) -> None:
    """A docstring is a template: a field that is no threshold, or a lone brace, fails here."""
    try:
        doc.format(**_default_values())
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(
            f"rule {code!r}: docstring is no template over the thresholds ({err!r}); "
            "write a literal brace twice"
        ) from None


# the modules whose import registers rules, in the order that breaks ties in the run order
RULE_MODULES: tuple[str, ...] = (
    "stabilitycli.detect.ranks.rule",
    "stabilitycli.detect.restarts",
    "stabilitycli.detect.restart_replay",
    "stabilitycli.detect.nan",
    "stabilitycli.detect.spike",
    "stabilitycli.detect.schedule",
    "stabilitycli.detect.data",
    "stabilitycli.detect.mixed_precision",
    "stabilitycli.detect.divergence",
    "stabilitycli.detect.learning",
    "stabilitycli.detect.throughput",
    "stabilitycli.detect.eval",
)


def load_rules() -> dict[str, Rule]:
    """Every rule, in run order: after the providers of what it needs, else by section."""
    import importlib

    for module in RULE_MODULES:
        importlib.import_module(module)
    # RULE_MODULES' order, not the order the modules happened to be imported in (a caller
    # that imports one rule module first would otherwise change the run order)
    place = {module: i for i, module in enumerate(RULE_MODULES)}
    registered = sorted(RULES.values(), key=lambda r: place.get(r.run.__module__, len(place)))
    return {r.code: r for r in _dependency_order(registered)}


def _dependency_order(rules: list[Rule]) -> list[Rule]:
    """Kahn's topological sort; among the rules that are ready, the earliest section first."""
    providers = {fact: r.code for r in rules for fact in r.provides}
    waiting = {r.code: {providers[n] for n in r.needs if n in providers} for r in rules}
    rank = {r.code: (_section_key(r.section), i) for i, r in enumerate(rules)}
    by_code = {r.code: r for r in rules}
    ordered: list[Rule] = []
    while waiting:
        ready = sorted((c for c, deps in waiting.items() if not deps), key=rank.__getitem__)
        if not ready:
            raise ValueError(f"rules need each other's facts in a cycle: {sorted(waiting)}")
        chosen = ready[0]
        ordered.append(by_code[chosen])
        del waiting[chosen]
        for deps in waiting.values():
            deps.discard(chosen)
    return ordered


def _section_key(section: str) -> tuple[int, str]:
    # the per-rank check (§5) comes first: the tree asks it before §1 (spec 5)
    return (0, section) if section == "5" else (1, section)


def all_codes() -> set[str]:
    """Every rule code and every finding code a rule can emit."""
    rules = load_rules()
    return set(rules) | {c for r in rules.values() for c in r.emits}


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
            from stabilitycli.core.errors import StabUsageError

            raise StabUsageError(f"unknown rule or finding code {code!r} (see `stab explain`)")
    chosen = [r for r in rules.values() if not select or any(matches(c, r) for c in select)]
    dropped: set[str] = set()
    for code in ignore or []:
        if code in finding_codes and code not in rules:
            dropped.add(code)
        else:
            chosen = [r for r in chosen if not matches(code, r)]
    return chosen, dropped
