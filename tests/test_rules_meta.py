"""Every rule is documented, and every finding code has a log where it fires and one where it
does not."""

from __future__ import annotations

import pytest

from stabilitycli import analyze
from stabilitycli.detect.registry import load_rules
from tests.conftest import REAL_LOGS, RUNS, run_fixture

EXCERPTS = REAL_LOGS / "bigscience-chronicles-excerpts"

# finding code -> a log where it must fire
FIRES = {
    "nan": run_fixture("nan-fp32-origin"),
    "spike": run_fixture("spike-long-tail"),
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
}
QUIET = run_fixture("healthy-low-noise")
ALL_CODES = sorted({code for rule in load_rules().values() for code in rule.emits})


@pytest.mark.parametrize("rule", list(load_rules().values()), ids=lambda r: r.code)
def test_rule_is_documented(rule) -> None:
    assert rule.summary and rule.section
    for heading in ("What it detects", "Why it matters"):
        assert heading in rule.doc, f"{rule.code}: no '{heading}'"


@pytest.mark.parametrize("code", ALL_CODES)
def test_each_finding_code_fires_somewhere(code: str) -> None:
    assert code in FIRES, f"{code}: add a fixture where it fires"
    path = FIRES[code]
    if not path.exists():
        pytest.skip(f"{path} not present")
    assert code in {f.code for f in analyze(path).findings}


@pytest.mark.parametrize(
    "code", [c for c in ALL_CODES if c not in ("blip", "loss-rise", "grad-norm-spike")]
)
def test_each_finding_code_is_quiet_on_a_healthy_run(code: str) -> None:
    assert code not in {f.code for f in analyze(QUIET).findings}


def test_fixture_folder_is_what_the_tests_expect() -> None:
    assert RUNS.is_dir() and len(list(RUNS.glob("*/expected.json"))) >= 20
