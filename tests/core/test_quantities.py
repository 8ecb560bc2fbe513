"""Issue 16 item 1: every evidence number says what it is, and is what it says.

`stabilitycli.core.quantities` types each number of a finding's evidence (a point at step S, a
mean over steps A-B, a peak at step S...). Over the runs the number tests use (every fixture
of `fixtures/runs/` and `fixtures/torch-runs/`, plus the rank and recurring-spike logs of
`test_numbers_traced.EXTRA`) and the firing example of every rule (`fixtures/rules/*/fires`):

- every numeric leaf of every finding's evidence is covered by exactly one quantity, so an
  evidence number added without a schema entry fails here;
- a point, peak, minimum or maximum of the loss, grad norm, LR or loss scale equals the value
  the raw log holds at its step; a mean, median or mean of bin medians equals that statistic
  of the logged values over its steps; a trailing mean or median the one over the spike
  window before its step. Per kind a floor on the numbers checked keeps the test from
  passing by checking nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tests.postmortem.test_numbers_traced import EXTRA, Raw, extra_runs  # noqa: F401 (fixtures)
from tests.report.test_thresholds_in_text import _fixture_logs, default_runs  # noqa: F401 (fixtures)

RECOMPUTED_SERIES = ("loss", "grad_norm", "lr", "loss_scale", "param_norm")

# the fewest numbers of each kind the recomputation must check over all the runs
FLOORS = {
    "point": 120,
    "peak": 16,
    "min": 6,
    "max": 4,
    "mean": 30,
    "median": 15,
    "mean_of_medians": 35,
    "trailing_mean": 4,
    "trailing_median": 5,
    "previous_point": 3,
}


def _rule_logs() -> list:
    return sorted(p for p in FIXTURES.glob("rules/*/fires/run.jsonl*"))


@pytest.fixture(scope="module")
def rule_runs() -> dict[str, dict]:
    """The firing example of every rule, analysed with the default thresholds."""
    from stabilitycli.core.settings import load_settings
    from stabilitycli.pipeline import run as pipeline

    runs = {}
    for log in _rule_logs():
        thresholds, _ = load_settings(log, {})
        analysis = pipeline.analyze(pipeline.load_run(log), thresholds)
        runs[str(log.relative_to(FIXTURES))] = {"analysis": analysis, "thresholds": thresholds}
    return runs


@pytest.fixture(scope="module")
def all_runs(default_runs, extra_runs, rule_runs) -> dict[str, tuple]:  # noqa: F811
    """name -> (log path, analysis, thresholds) for every run checked here."""
    logs = {f"{p.parent.parent.name}/{p.parent.name}": p for p in _fixture_logs()}
    logs.update({str(p.relative_to(FIXTURES)): p for p in [*EXTRA, *_rule_logs()]})
    out = {}
    for runs in (default_runs, extra_runs, rule_runs):
        for name, run in runs.items():
            out[name] = (logs[name], run["analysis"], run["thresholds"])
    return out


# ---------------------------------------------------------------- coverage


def _leaves(value, path: str = "") -> list[str]:
    """The path of every number in the evidence ('causes[0].ratio', 'halving_steps[3]')."""
    from stabilitycli.core.quantities import is_number

    if isinstance(value, Mapping):  # a dict, or typed evidence
        return [p for k, v in value.items() for p in _leaves(v, f"{path}.{k}" if path else k)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _leaves(v, f"{path}[{i}]")]
    return [path] if is_number(value) else []


def _coverage_errors(finding) -> list[str]:
    """Numbers no quantity covers, or more than one does; quantities with no number."""
    from stabilitycli.core.quantities import KINDS, quantities

    found = quantities(finding)
    covering = Counter()
    errors = []
    for leaf in _leaves(finding.evidence):
        covering[leaf] = sum(1 for q in found if leaf == q.key or leaf.startswith(q.key + "["))
    for leaf, n in covering.items():
        if n != 1:
            errors.append(f"{finding.code} {leaf}: covered by {n} quantities")
    for q in found:
        if q.kind not in KINDS:
            errors.append(f"{finding.code} {q.key}: unknown kind {q.kind!r}")
        if not any(leaf == q.key or leaf.startswith(q.key + "[") for leaf in covering):
            errors.append(f"{finding.code} {q.key}: a quantity with no evidence number")
    return errors


def test_every_evidence_number_is_one_quantity(all_runs) -> None:
    errors, codes, numbers = [], set(), 0
    for name, (_, analysis, _) in all_runs.items():
        for f in analysis.findings:
            codes.add(f.code)
            numbers += len(_leaves(f.evidence))
            errors += [f"{name}: {e}" for e in _coverage_errors(f)]
    assert not errors, "\n".join(sorted(set(errors)))
    # the runs reach most codes, and hold many numbers
    assert len(codes) >= 25 and numbers >= 1000, (sorted(codes), numbers)


def _schemas() -> dict:
    from stabilitycli.detect.kinds import all_kinds

    return {code: kind.evidence for code, kind in all_kinds().items()}


def test_every_code_a_rule_emits_has_a_schema() -> None:
    from stabilitycli.detect.registry import load_rules

    emitted = {c for r in load_rules().values() for c in r.emits}
    schemas = {code for code, schema in _schemas().items() if len(schema) > 1}
    assert emitted <= schemas, sorted(emitted - schemas)


def test_every_kind_in_the_schema_is_a_declared_kind() -> None:
    from stabilitycli.core.quantities import KINDS
    from stabilitycli.core.quantity_schema import By, EachItem, Spec

    def kinds(node) -> set[str]:
        if isinstance(node, Spec):
            return {node.kind}
        if isinstance(node, By):
            return {s.kind for s in node.specs.values()}
        if isinstance(node, EachItem):
            return {k for sub in node.schemas.values() for k in kinds(sub)}
        return {k for sub in node.values() for k in kinds(sub)}

    used = kinds(_schemas())
    assert used <= set(KINDS), sorted(used - set(KINDS))
    assert len(used) >= 25  # the walk above reached the schema's entries


def test_an_unschema_d_evidence_number_is_caught() -> None:
    from stabilitycli.core.model import Finding, Severity

    finding = Finding(
        "blip", Severity.INFO, "m", step=5, metric="loss", evidence={"count": 2, "new_number": 1.5}
    )
    assert _coverage_errors(finding) == ["blip new_number: covered by 0 quantities"]


# ---------------------------------------------------------------- recomputed from the raw log


def _truth(q, raw: Raw, finding, thresholds) -> float | None:
    """The value the quantity's kind and steps name, recomputed from the raw log; None when
    the kind or the steps do not say enough to recompute it."""
    name, window = q.metric, thresholds.spike_window_steps
    spans = q.first_step is not None and q.last_step is not None
    if q.kind == "point" and q.step is not None:
        return raw.at(name, q.step)
    if q.kind == "peak" and q.step is not None:
        return raw.at(name, q.step)
    if q.kind in ("min", "max"):
        # over its steps (the whole log when it names none), and logged at its step
        a, b = (q.first_step, q.last_step) if spans else (-(2**62), 2**62)
        extreme = float((np.min if q.kind == "min" else np.max)(raw.between(name, a, b)))
        return extreme if q.step is None or raw.at(name, q.step) == extreme else math.nan
    if q.kind == "previous_point" and q.step is not None:
        return raw.at_or_before(name, q.step - 1)
    if q.kind == "mean" and spans:
        return raw.mean(name, q.first_step, q.last_step)
    if q.kind == "median" and spans:
        return raw.median(name, q.first_step, q.last_step)
    if q.kind == "mean_of_medians" and spans:
        bins = finding.evidence["bin_points"]
        return raw.mean_of_medians(name, q.first_step, q.last_step, bins)
    if q.kind == "trailing_mean" and q.step is not None:
        return raw.trailing(name, q.step, window)[0]
    if q.kind == "trailing_median" and q.step is not None:
        return float(np.median(raw.between(name, q.step - window, q.step - 1)))
    return None


def test_numbers_equal_the_raw_log(all_runs) -> None:
    from stabilitycli.core.quantities import quantities

    checked, errors = Counter(), []
    for name, (log, analysis, thresholds) in all_runs.items():
        raw = Raw(log)
        for f in analysis.findings:
            for q in quantities(f):
                if q.metric not in RECOMPUTED_SERIES or q.metric not in raw.cols:
                    continue
                if q.rank is not None or isinstance(q.value, tuple):
                    continue
                truth = _truth(q, raw, f, thresholds)
                if truth is None:
                    continue
                checked[q.kind] += 1
                # the rank report rounds its numbers to six significant digits
                rel = 1e-5 if f.rank is not None else 1e-9
                if not (
                    math.isclose(q.value, truth, rel_tol=rel, abs_tol=1e-12)
                    or (math.isnan(q.value) and math.isnan(truth))
                ):
                    errors.append(
                        f"{name} {f.code} {q.key} ({q.kind} of {q.metric}, step {q.step}, "
                        f"steps {q.first_step}-{q.last_step}): {q.value!r} != {truth!r}"
                    )
    assert not errors, "\n".join(errors)
    short = {k: (checked[k], n) for k, n in FLOORS.items() if checked[k] < n}
    assert not short, f"too few checked (checked, floor): {short}; all: {dict(checked)}"


# ---------------------------------------------------------------- unit level


def _spike() -> object:
    from stabilitycli.core.model import Finding, Severity

    return Finding(
        "spike",
        Severity.ERROR,
        "loss spike",
        step=900,
        end_step=905,
        metric="loss",
        evidence={
            "onset_step": 900,
            "peak_step": 903,
            "peak": 6.05,
            "mu": 3.048,
            "sigma": 0.102,
            "z": 29.4,
            "baseline_first_step": 800,
            "baseline_last_step": 899,
            "recovered": False,
            "recovery_step": None,
            "window": "100-step window",
            "causes": [
                {
                    "cause": "long-tail-token",
                    "grad_norm_step": 899,
                    "grad_norm": 26.1,
                    "grad_norm_baseline": 0.47,
                    "ratio": 55.4,
                    "lead_steps": 1,
                    "bar": 10.0,
                }
            ],
        },
    )


def test_quantities_of_a_hand_built_spike() -> None:
    from stabilitycli.core.quantities import Quantity, quantities

    by_key = {q.key: q for q in quantities(_spike())}
    # a bool, a None and a text are not numbers
    assert "recovered" not in by_key and "recovery_step" not in by_key
    assert "window" not in by_key
    assert by_key["peak"] == Quantity("peak", 6.05, "peak", "loss", step=903)
    assert by_key["mu"] == Quantity("mu", 3.048, "mean", "loss", first_step=800, last_step=899)
    assert by_key["z"] == Quantity("z", 29.4, "z", "loss", step=903, first_step=800, last_step=899)
    assert by_key["onset_step"].kind == "step" and by_key["onset_step"].metric is None
    assert by_key["causes[0].grad_norm"] == Quantity(
        "causes[0].grad_norm", 26.1, "point", "grad_norm", step=899
    )
    assert by_key["causes[0].grad_norm_baseline"].kind == "trailing_mean"
    assert by_key["causes[0].lead_steps"].kind == "duration_steps"
    assert by_key["causes[0].bar"].kind == "bound"


def test_list_elements_take_the_step_at_their_index() -> None:
    from stabilitycli.core.model import Finding, Severity
    from stabilitycli.core.quantities import quantities

    finding = Finding(
        "loss-scale-halving",
        Severity.INFO,
        "m",
        step=300,
        end_step=500,
        metric="loss_scale",
        evidence={"halving_steps": [300, 500], "halving_scales": [32768.0, 16384.0]},
    )
    by_key = {q.key: q for q in quantities(finding)}
    assert by_key["halving_scales[1]"].step == 500
    assert by_key["halving_scales[1]"].value == 16384.0
    steps = by_key["halving_steps"]
    assert (steps.kind, steps.value, steps.first_step, steps.last_step) == (
        "steps",
        (300, 500),
        300,
        500,
    )


def test_the_json_of_a_finding_carries_its_quantities() -> None:
    import json

    from stabilitycli.core.model import Finding, Severity

    spike = _spike()
    out = spike.to_dict()
    assert out["evidence"]["peak"] == 6.05  # the evidence is unchanged beside them
    peak = next(q for q in out["quantities"] if q["key"] == "peak")
    assert peak == {
        "key": "peak",
        "value": 6.05,
        "kind": "peak",
        "metric": "loss",
        "step": 903,
        "first_step": None,
        "last_step": None,
        "rank": None,
    }
    nan = Finding(
        "nan",
        Severity.ERROR,
        "m",
        step=10,
        metric="loss",
        evidence={"last_finite_loss": float("nan"), "last_finite_step": 9},
    )
    text = json.dumps(nan.to_dict(), allow_nan=False)  # NaN is a string, as in the evidence
    assert '"value": "NaN"' in text


def test_the_contract_lists_every_kind() -> None:
    from stabilitycli.core.quantities import KINDS
    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "analysis-contract.md").read_text()
    missing = [k for k, words in KINDS.items() if f"| `{k}` | {words} |" not in doc]
    assert not missing, missing
