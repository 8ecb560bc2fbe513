"""The restart-replay rule and the replay extraction it rests on (seeds 000 and 003).

A resume that restored its state replays the abandoned trajectory within
noise (info); one that lost the optimizer state leaves it and comes back after
K steps, or never (warning). Fixtures: fixtures/runs/restart-clean (identical
replay), fixtures/runs/spike-after-restart (never comes back), and
fixtures/compare/restart-* (scripts/make_compare_fixtures.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity
from stabilitycli.detect.registry import load_rules
from stabilitycli.detect.replay import replay_from_view
from stabilitycli.detect.series import build_view
from stabilitycli.frame import SEGMENT
from stabilitycli.ingest import read
from stabilitycli.pipeline.run import analyze, load_run
from tests.conftest import FIXTURES, RUNS

COMPARE = FIXTURES / "compare"


def replays(path):
    result = analyze(path)
    return [f for f in result.findings if f.code == "restart-replay"], result


def test_registered_and_run_before_the_tree_sections():
    order = list(load_rules())
    assert "restart-replay" in order
    assert order.index("restart-replay") < order.index("nan")


def test_identical_replay_is_info_with_zero_deviation():
    found, result = replays(RUNS / "restart-clean" / "run.jsonl")
    assert len(found) == 1 and found[0].severity is Severity.INFO
    ev = found[0].evidence
    assert ev["max_abs_deviation"] == 0 and ev["steps_to_return"] == 0 and not ev["departed"]
    assert (ev["resumed_from_step"], ev["last_step_before"], ev["points"]) == (800, 999, 200)
    assert result.verdict.code == "healthy"  # the rule informs, it does not change the verdict


def test_clean_resume_with_other_noise_is_info():
    found, _ = replays(COMPARE / "restart-one-clean" / "run.jsonl")
    assert len(found) == 1 and found[0].severity is Severity.INFO
    ev = found[0].evidence
    assert ev["mean_abs_deviation"] > 0.03  # the replay is not a copy...
    assert ev["max_abs_deviation"] > ev["tolerance"] > 0  # ...single points even leave the band...
    assert not ev["departed"]  # ...but never 3 of 5 neighbours: noise
    assert "tracks the abandoned trajectory within noise" in found[0].message
    # the noise is the loss noise just before the restart, near the generator's 3% of ~2.6
    assert ev["noise_steps"] == [900, 999] and 0.05 < ev["noise_sigma"] < 0.12


def test_lost_optimizer_state_departs_and_comes_back_after_k_steps():
    found, result = replays(COMPARE / "restart-two-optimizer-lost" / "run.jsonl")
    found.sort(key=lambda f: f.evidence["restart"])
    assert [f.severity for f in found] == [Severity.INFO, Severity.WARNING]
    first, second = (f.evidence for f in found)
    assert first["restart"] == 1 and not first["departed"]
    bump = json.loads((COMPARE / "restart-two-optimizer-lost" / "expected.json").read_text())[
        "restarts"
    ][1]["bump"]
    # the same batches replay (data cursor restored): the deviation is the bump 2.0 exp(-k/15) alone
    k_expected = math.ceil(bump["decay_steps"] * math.log(bump["amplitude"] / second["tolerance"]))
    assert second["departed"] and second["first_outside"] == 1200
    assert (
        abs(second["steps_to_return"] - k_expected) <= 2 and 20 <= second["steps_to_return"] <= 35
    )
    assert second["max_deviation"] == pytest.approx(bump["amplitude"], abs=0.01)
    assert (
        "came back within noise of the abandoned trajectory after "
        f"{second['steps_to_return']} steps" in found[1].message
    )
    assert result.verdict.code in (
        "spike-recoverable",
        "spike-persistent",
    )  # the jump is a spike too


def test_replay_that_never_comes_back():
    found, result = replays(RUNS / "spike-after-restart" / "run.jsonl")
    assert len(found) == 1 and found[0].severity is Severity.WARNING
    ev = found[0].evidence
    assert ev["steps_to_return"] is None and ev["departed"]
    assert "did not come back within the 100 replayed point(s)" in found[0].message
    assert result.verdict.cause == "optimizer-reset"


def test_no_restart_no_finding():
    found, _ = replays(RUNS / "healthy-low-noise" / "run.jsonl")
    assert found == []


def test_view_without_abandoned_rows_is_skipped_not_silent():
    run = read(RUNS / "restart-clean" / "run.jsonl")
    view = build_view(run)
    view.abandoned = None
    rule = load_rules()["restart-replay"]
    out = rule.run(view, Thresholds(), {})
    assert out.findings == [] and "not kept" in out.skipped[0].reason


def _segments_log(starts_ends: list[tuple[int, int]]) -> pl.DataFrame:
    """A log written in segments; every value is 100 * segment + step, so its origin reads back."""
    rows = [
        {"step": s, "loss": 100.0 * seg + s}
        for seg, (a, b) in enumerate(starts_ends)
        for s in range(a, b + 1)
    ]
    return pl.DataFrame(rows)


def test_nested_restarts_take_each_value_from_the_right_segment():
    # 0..599, resume at 400 and reach 799, resume at 300 (earlier than the first) and reach 999
    run = load_run(_segments_log([(0, 599), (400, 799), (300, 999)]))
    view = build_view(run)
    assert sorted(run.abandoned[SEGMENT].unique().to_list()) == [0, 1]

    first = replay_from_view(view, 1)
    steps, old, new = first.pairs("loss")
    assert (steps[0], steps[-1]) == (400, 599)
    assert np.array_equal(old, steps + 0.0) and np.array_equal(new, steps + 100.0)  # seg 0 vs seg 1
    b_steps, b_vals = first.before["loss"]
    assert np.array_equal(b_steps, np.arange(0, 600)) and np.array_equal(
        b_vals, np.arange(0, 600) + 0.0
    )

    second = replay_from_view(view, 2)
    steps, old, new = second.pairs("loss")
    assert (steps[0], steps[-1]) == (300, 799)
    # what the log said last before restart 2: segment 0 below 400, segment 1 from 400
    assert np.array_equal(old, np.where(steps < 400, steps, steps + 100.0))
    assert np.array_equal(new, steps + 200.0)  # segment 2, from the kept frame
    b_steps, b_vals = second.before["loss"]
    assert np.array_equal(b_steps, np.arange(0, 800))
    assert np.array_equal(b_vals, np.where(b_steps < 400, b_steps, b_steps + 100.0))


def test_a_resume_that_crashed_again_before_the_end_of_its_replay():
    # 0..599; resume at 400 but crash at 450; resume at 420 and run on
    run = load_run(_segments_log([(0, 599), (400, 450), (420, 700)]))
    view = build_view(run)
    steps, old, new = replay_from_view(view, 1).pairs("loss")
    # segment 1 logged only 400..450 (its rows from 420 were rewritten by segment 2)
    assert (steps[0], steps[-1]) == (400, 450) and np.array_equal(new, steps + 100.0)
    steps, old, new = replay_from_view(view, 2).pairs("loss")
    assert (steps[0], steps[-1]) == (420, 599)
    assert np.array_equal(old, np.where(steps <= 450, steps + 100.0, steps + 0.0))
    assert np.array_equal(new, steps + 200.0)


@pytest.mark.parametrize("bump, severity", [(0.0, Severity.INFO), (2.5, Severity.WARNING)])
def test_per_rank_logs_are_judged_on_the_rank_mean(bump, severity):
    rng = np.random.default_rng(3)
    steps = np.arange(600)
    level = 3.0 + 2.0 * np.exp(-steps / 200.0)
    noise = rng.normal(0, 0.05, (2, 600))
    rows = []
    for seg, span in enumerate((range(500), range(400, 600))):
        for s in span:
            extra = bump * math.exp(-(s - 400) / 10.0) if seg == 1 else 0.0
            for rank in (0, 1):
                rows.append({"step": s, "rank": rank, "loss": level[s] + noise[rank, s] + extra})
    found, _ = replays(pl.DataFrame(rows))
    assert len(found) == 1 and found[0].severity is severity  # one event, not one per rank
    if bump:  # back when 2.5 exp(-k/10) falls under the band, give or take the noise
        ev = found[0].evidence
        assert abs(ev["steps_to_return"] - 10 * math.log(bump / ev["tolerance"])) <= 3


def test_analyze_terminal_shows_departure_and_return(cli):
    lost = cli("analyze", COMPARE / "restart-two-optimizer-lost" / "run.jsonl")
    flat = " ".join(lost.output.replace("│", " ").split())
    assert "restart-replay" in flat and "left the abandoned trajectory at step 1200" in flat
    assert "came back within noise of the abandoned trajectory after" in flat
    clean = cli("analyze", COMPARE / "restart-one-clean" / "run.jsonl")
    flat = " ".join(clean.output.replace("│", " ").split())
    assert "tracks the abandoned trajectory within noise" in flat


def test_analyze_json_carries_the_evidence(cli):
    out = cli("analyze", COMPARE / "restart-two-optimizer-lost" / "run.jsonl", "--format", "json")
    doc = json.loads(out.stdout)
    found = [f for f in doc["findings"] if f["code"] == "restart-replay"]
    assert {f["severity"] for f in found} == {"info", "warning"}
    warn = next(f for f in found if f["severity"] == "warning")
    assert {
        "steps_to_return",
        "mean_abs_deviation",
        "max_abs_deviation",
        "noise_sigma",
        "tolerance",
        "resumed_from_step",
        "last_step_before",
    } <= set(warn["evidence"])


def test_explain_documents_the_rule(cli):
    out = cli("explain", "restart-replay")
    assert (
        out.exit_code == 0 and "What it detects" in out.output and "optimizer-reset" in out.output
    )


def test_a_resume_that_goes_nan_is_a_departure_that_never_returns():
    rows = _segments_log([(0, 599), (400, 799)]).with_columns(
        # a smooth healthy loss before; the resumed segment turns NaN from step 450
        pl.when(pl.int_range(pl.len()) >= 600 + 50)
        .then(float("nan"))
        .otherwise(3.0 + 0.001 * pl.col("step") % 1)
        .alias("loss")
    )
    found, _ = replays(rows)
    ev = found[0].evidence
    assert found[0].severity is Severity.WARNING and ev["first_outside"] == 450
    assert ev["steps_to_return"] is None and ev["nonfinite_mismatches"] == 150
