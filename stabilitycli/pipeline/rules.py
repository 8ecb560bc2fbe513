"""The selected rules over one run's view: one after another, or on two threads at once.

A rule reads the view and the facts it `needs`, and gives findings, skips and the facts
it `provides`. Rules that do not depend on each other can run at the same time: polars
and numpy let go of the GIL in their work, so on a long log the spike rule (the largest
part of the rules' time) runs on one core while the others run on the second. A rule
starts once every selected rule that provides a fact it needs has finished; what the
rules found is gathered in the rule order, so the result is the one the serial loop
gives, bit for bit (every rule is deterministic and writes only its own facts).

A rule that reads nothing of the view but its run (`Rule.before_view`: the rank check,
which reads every rank's rows) can start before the view is built (`started_early`):
the per-step series of a per-rank log (`build_view`, one thread) are then made on one
core while it runs on the other, where they were a one-core stretch before every rule.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

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
    from stabilitycli.frame import RunData

# below this many rows the rules take a fraction of a second: threads would cost more
# than they save (and a batch already runs one run a core)
PARALLEL_MIN_ROWS = 200_000
RULE_THREADS = 2


class Started(NamedTuple):
    """What `started_early` decided and began: the threads the rules run on, and the
    futures of the rules already running, by code."""

    threads: int
    running: dict[str, Future[RuleResult]]


def run_rules(
    rules: list[Rule],
    view: SeriesView,
    thresholds: Thresholds,
    facts: Facts,
    rows: int,
    started: Started | None = None,
) -> tuple[list[Finding], list[Skip]]:
    """Every rule's findings and skips, in the rule order; `rows` of the log, for progress.
    `started`: what `started_early` began (its threads are the ones decided there, so that
    the early rules and these never count differently; their results are waited for
    here, in their turn)."""
    if started is None:
        started = Started(_rule_threads(rows, len(view.columns)), {})
    threads, early = started
    # a rule's chunks may take the second thread too (`core.threads`): the spike rule
    # goes on alone for seconds after the others have finished
    with core_threads.lending(threads):
        if early or (threads > 1 and len(rules) > 1):
            outcomes = _at_once(rules, view, thresholds, facts, rows, threads, early)
        else:
            outcomes = _in_turn(rules, view, thresholds, facts, rows)
    findings: list[Finding] = []
    skipped: list[Skip] = []
    for outcome in outcomes:
        findings.extend(outcome.findings)
        skipped.extend(outcome.skipped)
    return findings, skipped


@contextmanager
def started_early(
    rules: list[Rule], run: RunData, thresholds: Thresholds, facts: Facts
) -> Iterator[Started]:
    """The threads the rules of `run` run on, decided once for `run_rules`, and the
    selected rules that read only the run (`Rule.before_view`) started on a thread of
    their own when those are two, with the second thread lent to them as `run_rules`
    lends it. None is started for a short log, under a memory cap, or for a run without
    ranks, whose frame `build_view` replaces (packs) while it builds the view."""
    threads = _rule_threads(run.frame.height, len(run.metric_columns))
    at_once = threads > 1 and len(rules) > 1 and "rank" in run.frame.columns
    early = [rule for rule in rules if rule.before_view] if at_once else []
    if not early:
        yield Started(threads, {})
        return
    from stabilitycli.detect.series import run_only_view

    view = run_only_view(run)

    def started(rule: Rule) -> RuleResult:
        with core_threads.lending(threads):
            return rule.run(view, thresholds, facts)

    with ThreadPoolExecutor(len(early), thread_name_prefix="stab-rule-early") as pool:
        # each hears what this thread hears (the progress listener)
        yield Started(
            threads,
            {
                rule.code: pool.submit(contextvars.copy_context().run, started, rule)
                for rule in early
            },
        )


def _rule_threads(rows: int, metrics: int) -> int:
    """The threads the rules of a log of `rows` rows and `metrics` metrics run on: two
    where there are two cores, the log is long enough and nothing caps memory; else one."""
    threads = min(RULE_THREADS, os.cpu_count() or 1)
    spare = (
        threads > 1
        and rows >= PARALLEL_MIN_ROWS
        and not memory_capped(_columns_bytes(metrics, rows))
    )
    return threads if spare else 1


def _columns_bytes(metrics: int, rows: int) -> int:
    """About what the log's frame holds: a step and each metric in 8 bytes a row (a
    per-rank log's view holds per-step series; its frame, every rank's rows)."""
    return rows * 8 * (metrics + 1)


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
    early: dict[str, Future[RuleResult]],
) -> list[RuleResult]:
    """The rules on `threads` threads at once, the rules `early` started counted among
    them (they run already: the others share the threads left)."""
    provider = {name: rule.code for rule in rules for name in rule.provides}
    # the selected rules each waits for (a fact no selected rule provides stays unset)
    waits_for = {
        rule.code: {provider[n] for n in rule.needs if n in provider and provider[n] != rule.code}
        for rule in rules
    }
    waited_on = {rule.code: sum(rule.code in w for w in waits_for.values()) for rule in rules}
    outcomes: dict[str, RuleResult] = {}
    running: dict[Future[RuleResult], Rule] = {
        early[rule.code]: rule for rule in rules if rule.code in early
    }
    waiting = [rule for rule in rules if rule.code not in early]
    progress.tell("rules", 0, len(rules))
    with ThreadPoolExecutor(max(1, threads - len(early)), thread_name_prefix="stab-rule") as pool:
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
