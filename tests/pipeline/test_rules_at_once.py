"""Rules on two threads (issue #40): the same document as one after another, bit for bit,
on every rule's fires and quiet logs and on the bundled runs; a rule that needs another's
facts starts after it; the progress listener hears every rule done."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from stabilitycli import analyze
from stabilitycli.core import progress
from stabilitycli.detect import registry
from stabilitycli.detect.registry import load_rules
from stabilitycli.pipeline import rules as rules_module
from stabilitycli.report.json_report import render
from tests.conftest import FIXTURES

LOGS = sorted(
    [*FIXTURES.glob("rules/*/*/run.jsonl"), *FIXTURES.glob("runs/*/run.jsonl")],
    key=str,
)


def _document(path, monkeypatch, at_once: bool) -> str:
    monkeypatch.setattr(rules_module, "PARALLEL_MIN_ROWS", 0 if at_once else 10**12)
    return render(analyze(path))


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_at_once_gives_the_serial_document(path, monkeypatch) -> None:
    if not path.is_file():
        pytest.skip("no log")
    assert _document(path, monkeypatch, True) == _document(path, monkeypatch, False)


def test_a_long_log_takes_the_threads_and_waits_for_what_it_needs(tmp_path, monkeypatch) -> None:
    """A log over PARALLEL_MIN_ROWS runs its rules on the threads, with no setting changed;
    the rules that read the spike rule's facts start only after it has given them."""
    steps = rules_module.PARALLEL_MIN_ROWS
    rng = np.random.default_rng(40)
    loss = 2.0 + 5.0 / (1 + np.arange(steps) / 2000) + 0.01 * rng.standard_normal(steps)
    loss[steps // 2 : steps // 2 + 5] *= 3.0
    path = tmp_path / "long.csv"
    pd.DataFrame({"step": np.arange(steps), "loss": loss}).to_csv(path, index=False)
    rules = load_rules()  # imports every rule module: RULES holds them all
    order: list[tuple[str, str]] = []
    threads: set[str] = set()
    lock = threading.Lock()
    for code in ("spike", "divergence", "loss-scale", "no-learning", "nan"):
        rule = rules[code]

        def traced(view, thresholds, facts, _run=rule.run, _code=code):
            with lock:
                order.append(("start", _code))
                threads.add(threading.current_thread().name)
            outcome = _run(view, thresholds, facts)
            with lock:
                order.append(("end", _code))
            return outcome

        traced.__module__ = rule.run.__module__  # the run order goes by the rule's module
        monkeypatch.setitem(registry.RULES, code, replace(rule, run=traced))
    heard: list[tuple[str, int, int, int]] = []
    with progress.listening(lambda *said: heard.append(said)):
        threaded = render(analyze(path))
    assert any(name.startswith("stab-rule") for name in threads)
    spike_end = order.index(("end", "spike"))
    for needs_spikes in ("divergence", "loss-scale", "no-learning"):
        assert order.index(("start", needs_spikes)) > spike_end
    told = [done for stage, done, _, _ in heard if stage == "rules"]
    assert told == list(range(len(rules) + 1))
    monkeypatch.setattr(rules_module, "PARALLEL_MIN_ROWS", 10**12)
    assert render(analyze(path)) == threaded


def test_under_a_memory_cap_the_rules_take_turns() -> None:
    """Two rules at once hold two rules' temporaries: a log that fit a cap on the data
    segment one rule at a time failed under it on two threads (tests/pipeline/
    test_bounded_memory.py), so a capped process never takes the threads."""
    import subprocess
    import sys

    probe = (
        "import resource\n"
        "from stabilitycli.core.memory_cap import memory_capped\n"
        "print(memory_capped())\n"
        "resource.setrlimit(resource.RLIMIT_DATA, (64 << 30, resource.RLIM_INFINITY))\n"
        "print(memory_capped())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]


def test_a_rules_chunks_on_the_lent_thread_give_the_same_document(tmp_path, monkeypatch) -> None:
    """Issue 40: on a long log the pipeline lends the rules a second thread for their
    chunks (`core.threads`): the level changes of two chunks are found at once. The
    document is the one the rules give one chunk at a time, run after run, findings in
    the same order."""
    from stabilitycli.detect import level, windows

    steps = rules_module.PARALLEL_MIN_ROWS
    rng = np.random.default_rng(41)
    epoch = np.arange(steps) // (steps // 4)
    loss = 3.0 * 0.85**epoch + 0.01 * rng.standard_normal(steps)
    for at in (steps // 8, steps // 3, 3 * steps // 5):
        loss[at : at + 4] *= 2.5
    path = tmp_path / "epochs.csv"
    pd.DataFrame({"step": np.arange(steps), "loss": loss}).to_csv(path, index=False)
    monkeypatch.setattr(windows, "CHUNK_ROWS", steps // 8)
    names: set[str] = set()
    changes_in = level._changes_in

    def traced(*args, **kwargs):
        names.add(threading.current_thread().name)
        return changes_in(*args, **kwargs)

    monkeypatch.setattr(level, "_changes_in", traced)
    documents = [render(analyze(path)) for _ in range(3)]
    assert any(name.startswith("stab-chunk") for name in names)
    assert documents[0] == documents[1] == documents[2]
    assert '"spike' in documents[0]  # the bumps are judged: findings to order
    names.clear()
    monkeypatch.setattr(rules_module, "PARALLEL_MIN_ROWS", 10**12)
    assert render(analyze(path)) == documents[0]
    assert not any(name.startswith("stab-chunk") for name in names)


def test_the_rank_check_starts_before_the_view_and_gives_the_same_document(
    tmp_path, monkeypatch
) -> None:
    """Issue 40: a rule that reads only the run (`Rule.before_view`, the rank check) starts
    on a thread of its own while the view is built; the document is the one the rules give
    one after another, with the outlier rank found."""
    import polars as pl

    from stabilitycli.detect import series

    ranks, steps = 4, rules_module.PARALLEL_MIN_ROWS // 4
    rng = np.random.default_rng(42)
    loss = 2.0 + 0.02 * rng.standard_normal((steps, ranks))
    loss[steps // 2 :, 3] += 1.0  # rank 3 sits away from its cohort for the second half
    path = tmp_path / "ranks.jsonl"
    pl.DataFrame(
        {
            "step": np.repeat(np.arange(steps), ranks),
            "rank": np.tile(np.arange(ranks), steps),
            "loss": loss.ravel(),
        }
    ).write_ndjson(path)
    rule = load_rules()["ranks"]  # imports every rule module: RULES holds them all
    assert rule.before_view
    where: list[str] = []

    def traced(view, thresholds, facts, _run=rule.run):
        where.append(threading.current_thread().name)
        return _run(view, thresholds, facts)

    traced.__module__ = rule.run.__module__
    monkeypatch.setitem(registry.RULES, "ranks", replace(rule, run=traced))
    built: list[str] = []
    build_view = series.build_view

    def view_of(run):
        built.append(threading.current_thread().name)
        return build_view(run)

    monkeypatch.setattr(series, "build_view", view_of)
    early = render(analyze(path))
    assert where[0].startswith("stab-rule-early") and built == ["MainThread"]
    assert '"rank-outlier"' in early
    monkeypatch.setattr(rules_module, "PARALLEL_MIN_ROWS", 10**12)
    assert render(analyze(path)) == early
    assert not where[1].startswith("stab-rule-early")
