"""`stab compare`: the --expect grammar, the library on seeded reruns, and the CLI as CI runs it.

Fixtures: fixtures/compare/ (scripts/make_compare_fixtures.py, the loss model of
scripts/make_fixtures.py) and fixtures/runs/spike-long-tail as the broken run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex

import numpy as np
import polars as pl
import pytest

from stabilitycli.compare.expect import ExpectSyntaxError, parse_expect
from stabilitycli.compare.runs import CompareOptions, check_run, compare, compare_restart
from stabilitycli.core.errors import StabUsageError
from stabilitycli.detect.deviation import Smoothing
from stabilitycli.ingest import read
from stabilitycli.pipeline.run import load_run
from tests.conftest import FIXTURES, ROOT, RUNS

COMPARE = FIXTURES / "compare"


def _load_generator():
    """scripts/make_fixtures.py (a script, not a package): its loss model makes in-memory runs."""
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", ROOT / "scripts" / "make_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


base_run = _load_generator().base_run


def run(name: str):
    return read(COMPARE / name / "run.jsonl")


def expected(name: str) -> dict:
    return json.loads((COMPARE / name / "expected.json").read_text())


@pytest.fixture(scope="module")
def baseline():
    return run("baseline")


def frame_run(steps, **metrics):
    """A run from arrays (NaN is a logged NaN) or polars Series (null: not logged at that step)."""
    columns = {k: v if isinstance(v, pl.Series) else np.asarray(v) for k, v in metrics.items()}
    return load_run(pl.DataFrame({"step": np.asarray(steps), **columns}))


# ---------------------------------------------------------------- the --expect grammar


def test_point_check_parses():
    c = parse_expect("loss@312<2.5")
    assert (c.side, c.metric, c.aggregate, c.at, c.op, c.threshold) == (
        "candidate",
        "loss",
        None,
        312,
        "<",
        2.5,
    )
    assert c.target == "loss@312"


def test_aggregate_check_parses_with_spaces_and_exponents():
    c = parse_expect("  max ( grad_norm ) [ 300 : 400 ] <= 3e0 ")
    assert (c.aggregate, c.metric, c.start, c.end, c.op, c.threshold) == (
        "max",
        "grad_norm",
        300,
        400,
        "<=",
        3.0,
    )
    assert c.target == "max(grad_norm)[300:400]"


@pytest.mark.parametrize(
    "text, start, end",
    [
        ("mean(loss)[:400]>1", None, 400),
        ("min(loss)[300:]>1", 300, None),
        ("last(loss)>1", None, None),
    ],
)
def test_open_ranges(text, start, end):
    c = parse_expect(text)
    assert (c.start, c.end) == (start, end)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "=="])
def test_every_operator(op):
    assert parse_expect(f"loss@1{op}2").op == op


def test_sides_raw_metric_names_and_numbers():
    assert parse_expect("baseline:loss@900>3").side == "baseline"
    assert parse_expect("candidate: loss@900<3").side == "candidate"
    c = parse_expect("mean(act_norm/h.0.attn)[10:20]>=-1.5e-3")
    assert (c.metric, c.threshold) == ("act_norm/h.0.attn", -1.5e-3)
    assert parse_expect("max(loss)[0:10]<inf").threshold == math.inf
    # a metric may be called like an aggregate when it is not used as one
    assert parse_expect("max@5<1").metric == "max"


@pytest.mark.parametrize(
    "text, column, fragment",
    [
        ("", 1, "empty expression"),
        ("loss@31x<2.5", 8, "comparison operator"),
        ("loss<2.5", 5, "expected '@STEP'"),
        ("max(grad_norm[300:400]<3", 14, "')'"),
        ("max(grad_norm)[300-400]<3", 19, "':'"),
        ("max(grad_norm)[400:300]<3", 15, "empty step range"),
        ("loss@312<", 10, "expected a number"),
        ("loss@312<nan", 10, "expected a number"),
        ("loss@312 =< 2.5", 10, "comparison operator"),
        ("loss@312<2.5 extra", 14, "unexpected text"),
        ("loss@312<2.5; import os", 13, "unexpected text"),
        ("@312<2", 1, "metric name"),
        ("baseline:@312<1", 10, "metric name after 'baseline:'"),
        ("median(loss)[1:2]<3", 7, "is not an aggregate stab knows"),
        ("__import__('os').system('x')", 11, "is not an aggregate stab knows"),
        ("loss@abc<1", 6, "step number"),
    ],
)
def test_malformed_expressions_name_the_column(text, column, fragment):
    with pytest.raises(ExpectSyntaxError) as info:
        parse_expect(text)
    err = info.value
    assert isinstance(err, StabUsageError)  # the CLI turns it into exit 2
    assert err.position == column, str(err)
    assert fragment in str(err)
    assert repr(text) in str(err) and f"column {column}" in str(err)


def test_evaluation_on_logged_points():
    steps = np.array([300, 310, 320, 330])
    vals = np.array([1.0, 2.5, 0.5, 1.5])
    assert parse_expect("max(g)[300:320]<3").evaluate(steps, vals).value == 2.5
    assert parse_expect("min(g)[310:330]>0.4").evaluate(steps, vals).holds
    assert parse_expect("mean(g)<1.5").evaluate(steps, vals).value == pytest.approx(1.375)
    assert parse_expect("last(g)[:325]==0.5").evaluate(steps, vals).holds
    missing = parse_expect("g@315<9").evaluate(steps, vals)
    assert not missing.holds and "nearest logged: 310, 320" in missing.reason
    empty = parse_expect("max(g)[400:500]<9").evaluate(steps, vals)
    assert not empty.holds and empty.value is None


def test_a_nan_in_the_range_fails_the_check():
    steps = np.arange(5)
    vals = np.array([1.0, np.nan, 1.0, np.inf, 1.0])
    assert not parse_expect("max(loss)[0:2]<10").evaluate(steps, vals).holds
    assert parse_expect("max(loss)[0:2]<10").evaluate(steps, vals).reason == "the value is NaN"
    assert not parse_expect("max(loss)[3:3]<10").evaluate(steps, vals).holds  # +Inf
    assert parse_expect("max(loss)[4:4]<10").evaluate(steps, vals).holds


# ---------------------------------------------------------------- two runs


def test_identical_rerun_passes_with_zero_deviation(baseline):
    result = compare(baseline, run("rerun-identical"))
    assert result.passed and expected("rerun-identical")["passes"]
    assert [m.metric for m in result.metrics] == ["loss", "grad_norm", "lr"]
    for m in result.metrics:
        assert (
            m.stats["max_abs_deviation"] == 0
            and m.stats["points_outside"] == 0
            and m.grid == "both"
        )


def test_rerun_within_noise_passes_with_the_default_noise_band(baseline):
    result = compare(baseline, run("rerun-noise"))
    loss = result.metric("loss")
    assert result.passed
    assert (
        loss.tolerance["kind"] == "noise"
        and "local sigma of the baseline" in loss.tolerance["origin"]
    )
    assert 0 < loss.stats["worst_band_ratio"] < 1
    # the deviation is real (another seed's noise): a strict 0.05 band fails on it
    strict = compare(
        baseline, run("rerun-noise"), CompareOptions(tolerance={"loss": 0.05}, strict=True)
    )
    assert not strict.metric("loss").passed and strict.metric("loss").stats["points_outside"] > 100


def test_noise_band_follows_the_noise_level(baseline):
    """Early steps are noisier (the noise scales with the loss): the band is wider there."""
    tol = compare(baseline, run("rerun-noise")).metric("loss").tolerance
    assert tol["max"] > 2.5 * tol["min"]
    # 3 x sqrt(2) x sigma, and sigma is near the generator's 3% of a loss of ~2.6 late in the run
    assert 0.06 < tol["noise_sigma"] < 0.12


@pytest.mark.parametrize("seed", [201, 202, 203, 204, 205, 206])
def test_other_seeds_within_noise_pass(seed):
    """Not one lucky seed: reruns with six more seeds pass with the default band."""
    a, b = base_run(100), base_run(seed)
    result = compare(
        frame_run(a["step"], loss=a["loss"], grad_norm=a["grad_norm"]),
        frame_run(b["step"], loss=b["loss"], grad_norm=b["grad_norm"]),
    )
    assert result.passed, [(m.metric, m.stats["worst_band_ratio"]) for m in result.metrics]


def test_drift_fails_and_reports_divergence_near_its_onset(baseline):
    exp = expected("rerun-drift")
    result = compare(baseline, run("rerun-drift"))
    loss = result.metric("loss")
    assert not result.passed and not loss.passed
    assert abs(loss.stats["diverged_at"] - exp["diverges_at"]) <= exp["step_tolerance"]
    assert loss.stats["first_outside"] >= exp["diverges_at"]  # nothing before the drift
    assert loss.stats["within_from"] is None
    assert result.metric("grad_norm").passed  # only the loss drifted


def test_drift_outside_the_compared_range_passes(baseline):
    assert compare(baseline, run("rerun-drift"), CompareOptions(until=990)).passed


def test_every_10_steps_against_every_step(baseline):
    coarse = run("every-10")
    result = compare(baseline, coarse)
    loss = result.metric("loss")
    assert result.passed and expected("every-10")["passes"]
    assert (loss.grid, loss.points, loss.interpolated_points) == ("candidate", 150, 0)
    reverse = compare(coarse, baseline).metric("loss")
    assert (reverse.grid, reverse.points, reverse.passed) == ("baseline", 150, True)


def test_offset_grids_are_interpolated():
    a = base_run(100)
    fine = frame_run(a["step"][::2], loss=a["loss"][::2])  # even steps
    coarse = frame_run(a["step"][5::10], loss=a["loss"][5::10])  # 5, 15, 25: never logged by `fine`
    loss = compare(fine, coarse).metric("loss")
    assert loss.grid == "candidate" and loss.interpolated_points == loss.points == 150
    assert loss.passed  # interpolation between two noisy neighbours stays within the noise band


def test_token_axis_aligns_a_bigger_batch(baseline):
    big = run("double-batch")
    # two-sided: the same curve on tokens; per step the bigger batch is lower (one-sided passes)
    opts = CompareOptions(metrics=("loss",), x="tokens", band="two-sided")
    on_tokens = compare(baseline, big, opts)
    on_steps = compare(baseline, big, CompareOptions(metrics=("loss",), band="two-sided"))
    assert on_tokens.passed and not on_steps.passed
    assert compare(baseline, big, CompareOptions(metrics=("loss",))).passed
    loss = on_tokens.metric("loss")
    assert loss.grid == "candidate" and loss.interpolated_points == 0 and loss.first == 16384
    assert on_tokens.to_dict()["x"] == "tokens"


def test_token_axis_needs_tokens(baseline):
    with pytest.raises(StabUsageError, match="logs no tokens"):
        compare(baseline, read(RUNS / "spike-long-tail" / "run.jsonl"), CompareOptions(x="tokens"))


@pytest.mark.parametrize("smooth", ["ema:0.1", "window:20", "ema:0.02"])
def test_smoothed_curves(baseline, smooth):
    opts = CompareOptions(smoothing=Smoothing.parse(smooth))
    ok = compare(baseline, run("rerun-noise"), opts)
    assert ok.passed and ok.smoothing == smooth
    assert "noise shrink" in ok.metric("loss").tolerance["origin"]
    drift = compare(baseline, run("rerun-drift"), opts).metric("loss")
    assert not drift.passed and abs(drift.stats["diverged_at"] - 1000) <= 30


def test_smoothing_narrows_the_band(baseline):
    raw = compare(baseline, run("rerun-noise")).metric("loss").tolerance["median"]
    smooth = compare(baseline, run("rerun-noise"), CompareOptions(smoothing=Smoothing("ema", 0.05)))
    assert smooth.metric("loss").tolerance["median"] < 0.5 * raw


@pytest.mark.parametrize("bad", ["ema:0", "ema:1.5", "window:0", "window:2.5", "median:5", "ema"])
def test_bad_smoothing_is_a_usage_error(bad):
    with pytest.raises(StabUsageError, match="--smooth"):
        Smoothing.parse(bad)


def test_relative_tolerance(baseline):
    result = compare(baseline, run("rerun-noise"), CompareOptions(rel_tolerance={"*": 0.5}))
    assert result.passed and result.metric("loss").tolerance["kind"] == "relative"
    tight = compare(baseline, run("rerun-noise"), CompareOptions(rel_tolerance={"grad_norm": 0.01}))
    assert (
        not tight.metric("grad_norm").passed and tight.metric("loss").tolerance["kind"] == "noise"
    )


def test_one_nan_fails_even_though_single_points_are_tolerated():
    a = base_run(7, steps=400)
    broken = a["loss"].copy()
    broken[350] = np.nan
    base, cand = frame_run(a["step"], loss=a["loss"]), frame_run(a["step"], loss=broken)
    loss = compare(base, cand).metric("loss")
    assert not loss.passed
    assert (loss.stats["nonfinite_mismatches"], loss.stats["first_outside"]) == (1, 350)
    assert loss.stats["max_abs_deviation"] == math.inf
    assert json.dumps(compare(base, cand).to_dict(), allow_nan=False)  # Infinity as a string
    # the same NaN in both runs is agreement
    assert compare(cand, cand).passed
    # and a single noisy point (finite) is not a failure unless --strict
    bumped = a["loss"].copy()
    bumped[200] += 5.0
    assert compare(base, frame_run(a["step"], loss=bumped)).passed
    assert not compare(base, frame_run(a["step"], loss=bumped), CompareOptions(strict=True)).passed


def test_a_sparse_metric_is_reported_not_judged():
    """Eval loss every 100 steps (15 points): too few to tell noise from trend, so no band is
    invented."""
    a, b = base_run(100), base_run(101)

    def every_100(values):  # logged every 100 steps, absent (null) elsewhere
        return pl.Series(
            [float(v) if i % 100 == 0 else None for i, v in enumerate(values)], dtype=pl.Float64
        )

    base = frame_run(a["step"], loss=a["loss"], eval_loss=every_100(a["loss"]))
    cand = frame_run(b["step"], loss=b["loss"], eval_loss=every_100(b["loss"] + 0.3))
    ev = compare(base, cand).metric("eval_loss")
    assert ev.points == 15 and ev.passed and ev.tolerance["kind"] == "none"
    assert "--tolerance eval_loss=VALUE" in ev.tolerance["origin"]
    assert ev.stats["mean_abs_deviation"] > 0.25  # still measured and reported
    named = compare(base, cand, CompareOptions(tolerance={"eval_loss": 0.1})).metric("eval_loss")
    assert not named.passed and named.stats["points_outside"] == 15
    # a NaN fails even where no band is judged
    broken = b["loss"] + 0.3
    broken[700] = np.nan
    nan_run = frame_run(b["step"], loss=b["loss"], eval_loss=every_100(broken))
    assert not compare(base, nan_run).metric("eval_loss").passed


# ---------------------------------------------------------------- a fix that removes a spike


def test_fix_removes_spike():
    exp = expected("fix-removes-spike")
    broken, fixed = read(RUNS / "spike-long-tail" / "run.jsonl"), run("fix-removes-spike")
    checks = tuple(parse_expect(e) for e in exp["expect_pass"])
    on_fixed = check_run(fixed, CompareOptions(expects=checks))
    on_broken = check_run(broken, CompareOptions(expects=checks))
    assert on_fixed.passed and all(c.holds for c in on_fixed.checks)
    assert not on_broken.passed and not any(c.holds for c in on_broken.checks)
    # same seed and data order: identical up to the spike, within +-0.05
    before = compare(
        broken, fixed, CompareOptions(until=exp["compare_until"], tolerance={"loss": 0.05})
    )
    assert before.passed
    # verifying the fix (one-sided, the default): lower where the baseline spiked is better
    one = compare(broken, fixed, CompareOptions(until=1000, tolerance={"loss": 0.05}))
    assert one.passed and one.band == "one-sided"
    better = one.metric("loss").stats
    assert better["points_outside"] == 0
    assert abs(better["first_better"] - exp["broken_spike_step"]) <= 2
    # two-sided (a determinism check): outside the band exactly there, and back after it
    through = compare(
        broken, fixed, CompareOptions(until=1000, tolerance={"loss": 0.05}, band="two-sided")
    ).metric("loss")
    assert not through.passed
    assert abs(through.stats["first_outside"] - exp["broken_spike_step"]) <= 2
    assert through.stats["within_from"] is not None and through.stats["within_from"] < 920
    # the other way round the candidate is the one that spiked: worse, so it fails one-sided
    worse = compare(fixed, broken, CompareOptions(until=1000, tolerance={"loss": 0.05}))
    assert not worse.passed and worse.metric("loss").stats["points_outside"] > 0


def test_a_run_that_stops_before_until_fails(baseline):
    short = frame_run(np.arange(400), loss=base_run(100)["loss"][:400])
    result = compare(baseline, short, CompareOptions(until=500))
    assert not result.passed and "stops at step 399, before --until 500" in result.problems[0]
    assert result.metric("loss").passed  # the numbers themselves were fine


def test_unknown_metrics_are_usage_errors(baseline):
    with pytest.raises(StabUsageError, match="no eval_loss series"):
        compare(baseline, run("rerun-noise"), CompareOptions(metrics=("eval_loss",)))
    with pytest.raises(StabUsageError, match="no los series"):
        compare(baseline, run("rerun-noise"), CompareOptions(expects=(parse_expect("los@1<2"),)))


# ---------------------------------------------------------------- restarts


def test_restart_clean_identical_replay():
    result = compare_restart(read(RUNS / "restart-clean" / "run.jsonl"), 1)
    loss = result.metric("loss")
    assert result.passed and result.mode == "restart"
    assert loss.stats["max_abs_deviation"] == 0 and loss.points == 200
    assert result.restart["replayed_steps"] == [800, 999]


def test_restart_one_clean_replays_within_noise():
    result = compare_restart(run("restart-one-clean"), 1)
    loss = result.metric("loss")
    assert result.passed and loss.stats["mean_abs_deviation"] > 0.03  # a different draw of noise
    assert "before the restart" in loss.tolerance["origin"]


def test_restart_optimizer_lost_departs_and_comes_back():
    log = run("restart-two-optimizer-lost")
    assert compare_restart(log, 1).passed
    second = compare_restart(log, 2)
    loss = second.metric("loss")
    bump = expected("restart-two-optimizer-lost")["restarts"][1]["bump"]
    band = loss.tolerance["median"]
    k_expected = math.ceil(bump["decay_steps"] * math.log(bump["amplitude"] / band))
    assert not second.passed and loss.stats["first_outside"] == 1200
    assert abs((loss.stats["within_from"] - 1200) - k_expected) <= 2
    assert loss.stats["diverged_at"] is None


def test_restart_that_never_comes_back():
    loss = compare_restart(read(RUNS / "spike-after-restart" / "run.jsonl"), 1).metric("loss")
    assert (
        not loss.passed and loss.stats["within_from"] is None and loss.stats["points_outside"] > 80
    )


def test_restart_usage_errors(baseline):
    with pytest.raises(StabUsageError, match="has no restart"):
        compare_restart(baseline, 1)
    with pytest.raises(StabUsageError, match="has 2 restart"):
        compare_restart(run("restart-two-optimizer-lost"), 3)


# ---------------------------------------------------------------- contract


def test_json_contract(baseline):
    out = compare(
        baseline,
        run("rerun-drift"),
        CompareOptions(expects=(parse_expect("max(grad_norm)[300:400]<3.0"),)),
    )
    doc = json.loads(json.dumps(out.to_dict(), allow_nan=False))
    assert doc["schema"] == "stab.compare/1" and doc["mode"] == "runs" and doc["passed"] is False
    assert set(doc) >= {
        "baseline",
        "candidate",
        "restart",
        "x",
        "range",
        "smoothing",
        "judge_points",
        "metrics",
        "checks",
        "not_compared",
        "problems",
        "notes",
        "preview",
    }
    m = doc["metrics"][0]
    assert set(m) >= {
        "metric",
        "passed",
        "points",
        "first",
        "last",
        "grid",
        "interpolated_points",
        "tolerance",
        "max_abs_deviation",
        "max_deviation",
        "max_deviation_at",
        "mean_abs_deviation",
        "worst_band_ratio",
        "points_outside",
        "nonfinite_mismatches",
        "first_outside",
        "diverged_at",
        "within_from",
    }
    assert doc["checks"][0]["holds"] is True and doc["checks"][0]["start"] == 300
    pv = doc["preview"]
    assert (
        pv["metric"] == "loss" and len(pv["x"]) == len(pv["baseline"]) == len(pv["outside"]) == 60
    )
    assert any(pv["outside"][40:]) and not any(pv["outside"][:38])  # drift from step 1000 of 1500


# ---------------------------------------------------------------- CLI


def _doc_command() -> list[str]:
    """The CI command of docs/compare-contract.md, so the documented line is the tested one."""
    text = (ROOT / "docs" / "compare-contract.md").read_text()
    block = re.search(r"<!-- ci-command -->\s*```\s*\n(.*?)\n```", text, re.DOTALL)
    assert block, "docs/compare-contract.md lost its ci-command block"
    args = shlex.split(block.group(1).replace("\\\n", " "))
    assert args[:2] == ["stab", "compare"]
    return args[1:]


def test_cli_documented_seed003_line_passes(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = cli(*_doc_command())
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output and "holds" in result.output


def test_cli_same_checks_on_the_broken_run_fail(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = _doc_command()
    checks = [
        args[i + 1]
        for i, a in enumerate(args)
        if a == "--expect" and "baseline:" not in args[i + 1]
    ]
    assert len(checks) == 2
    result = cli(
        "compare",
        *[x for c in checks for x in ("--expect", c)],
        "fixtures/runs/spike-long-tail/run.jsonl",
    )
    assert result.exit_code == 1 and "FAILS" in result.output


def test_cli_json_and_exit_codes(cli):
    base = COMPARE / "baseline" / "run.jsonl"
    ok = cli("compare", base, COMPARE / "rerun-noise" / "run.jsonl", "--format", "json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["schema"] == "stab.compare/1"
    drift = cli("compare", base, COMPARE / "rerun-drift" / "run.jsonl", "-f", "json")
    assert drift.exit_code == 1 and json.loads(drift.stdout)["metrics"][0]["diverged_at"] == 1009
    tokens = cli(
        "compare", base, COMPARE / "double-batch" / "run.jsonl", "--x", "tokens", "-m", "loss"
    )
    assert tokens.exit_code == 0 and "Compared on tokens" in tokens.output


def test_cli_terminal_shows_both_curves_and_the_band(cli):
    out = cli(
        "compare",
        COMPARE / "baseline" / "run.jsonl",
        COMPARE / "rerun-drift" / "run.jsonl",
        "--smooth",
        "ema:0.1",
    )
    assert out.exit_code == 1
    assert "loss baseline" in out.output and "loss candidate" in out.output and "▲" in out.output
    flat = " ".join(out.output.replace("│", " ").split())  # rich wraps long paths
    assert "smoothed with ema:0.1" in flat and re.search(
        r"loss is worse than the baseline \(higher\) beyond the band from step 10\d\d to the end",
        flat,
    )
    assert "band: noise: 5 x sqrt(2)" in flat


def test_cli_restart(cli):
    log = COMPARE / "restart-two-optimizer-lost" / "run.jsonl"
    clean = cli("compare", "--restart", "1", log)
    lost = cli("compare", "--restart", "2", log)
    assert clean.exit_code == 0 and "tracks the abandoned loss within the band" in clean.output
    assert lost.exit_code == 1 and "came back" in lost.output and "loss abandoned" in lost.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--expect", "loss@31x<2.5", "RUN"],
            "--expect 'loss@31x<2.5': expected a comparison operator",
        ),
        (["RUN"], "give BASELINE CANDIDATE, --expect CHECK, or --restart N"),
        (["RUN", "RUN", "RUN"], "got 3 paths"),
        (["--restart", "1", "RUN", "RUN"], "exactly one RUN"),
        (["--smooth", "ema:2", "RUN", "RUN"], "--smooth expects"),
        (["--tolerance", "-1", "RUN", "RUN"], "--tolerance expects"),
        (["--expect", "baseline:loss@1<2", "RUN"], "needs a baseline run"),
        (["RUN", "/no/such/run.jsonl"], "no such file or directory"),
        (["-m", "eval_loss", "RUN", "RUN"], "no eval_loss series"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(cli, args, needle):
    path = str(COMPARE / "baseline" / "run.jsonl")
    result = cli("compare", *[path if a == "RUN" else a for a in args])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stab: error:") and needle in lines[0], (
        result.stderr
    )
    if "31x" in needle:
        assert "column 8" in lines[0]


# ---------------------------------------------------------------- issue 16: what the user asked


def _flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def test_cli_verifying_a_fix_is_one_sided(cli):
    """The fixed rerun is lower where the broken run spiked: better, so it passes."""
    broken = RUNS / "spike-long-tail" / "run.jsonl"
    fixed = COMPARE / "fix-removes-spike" / "run.jsonl"
    out = cli("compare", broken, fixed)
    assert out.exception is None or isinstance(out.exception, SystemExit)
    flat = _flat(out.output)
    assert out.exit_code == 0, flat
    # piped: the verdict on plain lines, no panel around it
    assert flat.startswith("stab compare ·") and "PASS No worse than the baseline" in flat
    assert re.search(
        r"loss is lower than the baseline's beyond the band at \d+ point\(s\), "
        r"first at step 90\d",
        flat,
    )
    data = json.loads(cli("compare", broken, fixed, "-f", "json").stdout)
    assert data["passed"] and data["band"] == "one-sided"
    loss = next(m for m in data["metrics"] if m["metric"] == "loss")
    assert loss["sides"] == "one-sided" and loss["better_when"] == "lower"
    assert loss["points_outside"] == 0 and loss["points_better"] >= 1
    # the LR has no better side: reported, not judged
    lr = next(m for m in data["metrics"] if m["metric"] == "lr")
    assert lr["sides"] == "not judged" and lr["passed"]


def test_cli_two_sided_band_names_the_band(cli):
    broken = RUNS / "spike-long-tail" / "run.jsonl"
    fixed = COMPARE / "fix-removes-spike" / "run.jsonl"
    out = cli("compare", broken, fixed, "--band", "two-sided", "-e", "loss@900<3.0")
    flat = _flat(out.output)
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert out.exit_code == 1
    assert "FAIL Failed: the band (loss):" in flat and "All 1 check(s) hold." in flat
    assert "loss is outside the band at 3 of 1500 points, first at step 900" in flat


def test_cli_only_a_check_fails_names_the_check(cli):
    broken = RUNS / "spike-long-tail" / "run.jsonl"
    fixed = COMPARE / "fix-removes-spike" / "run.jsonl"
    exp = expected("fix-removes-spike")
    args = [a for e in exp["expect_pass"] for a in ("-e", e)]
    out = cli("compare", broken, fixed, *args, "-e", "loss@900<2.0")
    flat = _flat(out.output)
    assert out.exit_code == 1
    assert "FAIL Failed: 1 of 3 check(s):" in flat and "the band" not in flat.split(":")[0]
    assert "Check 'loss@900<2.0' fails: the candidate's loss at step 900 is 2.95." in flat
    doc = json.loads(
        cli("compare", broken, fixed, *args, "-e", "loss@900<2.0", "-f", "json").stdout
    )
    assert doc["failed"] == {"band": [], "checks": ["loss@900<2.0"], "problems": []}
    assert "nowhere worse than the baseline's beyond the band" in flat


def test_cli_settings_line_is_a_sentence(cli):
    out = cli("compare", COMPARE / "baseline" / "run.jsonl", COMPARE / "rerun-noise" / "run.jsonl")
    flat = _flat(out.output)
    assert out.exit_code == 0
    assert (
        "A point is outside the band when the median deviation of the 5 points centred on it "
        "is beyond the band, so one noisy point never fails." in flat
    )
    assert "is beyond the band, so" in flat and "points is " not in flat


def test_cli_band_refuses_an_unknown_value(cli):
    out = cli(
        "compare",
        COMPARE / "baseline" / "run.jsonl",
        COMPARE / "rerun-noise" / "run.jsonl",
        "--band",
        "both",
    )
    assert out.exit_code == 2 and "one-sided" in out.output and "two-sided" in out.output


def test_restart_is_two_sided_by_default():
    log = read(COMPARE / "restart-two-optimizer-lost" / "run.jsonl")
    assert compare_restart(log, 1).band == "two-sided"
    assert compare_restart(log, 1, CompareOptions(band="one-sided")).band == "one-sided"
