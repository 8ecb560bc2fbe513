"""`--format json` is the contract of docs/contract.md, checked field by field."""

from __future__ import annotations

import json

import pytest

from tests.conftest import all_runs, run_fixture

VERDICTS = {
    "healthy",
    "insufficient-data",
    "nan",
    "spike-recoverable",
    "spike-persistent",
    "fp16-overflow",
    "loss-scale-static",
    "loss-scale-collapsed",
    "divergence",
    "plateau",
    "rank-outlier",
    # docs/analysis-contract.md "Verdicts beyond the shared list" (#34)
    "rank-silent",
    "eval-nonfinite",
    "overfitting",
    "loss-collapse",
    "not-learning",
}
CAUSES = {
    None,
    "long-tail-token",
    "lr-discontinuity",
    "duplicate-batch",
    "optimizer-reset",
    "lr-increasing",
    "weight-norm",
    "grad-norm-rising",
    "log-of-zero",
    "activation-overflow",
}
SEVERITIES = {"info", "warning", "error"}


def check_analysis_contract(doc: dict) -> None:
    assert doc["schema"] == "stab.analysis/1"
    src = doc["source"]
    for key, kind in {
        "path": str,
        "format": str,
        "rows": int,
        "rows_rejected": int,
        "metrics": dict,
        "restarts": list,
    }.items():
        assert isinstance(src[key], kind), key
    for key in ("run", "first_step", "last_step", "ranks", "dtype"):
        assert key in src
    for restart in src["restarts"]:
        assert {"at_row", "resumed_from_step", "last_step_before"} <= set(restart)
    verdict = doc["verdict"]
    assert verdict["code"] in VERDICTS
    assert verdict["cause"] in CAUSES
    assert isinstance(verdict["summary"], str) and verdict["summary"]
    assert isinstance(verdict["remediation"], list)
    for step in verdict["path"]:
        assert set(step) >= {"question", "answer", "evidence"}
        assert all(isinstance(v, str) for v in step.values())
    for finding in doc["findings"]:
        assert set(finding) >= {
            "code",
            "severity",
            "step",
            "end_step",
            "rank",
            "metric",
            "message",
            "evidence",
        }
        assert finding["severity"] in SEVERITIES
        assert isinstance(finding["evidence"], dict)
        if finding["code"] == "nan":
            assert "first_step" in finding["evidence"]


@pytest.mark.parametrize("name", all_runs())
def test_json_output_follows_the_contract(cli, name: str) -> None:
    result = cli("analyze", run_fixture(name), "--format", "json")
    assert result.exit_code in (0, 1)
    doc = json.loads(result.stdout)  # strict JSON: NaN would not parse in other languages
    check_analysis_contract(doc)


def test_nan_values_in_evidence_are_strings_not_bare_tokens(cli) -> None:
    result = cli("analyze", run_fixture("nan-fp16-overflow"), "--format", "json")
    text = result.stdout
    json.loads(text, parse_constant=lambda token: pytest.fail(f"bare {token} in JSON output"))
