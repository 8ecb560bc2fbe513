"""The selected rules over one run's view: one after another, or on two threads at once.

A rule reads the view and the facts it `needs`, and gives findings, skips and the facts
it `provides`. Rules that do not depend on each other can run at the same time: polars
and numpy let go of the GIL in their work, so on a long log the spike rule (the largest
part of the rules' time) runs on one core while the others run on the second. A rule
starts once every selected rule that provides a fact it needs has finished; what the
rules found is gathered in the rule order, so the result is the one the serial loop
gives, bit for bit (every rule is deterministic and writes only its own facts).
"""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from stabilitycli.core import progress
from stabilitycli.core import threads as core_threads
from stabilitycli.core.memory_cap import memory_capped
from stabilitycli.pipeline.memory import release_freed

if TYPE_CHECKING:
    from stabilitycli.core.config import Thresholds
    from stabilitycli.core.model import Finding, Skip
    from stabilitycli.detect.facts import Facts
    from stabilitycli.detect.registry import Rule, RuleResult
    from stabilitycli.detect.series import SeriesView

# below this many rows the rules take a fraction of a second: threads would cost more
# than they save (and a batch already runs one run a core)
PARALLEL_MIN_ROWS = 200_000
RULE_THREADS = 2


def run_rules(
    rules: list[Rule], view: SeriesView, thresholds: Thresholds, facts: Facts, rows: int
) -> tuple[list[Finding], list[Skip]]:
    """Every rule's findings and skips, in the rule order; `rows` of the log, for progress."""
    threads = min(RULE_THREADS, os.cpu_count() or 1)
    spare = (
        threads > 1 and rows >= PARALLEL_MIN_ROWS and not memory_capped(_columns_bytes(view, rows))
    )
    # a rule's chunks may take the second thread too (`core.threads`): the spike rule
    # goes on alone for seconds after the others have finished
    with core_threads.lending(threads if spare else 1):
        if spare and len(rules) > 1:
            outcomes = _at_once(rules, view, thresholds, facts, rows, threads)
        else:
            outcomes = _in_turn(rules, view, thresholds, facts, rows)
    findings: list[Finding] = []
    skipped: list[Skip] = []
    for outcome in outcomes:
        findings.extend(outcome.findings)
        skipped.extend(outcome.skipped)
    return findings, skipped


def _columns_bytes(view: SeriesView, rows: int) -> int:
    """About what the log's frame holds: a step and each metric in 8 bytes a row (a
    per-rank log's view holds per-step series; its frame, every rank's rows)."""
    return rows * 8 * (len(view.columns) + 1)


def _in_turn(
    rules: list[Rule], view: SeriesView, thresholds: Thresholds, facts: Facts, rows: int
) -> list[RuleResult]:
    outcomes = []
    # asked once a run, not once a rule: a cap does not come and go between two rules, and
    # each asking reads the cgroup's files (some 0.1M instructions; #40)
    capped = memory_capped()
    progress.tell("rules", 0, len(rules))
    for done, rule in enumerate(rules, start=1):
        outcome = rule.run(view, thresholds, facts)
        facts.provide(rule.code, rule.provides, outcome.facts)
        outcomes.append(outcome)
        if capped:
            # what numpy freed in this rule is of no use to the next rule's polars work
            release_freed()
        # a row counts as got through when every rule has read it: the rate is the rules'
        progress.tell("rules", done, len(rules), rows=rows * done // len(rules))
    return outcomes


def _at_once(
    rules: list[Rule],
    view: SeriesView,
    thresholds: Thresholds,
    facts: Facts,
    rows: int,
    threads: int,
) -> list[RuleResult]:
    provider = {name: rule.code for rule in rules for name in rule.provides}
    # the selected rules each waits for (a fact no selected rule provides stays unset)
    waits_for = {
        rule.code: {provider[n] for n in rule.needs if n in provider and provider[n] != rule.code}
        for rule in rules
    }
    waited_on = {rule.code: sum(rule.code in w for w in waits_for.values()) for rule in rules}
    outcomes: dict[str, RuleResult] = {}
    running: dict[Future[RuleResult], Rule] = {}
    waiting = list(rules)
    progress.tell("rules", 0, len(rules))
    with ThreadPoolExecutor(threads, thread_name_prefix="stab-rule") as pool:
        while waiting or running:
            ready = [r for r in waiting if waits_for[r.code] <= outcomes.keys()]
            # a rule others wait for first (the spike rule): the rules after it can start
            # the sooner, while the second thread works through the independent ones
            ready.sort(key=lambda r: -waited_on[r.code])
            for rule in ready:
                waiting.remove(rule)
                # the worker hears what this thread hears (the progress listener)
                context = contextvars.copy_context()
                running[pool.submit(context.run, rule.run, view, thresholds, facts)] = rule
            if not running:  # rules that wait for each other: a wiring bug, not input
                raise AssertionError(f"rules wait in a cycle: {[r.code for r in waiting]}")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                rule = running.pop(future)
                outcome = future.result()  # a rule's error is raised here, as in turn
                facts.provide(rule.code, rule.provides, outcome.facts)
                outcomes[rule.code] = outcome
                done = len(outcomes)
                progress.tell("rules", done, len(rules), rows=rows * done // len(rules))
    return [outcomes[rule.code] for rule in rules]
