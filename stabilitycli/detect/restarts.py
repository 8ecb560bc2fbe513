"""Restarts: every resume from a checkpoint, shown on every report (spec 0)."""

from __future__ import annotations

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.restarts import RESTART, RestartEvidence
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView


@rule(
    RESTART.rule,
    RESTART.section,
    "the run was resumed from a checkpoint (step went backwards)",
    emits=(RESTART,),
)
def detect_restarts(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Every resume from a checkpoint, as an event.

    What it detects: places where the logged step goes backwards in the
    order the log was written. The resumed trajectory replaces the abandoned
    one for the steps it rewrites; the abandoned rows are kept aside.

    Why it matters: a spike within {restart_spike_steps} steps after a restart
    (`restart_spike_steps`) points at state the checkpoint did not restore
    (optimizer moments, scheduler, data cursor), not at the data: the
    optimizer-reset pattern.
    """
    result = RuleResult()
    for restart in view.restarts:
        result.findings.append(
            RESTART.finding(
                f"resumed from step {restart.resumed_from_step} after the log had reached step "
                f"{restart.last_step_before} (row {restart.at_row})",
                step=restart.resumed_from_step,
                rank=restart.rank,
                evidence=RestartEvidence.of(
                    restart.at_row,
                    restart.resumed_from_step,
                    restart.last_step_before,
                    restart.rank,
                ),
            )
        )
    return result
