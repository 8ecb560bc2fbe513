"""Which test made a rank a level outlier, with its own statistic and bar, and how its onset
was placed: said in the evidence and in every sentence about it.

Two tests decide (`check._level`): the persistence test (|robust z| >= rank_z
on rank_persist_steps logged steps in a row, one step back in line
tolerated) and the CUSUM test (the one-sided CUSUM of the robust z, drift
allowance rank_cusum_k, reaching rank_cusum_decide). A rank drifting slowly
away is found by the CUSUM while its median robust z is 2: a reader who sees
only "robust z 2.1" reads a number under any bar, so the sentence names the
test that decided, the statistic it reached and the bar it was held to. The
one that decided first is named (persistence on a tie).
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core import numfmt
from stabilitycli.core.records import dataclass
from stabilitycli.detect.ranks.change import cusum

PERSISTENCE, CUSUM = "persistence", "cusum"
# how the onset was placed: the CUSUM's last zero, or where a fitted ramp leaves the level
ONSET_CHANGE_POINT, ONSET_RAMP = "cusum-change-point", "ramp-fit"


@dataclass(frozen=True)
class Decision:
    test: str  # PERSISTENCE | CUSUM
    step: int  # where the test met its bar
    statistic: float  # flagged logged steps in the run, or the CUSUM reached at `step`
    bar: float  # rank_persist_steps, or rank_cusum_decide


def decide(
    persistence: tuple[int, int] | None,
    cusum_step: int | None,
    *,
    persist_bar: int,
    cusum_bar: float,
) -> Decision | None:
    """The test that decided first: `persistence` is (the step its run met the bar, the
    run's flagged steps), `cusum_step` where the CUSUM reached its bar. The CUSUM's
    statistic is filled in later (`with_cusum`), from the rank's own rows."""
    if persistence is not None and (cusum_step is None or persistence[0] <= cusum_step):
        return Decision(PERSISTENCE, persistence[0], float(persistence[1]), float(persist_bar))
    if cusum_step is None:
        return None
    return Decision(CUSUM, cusum_step, np.nan, cusum_bar)


def with_cusum(
    decision: Decision, z: np.ndarray, steps: np.ndarray, *, k: float, clip: float
) -> Decision:
    """The CUSUM the test reached at its step (the larger one-sided one), from the rank's z
    as the test saw it (NaN where a step was not judged)."""
    if decision.test != CUSUM:
        return decision
    row = min(int(np.searchsorted(steps, decision.step)), steps.size - 1)
    reached = max(float(cusum(z, d, k, clip)[row]) for d in (1.0, -1.0))
    return Decision(decision.test, decision.step, reached, decision.bar)


def evidence(decision: Decision | None, onset_by: str) -> dict:
    """The evidence keys of a decision (none for a rank no level test decided)."""
    if decision is None:
        return {}
    return {
        "test": decision.test,
        "test_step": decision.step,
        "test_statistic": decision.statistic,
        "test_bar": decision.bar,
        "onset_by": onset_by,
    }


def words(e: dict, rank_z: float, cusum_k: float) -> str:
    """The test in words, from the evidence keys of `evidence` ("" without them)."""
    test = e.get("test")
    if test is None:
        return ""
    stat, bar, step = e["test_statistic"], e["test_bar"], e["test_step"]
    if test == PERSISTENCE:
        found = (
            f"found by the persistence test: |robust z| >= {numfmt.number(rank_z)} on a run of "
            f"{stat:.0f} logged steps, its bar of {bar:.0f} met at step {step}"
        )
    else:
        found = (
            f"found by the CUSUM test: the CUSUM of its robust z (allowance "
            f"{numfmt.number(cusum_k)} a logged step) reached {numfmt.number(stat)} at step "
            f"{step} (bar: {numfmt.number(bar)})"
        )
    if e.get("onset_by") == ONSET_RAMP:
        found += "; the onset is where a line fitted to its robust z leaves the cohort's level"
    return found


def short(e: dict) -> str:
    """The test in a table cell, its statistic against its bar: "CUSUM 40.97≥40", "z-run 14≥10"."""
    test = e.get("test")
    if test is None:
        return "–"
    stat = e["test_statistic"]
    if test == CUSUM:
        return f"CUSUM {numfmt.number(stat)}≥{numfmt.number(e['test_bar'])}"
    return f"z-run {stat:.0f}≥{numfmt.number(e['test_bar'])}"
