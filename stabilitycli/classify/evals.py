"""Q1.5 and Q4.5: the eval/validation loss series' questions, and the verdicts they name.

The tree asks them beside §1 and §4 (`tree.py`); this module reads the eval
rules' findings and facts and says the answer and, when one applies, the
verdict with its summary and the step where the event began.
"""

from __future__ import annotations

from collections.abc import Mapping

from stabilitycli.core.model import Finding, PathStep, Severity
from stabilitycli.core.records import dataclass
from stabilitycli.detect.facts import EvalSeries
from stabilitycli.detect.kinds.eval import EVAL_NONFINITE, OVERFITTING


@dataclass(frozen=True)
class EvalAnswer:
    """A question's answer, and the verdict it makes apply (None: none)."""

    step: PathStep | None
    verdict: str | None = None
    summary: str = ""
    start: int | None = None


def nonfinite_answer(
    by_code: Mapping[str, list[Finding]], skipped: Mapping[str, str], evals: list[EvalSeries]
) -> EvalAnswer:
    """Q1.5: is any eval loss NaN or Inf (and not just the training loss's NaN carried on)?"""
    if EVAL_NONFINITE.rule in skipped or not evals:
        return EvalAnswer(None)
    found = by_code.get(EVAL_NONFINITE.code)
    if not found:
        counts = ", ".join(f"{e['series']} {e['points']}" for e in evals)
        return EvalAnswer(PathStep("Q1.5", "no", f"0 non-finite of the evaluations ({counts})"))
    f = found[0]
    step = PathStep("Q1.5", "yes", f.message)
    if f.severity < Severity.ERROR:  # it follows the training loss's NaN: §1 tells that one
        return EvalAnswer(step)
    return EvalAnswer(
        step,
        EVAL_NONFINITE.code,
        f.message + "; the training loss stayed finite",
        start=f.step,
    )


def overfitting_answer(
    by_code: Mapping[str, list[Finding]], skipped: Mapping[str, str], evals: list[EvalSeries]
) -> EvalAnswer:
    """Q4.5: did the eval loss rise from its minimum while the training loss fell?"""
    if not evals:
        return EvalAnswer(None)
    if OVERFITTING.rule in skipped:
        return EvalAnswer(PathStep("Q4.5", "insufficient data", skipped[OVERFITTING.rule]))
    found = by_code.get(OVERFITTING.code)
    if not found:
        return EvalAnswer(
            PathStep(
                "Q4.5",
                "no",
                f"{evals[0]['series']} ({evals[0]['points']} evaluations) did not rise above its "
                "minimum's bar at its last evaluations while the training loss fell",
            )
        )
    f = found[0]
    return EvalAnswer(
        PathStep("Q4.5", "yes", f.message),
        OVERFITTING.code,
        f"over-fitting from step {f.step}: {f.message}",
        start=f.step,
    )
