"""Issue 35 part 4: one account of each event across commands, on the inputs the issue names.

`compare`, `compare --restart`, `analyze` and `postmortem` either agree on an event's onset,
recovery and size, or the sentence says why its number differs; every JSON field a sentence
reads is defined in docs/analysis-contract.md.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from stabilitycli import analyze
from tests.conftest import FIXTURES, REAL_LOGS, ROOT, run_fixture

RESTARTS = FIXTURES / "compare" / "restart-two-optimizer-lost" / "run.jsonl"
MEGATRON_N16 = REAL_LOGS / "bigscience-perf-runs" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_compare_says_why_a_one_point_grad_norm_surge_is_ok(cli) -> None:
    """`analyze` flags the 55x grad-norm surge at step 899; `compare` against the fixed run
    judges grad_norm ok, and now says its max|Δ| at 899 is one point the median absorbs."""
    baseline = run_fixture("spike-long-tail")
    candidate = FIXTURES / "compare" / "fix-removes-spike" / "run.jsonl"
    cause = next(f for f in analyze(baseline).findings if f.code == "spike").evidence["causes"][0]
    assert cause["grad_norm_step"] == 899 and cause["ratio"] > 50
    result = cli("compare", baseline, candidate, "--format", "terminal")
    assert result.exit_code == 0, result.output
    out = _flat(result.stdout)
    assert re.search(r"grad_norm 1500 \S+ 25\.7 899 \S+ 0 — — ok", out), out
    assert (
        "grad_norm: max|Δ| 25.7 at 899 is beyond the band at that point, but each point is "
        "judged on the median deviation of the 5 points centred on it"
    ) in out
    assert "loss: max|Δ|" not in out  # the loss is judged better, not ok: no note


def test_restart_recovery_and_spike_recovery_say_which_level_they_mean(cli) -> None:
    """After restart 2: back within the abandoned run's band after 28 steps (compare --restart
    and the replay finding), recovered to the pre-spike baseline in 48 steps (the spike)."""
    compare = _flat(cli("compare", RESTARTS, "--restart", "2").stdout)
    assert "came back within the band of the abandoned loss after 28 steps (step 1228" in compare
    assert "not to the pre-spike baseline that `analyze` times a spike's recovery" in compare
    result = analyze(RESTARTS)
    spike = next(f for f in result.findings if f.code == "spike" and f.step == 1200)
    ev = spike.evidence
    replay = next(f for f in result.findings if f.code == "restart-replay" and f.step == 1200)
    assert "came back within noise of the abandoned trajectory after 28 steps" in replay.message
    assert "not to the pre-spike baseline a spike's recovery is timed against" in replay.message
    level = f"{ev['recovery_level']:.4g}"
    assert (
        f"recovered in 48 steps (back to <= {level}, the baseline mean + 0.5*sigma, at step 1248)"
    ) in result.verdict.summary
    # the JSON's end_step and the recovery step are two different steps, each named
    assert (spike.end_step, ev["recovery_step"]) == (1225, 1248)
    assert (
        f"above the spike bar through step 1225, back to <= {level} (baseline mean + "
        "0.5*sigma) by step 1248 (48 steps after onset)"
    ) in spike.message
    post = cli("postmortem", RESTARTS, "-o", "-").stdout
    assert "- 48 steps until recovery" in post


def test_the_spike_runs_end_step_and_recovery_step_agree_with_its_message() -> None:
    result = analyze(run_fixture("spike-long-tail"))
    spike = next(f for f in result.findings if f.code == "spike")
    doc = spike.to_dict()
    assert f"through step {doc['end_step']}," in spike.message
    assert f"by step {doc['evidence']['recovery_step']}" in spike.message


def _megatron_losses() -> tuple[np.ndarray, np.ndarray]:
    """An independent parse of the Megatron log: (iteration, lm loss) per line."""
    pattern = re.compile(r"iteration\s+(\d+)/.*?lm loss: ([0-9.E+-]+)")
    found = [pattern.search(line) for line in MEGATRON_N16.read_text().splitlines()]
    pairs = [(int(m[1]), float(m[2])) for m in found if m]
    steps, loss = (np.array(v) for v in zip(*pairs, strict=True))
    return steps, loss


def test_the_megatron_divergence_starts_where_the_loss_stops_falling() -> None:
    if not MEGATRON_N16.exists():
        pytest.skip("shared real logs not beside the checkout")
    steps, loss = _megatron_losses()
    result = analyze(MEGATRON_N16)
    div = next(f for f in result.findings if f.code == "divergence")
    ev = div.evidence
    trough = int(steps[np.argmin(loss[steps <= ev["end_step"]])])
    assert ev["start_step"] == trough == 31
    at = float(loss[steps == 31][0])
    assert f"from {at:.4g} (the median of steps 31-31)" in div.message
    # the loss after the reported start only rises, and "never back down" is about what
    # follows the trend window: every point after it is above the level named
    after_start = loss[steps >= ev["start_step"]]
    assert after_start.min() == at
    assert f"after step {ev['end_step']}, never back down to {ev['start_level']:.4g}" in (
        div.message
    )
    assert loss[steps > ev["end_step"]].min() > ev["start_level"]
    assert "the median of steps 28-28" not in result.verdict.summary


CONTRACT = (ROOT / "docs" / "analysis-contract.md").read_text()


@pytest.mark.parametrize(
    "field",
    [
        "end_step",
        "recovery_step",
        "recovery_steps",
        "recovery_level",
        "within_from",
        "start_step",
        "start_level",
        "after_min",
        "max_abs_deviation",
        "max_deviation_at",
        "judge_points",
        "points_from_first",
        "loss_falls",
    ],
)
def test_every_field_a_sentence_names_is_defined(field: str) -> None:
    assert f"`{field}`" in CONTRACT, field


def test_json_and_sentence_name_the_same_steps(cli) -> None:
    doc = json.loads(cli("analyze", RESTARTS, "--format", "json").stdout)
    spike = next(f for f in doc["findings"] if f["code"] == "spike" and f["step"] == 1200)
    assert f"through step {spike['end_step']}," in spike["message"]
    assert f"by step {spike['evidence']['recovery_step']}" in spike["message"]
    assert f"at step {spike['evidence']['recovery_step']})" in doc["verdict"]["summary"]
