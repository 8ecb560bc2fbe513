"""The eval rules on their own: what fires, what stays quiet, and what is the training loss's."""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli import analyze
from stabilitycli.core.quantities import quantities as typed

STEPS = 1000
EVAL_STEPS = np.arange(49, STEPS, 50)


def _train() -> np.ndarray:
    rng = np.random.default_rng(3)
    t = np.arange(STEPS, dtype=float)
    return 2.2 + 8.6 * (1 + t / 40.0) ** -0.75 * (1 + 0.02 * rng.standard_normal(STEPS))


def _frame(evals: np.ndarray, train: np.ndarray | None = None, **extra: np.ndarray) -> pl.DataFrame:
    """The training loss at every step, eval series at every 50th (null between, NaN kept)."""
    columns = {"step": np.arange(STEPS), "loss": _train() if train is None else train}
    for key, values in {"eval_loss": evals, **extra}.items():
        full = np.full(STEPS, np.nan)
        full[EVAL_STEPS] = values
        logged = np.zeros(STEPS, dtype=bool)
        logged[EVAL_STEPS] = True
        columns[key] = pl.Series(key, full).set(pl.Series(~logged), None)
    return pl.DataFrame(columns)


def _evals(seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2.3 + 8.6 * (1 + EVAL_STEPS / 40.0) ** -0.75 + rng.normal(0, 0.004, EVAL_STEPS.size)


def _codes(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in result.findings:
        out.setdefault(f.code, []).append(f)
    return out


def test_an_eval_nan_after_the_training_nan_is_its_consequence() -> None:
    evals = _evals()
    evals[10:] = np.nan  # from step 549
    train = _train()
    train[500:] = np.nan
    result = analyze(_frame(evals, train=train))
    assert result.verdict.code == "nan"
    (finding,) = _codes(result)["eval-nonfinite"]
    assert str(finding.severity) == "info"
    assert "follows the training loss, non-finite from step 500" in finding.message


def test_a_second_eval_set_is_read_by_its_name() -> None:
    other = _evals(9)
    other[-4:] = np.inf
    result = analyze(_frame(_evals(), **{"val/loss_c4": other}))
    assert result.verdict.code == "eval-nonfinite"
    (finding,) = _codes(result)["eval-nonfinite"]
    assert finding.evidence["key"] == "val/loss_c4" and finding.step == 849
    assert [s.series for s in result.coverage.series][:3] == ["loss", "eval_loss", "val/loss_c4"]


def test_an_eval_rise_with_a_flat_training_loss_is_not_overfitting() -> None:
    rng = np.random.default_rng(4)
    flat = 2.5 + 0.02 * rng.standard_normal(STEPS)
    evals = _evals()
    evals[12:] = evals[11] + 0.04 * np.arange(1, 9)
    result = analyze(_frame(evals, train=flat))
    assert "overfitting" not in _codes(result)


def test_an_eval_bump_that_came_back_is_not_overfitting() -> None:
    evals = _evals()
    evals[12:15] += 0.3  # three bad evaluations, then back on the curve
    result = analyze(_frame(evals))
    assert "overfitting" not in _codes(result)
    assert result.verdict.code == "healthy"


def test_overfitting_evidence_has_its_numbers_typed() -> None:
    evals = _evals()
    evals[12:] = evals[11] + 0.04 * np.arange(1, 9)
    result = analyze(_frame(evals))
    (finding,) = _codes(result)["overfitting"]
    quantities = {q.key: q for q in typed(finding)}
    assert quantities["eval_at_onset"].step == finding.step == 599
    assert quantities["eval_end"].step == 999
    assert quantities["train_start"].metric == "loss"
    assert result.verdict.code == "overfitting"
    assert result.verdict.remediation[0].startswith("keep the checkpoint nearest the eval minimum")
