"""`stab postmortem`: every number traced to the log, nothing invented."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from stabilitycli.compare.expect import parse_expect
from stabilitycli.postmortem.data import build, ema_before, round_up
from stabilitycli.report.postmortem import render
from tests.conftest import run_fixture
from tests.report.helpers import analyse_path, analysed, loss_rows, write_jsonl


def _pm(name: str):
    data, analysis = analysed(name)
    return build(analysis, data)


def _symptoms(incident) -> dict:
    return dict(incident.symptoms)


def test_long_tail_spike_numbers_come_from_the_log() -> None:
    pm = _pm("spike-long-tail")
    assert [i.kind for i in pm.incidents] == ["spike"]
    inc = pm.incidents[0]
    rows = loss_rows("spike-long-tail")
    by_step = {r["step"]: r for r in rows}
    s = _symptoms(inc)
    assert s["step where the spike began"] == 900
    # the 50-step EMA, recomputed here by the textbook recursion over the raw log
    ema = None
    for r in rows:
        if r["step"] >= 900:
            break
        ema = r["train/loss"] if ema is None else ema + (2 / 51) * (r["train/loss"] - ema)
    assert s["pre-spike loss (50-step EMA)"] == f"{ema:.4g}"
    assert s["peak loss (step 900)"].startswith(f"{by_step[900]['train/loss']:.4g}")
    assert s["loss 50 steps after the peak"] == f"{by_step[950]['train/loss']:.4g} (step 950)"
    # a JSONL log does not say whether its grad norm is before clipping: "grad norm" (issue 35)
    assert "pre-clip grad norm at the spike" not in s
    assert s["grad norm at the spike"].startswith(
        f"{by_step[899]['train/grad_norm']:.4g} at step 899"
    )
    assert s["LR at the spike"] == f"{by_step[900]['train/lr']:.4g}"
    # what the log cannot say is left to a person
    assert s["unusual tokens in that batch"] is None
    assert s["batch index at the spike"] is None  # no batch id in this log
    assert s["dtype regime"] is None


def test_long_tail_hypotheses_ranked_with_the_discriminating_numbers() -> None:
    inc = _pm("spike-long-tail").incidents[0]
    first = inc.hypotheses[0]
    assert (first.code, first.status, first.series) == ("long-tail-token", "supported", "grad_norm")
    assert first.numbers["ratio"] >= 30
    status = {h.code: h.status for h in inc.hypotheses}
    assert status["lr-discontinuity"] == "ruled out"
    assert status["optimizer-reset"] == "ruled out"
    assert status["duplicate-batch"] == "not testable"  # no batch id logged
    assert "899" in inc.root_cause and "26.13" in inc.root_cause
    assert "needs a human" in inc.root_cause  # which tokens: not in the log


def test_verification_bounds_and_compare_arguments() -> None:
    data, analysis = analysed("spike-long-tail")
    spike = next(f for f in analysis.findings if f.code == "spike")
    inc = build(analysis, data).incidents[0]
    thr = round_up(spike.evidence["threshold"])
    assert thr >= spike.evidence["threshold"] and thr < spike.evidence["peak"]
    assert inc.expects[0] == f"loss@900<{thr:g}"
    grad = spike.evidence["causes"][0]
    g_bound = round_up(10 * grad["grad_norm_baseline"])
    assert inc.expects[1] == f"max(grad_norm)[897:950]<{g_bound:g}"
    assert g_bound < grad["grad_norm"]  # the broken run fails its own check
    text = render(build(analysis, data))
    assert f'--expect "loss@900<{thr:g}" --expect "max(grad_norm)[897:950]<{g_bound:g}"' in text
    assert inc.cost.steps == spike.evidence["recovery_steps"] and not inc.cost.until_end_of_log


@pytest.mark.parametrize(
    ("fixture", "cause"),
    [
        ("spike-lr-jump", "lr-discontinuity"),
        ("spike-duplicate-batch", "duplicate-batch"),
        ("spike-after-restart", "optimizer-reset"),
    ],
)
def test_each_cause_is_the_top_hypothesis(fixture: str, cause: str) -> None:
    inc = _pm(fixture).incidents[0]
    assert inc.hypotheses[0].code == cause and inc.hypotheses[0].status == "supported"
    others = [h for h in inc.hypotheses[1:] if h.status == "supported"]
    assert not others, [h.code for h in others]
    assert inc.root_cause


def test_duplicate_batch_shows_the_batch_index() -> None:
    s = _symptoms(_pm("spike-duplicate-batch").incidents[0])
    assert s["batch index at the spike"] == 6063


def test_persistent_spike_did_not_recover_and_reloads_first() -> None:
    inc = _pm("spike-persistent").incidents[0]
    s = _symptoms(inc)
    assert s["loss 50 steps after the peak"].startswith("did not recover")
    assert inc.remediation[0].startswith("reload the last checkpoint before step 800")
    assert any(e.startswith("loss@850<") for e in inc.expects)
    assert inc.cost.until_end_of_log is False or inc.cost.steps > 50


def test_two_spikes_two_sections(tmp_path) -> None:
    rng = np.random.default_rng(3)
    rows = []
    for step in range(1200):
        loss = 3.0 + 0.03 * rng.standard_normal()
        if step in (400, 401):
            loss = 6.0
        if step in (900, 901, 902):
            loss = 5.5
        rows.append({"step": step, "loss": round(loss, 5), "grad_norm": 0.5})
    data, analysis = analyse_path(write_jsonl(tmp_path / "two" / "run.jsonl", rows))
    text = render(build(analysis, data))
    assert "## 1. Loss spike at step 400" in text and "## 2. Loss spike at step 900" in text
    assert text.count("### 1. Symptoms") == 2


def test_healthy_run_says_so_and_invents_nothing() -> None:
    text = render(_pm("healthy-low-noise"), date="2025-01-02")
    assert text.startswith("# Run post-mortem — 2025-01-02 — healthy-low-noise")
    assert "No loss spike, NaN or divergence" in text and "**healthy**" in text
    assert "Root cause" not in text and "--expect" not in text


def test_nan_fp32_names_the_layer_and_the_wasted_steps() -> None:
    pm = _pm("nan-fp32-origin")
    inc = next(i for i in pm.incidents if i.kind == "nan")
    s = _symptoms(inc)
    assert s["first non-finite step"] == 1200
    assert s["recovery"] == "did not recover"
    assert s["first non-finite layer"].startswith("h.1.mlp")
    assert inc.hypotheses[0].code == "layer-origin"
    status = {h.code: h.status for h in inc.hypotheses}
    assert "activation-overflow" not in status  # fp32: no fp16 hypothesis at all
    assert status["poisoned-weights"] == "supported"
    # the verdict's remedies (one source for every output), back before the first NaN first
    assert inc.remediation == pm.remediation
    assert inc.remediation[0].startswith("resume from the last checkpoint before step 1200")
    assert inc.cost.until_end_of_log and inc.cost.steps == 1499 - 1200
    assert inc.expects[0].startswith("loss@1200<") and inc.expects[1].startswith(
        "max(loss)[1200:1499]<"
    )


def test_nan_fp16_points_at_overflow() -> None:
    inc = next(i for i in _pm("nan-fp16-overflow").incidents if i.kind == "nan")
    assert (
        inc.hypotheses[0].code == "activation-overflow" and inc.hypotheses[0].status == "supported"
    )
    assert "loss scale at that step" in _symptoms(inc)


def test_divergence_section() -> None:
    data, analysis = analysed("divergence-grad-norm")
    div = next(f for f in analysis.findings if f.code == "divergence")
    inc = next(i for i in build(analysis, data).incidents if i.kind == "divergence")
    assert inc.hypotheses[0].code == "grad-norm-rising"
    assert inc.expects == [
        f"loss@{data.source.last_step}<{round_up(div.evidence['start_level']):g}"
    ]


def test_cost_in_tokens_when_logged(tmp_path) -> None:
    rows = loss_rows("spike-long-tail")
    for r in rows:
        r["tokens"] = 4096 * (r["step"] + 1)
    data, analysis = analyse_path(write_jsonl(tmp_path / "tok" / "run.jsonl", rows))
    inc = build(analysis, data).incidents[0]
    assert inc.cost.tokens == 4096 * inc.cost.steps
    assert f"{inc.cost.tokens:,.0f} tokens" in render(build(analysis, data))


def test_ema_follows_the_logging_interval(tmp_path) -> None:
    # a log every 10 steps: 50 steps = 5 points, alpha = 2 / 6
    rows = [{"step": s, "loss": 1.0 if s < 500 else 2.0} for s in range(0, 600, 10)]
    data, _ = analyse_path(write_jsonl(tmp_path / "sparse" / "run.jsonl", rows))
    from stabilitycli.detect.series import build_view

    view = build_view(data)
    expected = 1.0
    for _ in range(5):  # five points at 2.0 (steps 500..540) before step 550
        expected += (2 / 6) * (2.0 - expected)
    assert math.isclose(ema_before(view, 550), expected, rel_tol=1e-12)


def test_strings_from_the_log_stay_text(tmp_path) -> None:
    rows = loss_rows("spike-long-tail")
    folder = tmp_path / "<img src=x onerror=alert(1)>"
    data, analysis = analyse_path(write_jsonl(folder / "run.jsonl", rows))
    text = render(build(analysis, data))
    # inside a code span it is shown literally (safe); everywhere else it is escaped
    prose = re.sub(r"`[^`]*`", "", text)
    assert "<img" not in prose and "&lt;img src=x onerror=alert(1)>" in prose


def test_cli_writes_the_file(cli, tmp_path) -> None:
    out = tmp_path / "pm.md"
    result = cli("postmortem", run_fixture("spike-long-tail"), "-o", out)
    assert result.exit_code == 0 and out.read_text().startswith("# Loss spike post-mortem")
    missing = cli("postmortem", tmp_path / "nope.jsonl", "-o", "-")
    assert missing.exit_code == 2 and len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "fixture",
    [
        "spike-long-tail",
        "spike-persistent",
        "spike-lr-jump",
        "nan-fp32-origin",
        "nan-fp16-overflow",
        "divergence-grad-norm",
        "spike-after-restart",
    ],
)
def test_expect_strings_parse_for_stab_compare(fixture: str) -> None:
    for incident in _pm(fixture).incidents:
        for text in incident.expects:
            assert parse_expect(text).text == text


def test_verification_fails_on_the_broken_run_and_holds_on_a_healthy_one(cli) -> None:
    args = [a for e in _pm("spike-long-tail").incidents[0].expects for a in ("--expect", e)]
    assert cli("compare", run_fixture("spike-long-tail"), *args).exit_code == 1
    assert cli("compare", run_fixture("healthy-low-noise"), *args).exit_code == 0


def test_rank_outlier_explains_the_spike_of_the_mean() -> None:
    """One event, one account: the rank's section tells the spike of the mean it caused."""
    from tests.conftest import FIXTURES

    data, analysis = analyse_path(FIXTURES / "ranks" / "seed_64")
    pm = build(analysis, data)
    assert [i.kind for i in pm.incidents] == ["rank"]
    inc = pm.incidents[0]
    sym = _symptoms(inc)
    assert sym["rank"] == 41 and sym["first step out of line with the cohort"] == 1200
    assert sym["what the mean over ranks shows"].startswith(
        "a loss spike from step 1200 (peak 2.634 at step 1265), explained by this rank"
    )
    assert inc.root_cause.startswith("Rank 41 left the cohort at step 1200")


# ---------------------------------------------------------------- every verdict (issue 16)

NOT_HEALTHY = [
    ("loss-scale-collapsed", "loss-scale-collapsed", "Loss-scale collapse"),
    ("loss-scale-static", "loss-scale-static", "Static loss scale"),
    ("fp16-overflow", "fp16-overflow", "fp16 overflow"),
    ("plateau", "plateau", "Plateau"),
    ("insufficient-short", "insufficient-data", "Short log"),
]


@pytest.mark.parametrize(("fixture", "kind", "heading"), NOT_HEALTHY)
def test_every_verdict_that_is_not_healthy_gets_a_section(fixture, kind, heading) -> None:
    pm = _pm(fixture)
    assert pm.verdict == kind
    assert [i.kind for i in pm.incidents] == [kind]
    text = render(pm, date="2025-01-02")
    assert text.startswith(f"# {heading} post-mortem")
    assert "found no incident" not in text and "No loss spike, NaN or divergence" not in text
    inc = pm.incidents[0]
    assert inc.remediation and inc.verification
    assert len(set(inc.remediation)) == len(inc.remediation)
    for e in inc.expects:
        assert parse_expect(e).text == e


def test_rank_outlier_section_numbers_are_the_evidence() -> None:
    from tests.conftest import FIXTURES

    data, analysis = analyse_path(FIXTURES / "ranks" / "two_outliers.jsonl.gz")
    assert analysis.verdict.code == "rank-outlier"
    pm = build(analysis, data)
    assert [i.kind for i in pm.incidents] == ["rank", "rank"]
    text = render(pm)
    assert text.startswith("# Rank outlier post-mortem")
    for inc, finding in zip(
        pm.incidents, [f for f in analysis.findings if f.code == "rank-outlier"], strict=True
    ):
        ev, sym = finding.evidence, _symptoms(inc)
        a, b = ev["effect_steps"]
        assert sym["rank"] == finding.rank
        assert sym["first step out of line with the cohort"] == finding.step
        who = f"rank {finding.rank}"
        assert sym[f"{who}'s loss (median over steps {a}–{b})"] == f"{ev['value']:.4g}"
        assert sym[f"cohort median of loss (median over steps {a}–{b})"] == (
            f"{ev['cohort_median']:.4g}"
        )
        means = sym[f"mean loss over ranks, with / without {who} (means over steps {a}–{b})"]
        assert means.startswith(f"{ev['mean_with']:.4g} / {ev['mean_without']:.4g}")
        assert f"{ev['mean_shift']:+.3g}" in means
        # what to check on that host and shard
        assert any("host that ran " + who in r and "ECC" in r for r in inc.remediation)
        assert any(f"{who}'s data shard" in r for r in inc.remediation)
        # the verification bound sits between the mean with and without the rank
        [expect] = inc.expects
        bound = parse_expect(expect).threshold
        lo, hi = sorted((ev["mean_with"], ev["mean_without"]))
        assert lo < bound < hi
    assert _symptoms(pm.incidents[1])["back in line from step"] == 320


def test_rank_nonfinite_and_straggler_get_a_section() -> None:
    from tests.conftest import FIXTURES

    data, analysis = analyse_path(FIXTURES / "ranks" / "nan_rank.jsonl.gz")
    kinds = [i.kind for i in build(analysis, data).incidents]
    assert kinds == ["nan", "rank"]
    data, analysis = analyse_path(FIXTURES / "ranks" / "straggler.jsonl.gz")
    [inc] = build(analysis, data).incidents
    assert inc.title == "Rank 17 runs slow from step 100"


def test_loss_scale_collapse_numbers_and_check(cli) -> None:
    data, analysis = analysed("loss-scale-collapsed")
    ev = next(f for f in analysis.findings if f.code == "loss-scale-collapsed").evidence
    [inc] = build(analysis, data).incidents
    sym = _symptoms(inc)
    assert sym["first overflow step"] == ev["first_overflow_step"]
    assert sym["loss scale: largest / smallest logged"] == (
        f"{ev['scale_max']:g} / {ev['scale_min']:g}"
    )
    # the scaler is seen at work: never told to enable it
    assert not any("enable dynamic" in r for r in inc.remediation)
    args = [a for e in inc.expects for a in ("--expect", e)]
    broken = cli("compare", run_fixture("loss-scale-collapsed"), *args)
    healthy = cli("compare", run_fixture("fp16-healthy-scaler"), *args)
    assert broken.exception is None or isinstance(broken.exception, SystemExit)
    assert broken.exit_code == 1 and healthy.exit_code == 0


def test_cli_postmortem_of_a_rank_outlier(cli) -> None:
    from tests.conftest import FIXTURES

    result = cli("postmortem", FIXTURES / "ranks" / "two_outliers.jsonl.gz", "-o", "-")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1  # an outlier rank: exit as analyze
    assert "## 1. Rank 3 out of line with the cohort from step 200" in result.output
    assert "found no incident" not in result.output


def test_labels_follow_the_thresholds_in_force(cli) -> None:
    """The post-mortem's own labels come from the thresholds in force, not the defaults."""
    out = cli(
        "postmortem",
        run_fixture("spike-persistent"),
        "--set",
        "recovery_window_steps=120",
        "--set",
        "spike_window_steps=150",
        "-o",
        "-",
    )
    assert isinstance(out.exception, SystemExit) and out.exit_code == 1  # exit as analyze
    text = out.stdout
    assert "baseline mu / sigma (trailing 150 steps: steps 650-799)" in text
    assert "loss 120 steps after the peak" in text and "within 120 steps;" in text
    assert "trailing 100 steps" not in text and "loss 50 steps after" not in text
    assert "recovery_window_steps = 120 (default 50; from --set recovery_window_steps=120)" in text


def test_divergence_last_loss_says_its_step() -> None:
    data, analysis = analysed("divergence-grad-norm")
    [inc] = build(analysis, data).incidents
    ev = next(f for f in analysis.findings if f.code == "divergence").evidence
    steps, loss = data_points(data)
    assert _symptoms(inc)[f"last finite loss (step {int(steps[-1])})"] == f"{ev['final_loss']:.4g}"
    assert ev["final_loss"] == loss[-1]


def data_points(data):
    from stabilitycli.detect.series import build_view

    return build_view(data).finite_points("loss")


def test_every_fixture_that_is_not_healthy_has_a_section() -> None:
    """No verdict but `healthy` leaves the post-mortem without an incident to write up."""
    from tests.conftest import all_runs

    for name in all_runs():
        pm = _pm(name)
        if pm.verdict != "healthy":
            assert pm.incidents, f"{name}: verdict {pm.verdict} and no section"
            assert "found no incident" not in render(pm), name


def test_recurring_spikes_are_one_incident_with_the_verdicts_remedies() -> None:
    """Many causeless one-point spikes (the recurring form of spike-recoverable) are written
    up as one section, its numbers the finding's evidence and its remedies the verdict's."""
    from tests.conftest import FIXTURES

    data, analysis = analyse_path(
        FIXTURES / "rules" / "recurring-spikes" / "fires" / "run.jsonl.gz"
    )
    assert analysis.verdict.code == "spike-recoverable"
    ev = next(f for f in analysis.findings if f.code == "recurring-spikes").evidence
    pm = build(analysis, data)
    [inc] = pm.incidents
    assert inc.kind == "recurring-spikes"
    count, steps = ev["count"], ev["steps"]
    assert inc.title.startswith(f"{count} recurring one-point loss spikes, steps {steps[0]}–")
    sym = _symptoms(inc)
    assert sym["one-point loss spikes with no evident cause (count)"] == count
    assert sym["steps where they began"].startswith(f"{steps[0]}, ")
    assert sym["steps where they began"] == ", ".join(map(str, steps))
    size = sym["size: peak loss / the trailing mean before it (smallest – largest)"]
    assert size == f"{ev['ratio_min']:.2f}x – {ev['ratio_max']:.2f}x"
    assert inc.remediation == list(analysis.verdict.remediation) and inc.remediation
    assert inc.root_cause and "rare batches" in inc.root_cause
    assert any(f"at most {count} one-point loss spikes" in v for v in inc.verification)
    text = render(pm, date="2025-01-02")
    assert text.startswith("# Loss spike post-mortem")
    assert "found no incident" not in text and "No loss spike, NaN or divergence" not in text
    assert f"- {analysis.verdict.remediation[0]}" in text


def test_recurring_spikes_list_the_first_20_steps() -> None:
    from stabilitycli.postmortem.data import _steps_list

    steps = list(range(100, 2600, 100))
    assert _steps_list(steps) == ", ".join(map(str, steps[:20])) + ", and 5 more"
