"""stab against the logs of real (tiny) torch training runs in fixtures/torch-runs/.

Each log was written by scripts/realtrain/train_tiny_lm.py with one pathology
put into the TRAINING (a garbage batch, an LR jump, a resume without optimizer
state, fp16 overflow...), and its expected.json states the true diagnosis:
what was done and what it did to the run, read off the log, not off stab.
Where stab is wrong today the test is a strict xfail saying why, so the day a
detector is fixed it turns into a visible XPASS to promote.
"""

from __future__ import annotations

import gzip
import json
import math
from functools import cache

import pytest

from stabilitycli import analyze
from stabilitycli.core.model import Severity
from stabilitycli.ingest import read
from tests.conftest import FIXTURES

TORCH_RUNS = FIXTURES / "torch-runs"

# (run, aspect) -> why stab misses it today (numbers from the log)
KNOWN_MISSES: dict[tuple[str, str], str] = {}


def _names() -> list[str]:
    return sorted(p.parent.name for p in TORCH_RUNS.glob("*/expected.json"))


def _expected(name: str) -> dict:
    return json.loads((TORCH_RUNS / name / "expected.json").read_text())


def _log(name: str):
    return TORCH_RUNS / name / "run.jsonl.gz"


@cache
def _analysis(name: str):
    return analyze(_log(name))


def _params(aspect: str, names: list[str]) -> list:
    out = []
    for name in names:
        reason = KNOWN_MISSES.get((name, aspect))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def test_the_fixture_set_is_there() -> None:
    names = _names()
    assert len(names) >= 12
    verdicts = {_expected(n)["verdict"] for n in names}
    assert verdicts >= {
        "healthy",
        "nan",
        "spike-recoverable",
        "spike-persistent",
        "divergence",
        "loss-scale-static",
    }
    for name, _aspect in KNOWN_MISSES:
        assert name in names, name


@pytest.mark.parametrize("name", _params("verdict", _names()))
def test_verdict(name: str) -> None:
    result = _analysis(name)
    assert result.verdict.code == _expected(name)["verdict"], result.verdict.summary


@pytest.mark.parametrize("name", _params("cause", [n for n in _names() if "cause" in _expected(n)]))
def test_cause(name: str) -> None:
    # "cause": null is part of the truth: no cause code fits, so stab should name none
    assert _analysis(name).verdict.cause == _expected(name)["cause"], _analysis(
        name
    ).verdict.summary


@pytest.mark.parametrize(
    "name", _params("findings", [n for n in _names() if _expected(n).get("findings")])
)
def test_findings_at_the_true_steps(name: str) -> None:
    want = _expected(name)
    tolerance = want.get("step_tolerance", 5)
    findings = _analysis(name).findings
    for code, steps in want["findings"].items():
        found = [f.step for f in findings if f.code == code]
        for step in steps:
            assert any(s is not None and abs(s - step) <= tolerance for s in found), (
                code,
                step,
                found,
            )


@pytest.mark.parametrize("name", [n for n in _names() if "origin" in _expected(n)])
def test_nan_origin_layer(name: str) -> None:
    nan = next(f for f in _analysis(name).findings if f.code == "nan")
    assert nan.evidence["origin"] == _expected(name)["origin"]


@pytest.mark.parametrize("name", [n for n in _names() if "restarts" in _expected(n)])
def test_restarts(name: str) -> None:
    got = _analysis(name).source.restarts
    want = _expected(name)["restarts"]
    assert [(r.resumed_from_step, r.last_step_before) for r in got] == [
        (w["resumed_from_step"], w["last_step_before"]) for w in want
    ]


@pytest.mark.parametrize(
    "name", _params("quiet", [n for n in _names() if _expected(n)["verdict"] == "healthy"])
)
def test_truly_healthy_runs_raise_no_error_and_no_spike(name: str) -> None:
    findings = _analysis(name).findings
    assert not [f for f in findings if f.severity >= Severity.ERROR]
    assert not [f for f in findings if f.code in ("spike", "divergence", "plateau")]


@pytest.mark.parametrize("name", ["nan-fp16-high-lr", "nan-adam-eps0", "healthy-fp16-scaler"])
def test_nonfinite_values_survive_as_logged(name: str) -> None:
    """Every NaN / Infinity the training wrote (bare json.dumps tokens) reaches the frame as is."""
    with gzip.open(_log(name), "rt") as handle:
        rows = [json.loads(line) for line in handle]
    run = read(_log(name))
    assert run.source.rows_read == len(rows) and run.source.rows_rejected == 0
    frame = run.frame
    checked = 0
    for key in ("loss", "grad_norm"):
        written = {r["step"]: r[key] for r in rows}  # the resumed trajectory wins, as in the frame
        bad = {s: v for s, v in written.items() if not math.isfinite(v)}
        got = dict(zip(frame["step"].to_list(), frame[key].to_list(), strict=True))
        checked += len(bad)
        for step, value in bad.items():
            if math.isnan(value):
                assert math.isnan(got[step]), (key, step)
            else:
                assert got[step] == value, (key, step)
    assert checked, f"{name}: no non-finite value to check"


def test_every_run_has_its_command_and_manifest() -> None:
    readme = (TORCH_RUNS / "README.md").read_text()
    for name in _names():
        manifest = json.loads((TORCH_RUNS / name / "manifest.json").read_text())
        assert manifest["torch"].startswith("2.13.0") and isinstance(manifest["seed"], int)
        assert manifest["command"].startswith("python scripts/realtrain/train_tiny_lm.py")
        assert f"`{name}`" in readme and manifest["command"] in readme
        assert _expected(name)["injected"] and _expected(name)["truth"]
