"""Which findings of a judgment are new, which provisional ones settled, and the alert lines.

An event is keyed by its code, its onset step and its rank: judged again on a longer log,
the same event keeps its key, so it is alerted once. A spike is provisional while its
recovery window is still open (the log ends before onset + the horizon the rule gave it,
and it has not come back yet): it is alerted as `pending`, and once the window has passed
(or the loss came back) an update says `recovered` or `persistent`. An event alerted
earlier that a later judgment no longer finds is said once as `withdrawn`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from stabilitycli.core.model import Analysis, Finding, Severity
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.spike import GRAD_NORM_JUMP, LOSS_JUMP, SPIKE

EventKey = tuple[str, int | None, int | None]

# judgments of a log too short for the spike baseline: a run still being written is short
# only for now (a healthy run's first 100 points gave a grad-norm jump that the longer log
# no longer had, alerted and then withdrawn), so these wait for the run's final judgment
SHORT_LOG_KINDS = (LOSS_JUMP, GRAD_NORM_JUMP)

# what a judgment of the run's last lines may alert: the local events, decided by a point
# and the trailing window before it (a trend, a restart, a schedule need the whole run)
TAIL_CODES = frozenset(
    {
        "nan",
        "spike",
        "fp16-overflow",
        "loss-scale-collapsed",
        "rank-nonfinite",
        "rank-silent",
        "rank-outlier",
    }
)
# the rules that emit them
TAIL_RULES = ("nan", "spike", "loss-scale", "ranks")

PENDING, RECOVERED, PERSISTENT, DECIDED, WITHDRAWN = (
    "pending",
    "recovered",
    "persistent",
    "decided",
    "withdrawn",
)


@dataclass
class Alert:
    """One line of the watch: a new event, or the update of one alerted before."""

    type: str  # "alert" (new) or "update" (a provisional event settled, or was withdrawn)
    run: str
    code: str
    severity: Severity
    step: int | None
    rank: int | None
    status: str  # pending, recovered, persistent, decided, withdrawn
    summary: str
    logged_step: int | None  # the last step logged when it was judged
    settles_at_step: int | None = None  # a pending event: the step its window closes at
    finding: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> EventKey:
        return (self.code, self.step, self.rank)

    @property
    def provisional(self) -> bool:
        return self.status == PENDING

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "run": self.run,
            "code": self.code,
            "severity": str(self.severity),
            "step": self.step,
            "rank": self.rank,
            "status": self.status,
            "provisional": self.provisional,
            "settles_at_step": self.settles_at_step,
            "logged_step": self.logged_step,
            "summary": self.summary,
            "finding": self.finding,
        }

    def line(self) -> str:
        """run, step, code, severity, summary on one line."""
        where = f"step {self.step}" if self.step is not None else "no step"
        if self.rank is not None:
            where += f" rank {self.rank}"
        state = {
            PENDING: f" [provisional: recovery pending until step {self.settles_at_step}]",
            RECOVERED: " [settled: recovered]",
            PERSISTENT: " [settled: persistent]",
            WITHDRAWN: " [withdrawn: no longer found on the longer log]",
        }.get(self.status, "")
        verb = "update" if self.type == "update" else "ALERT"
        summary = " ".join(self.summary.split())  # one line, whatever the message holds
        return f"{verb} {self.run} {where} {self.code} {self.severity}{state}: {summary}"


def status_of(finding: Finding, logged_step: int | None) -> tuple[str, int | None]:
    """(status, the step a pending event settles at) of a finding on a log ending at
    `logged_step`."""
    if finding.kind is not SPIKE:
        return DECIDED, None
    evidence = finding.evidence
    if evidence["recovered"]:
        return RECOVERED, None
    onset, horizon = evidence["onset_step"], evidence["recovery_horizon_steps"]
    settles = onset + horizon if horizon is not None else None
    if settles is not None and logged_step is not None and logged_step < settles:
        return PENDING, settles
    return PERSISTENT, None


class AlertBook:
    """What was alerted so far, and which events the hooks have acted on."""

    def __init__(self, least: Severity = Severity.WARNING):
        self.least = least  # findings below this severity are not alerts
        self.status: dict[EventKey, str] = {}
        self.acted: set[EventKey] = set()
        self.run: str | None = None  # the run's name, as the whole-run judgment gives it

    def update(
        self, analysis: Analysis, logged_step: int | None, final: bool = False
    ) -> list[Alert]:
        """The alert and update lines this judgment adds (`final`: of the run's end)."""
        run = self.run = analysis.source.run or analysis.source.path
        out: list[Alert] = []
        found: set[EventKey] = set()
        for finding in analysis.findings:
            key = (finding.code, finding.step, finding.rank)
            if not final and finding.kind in SHORT_LOG_KINDS and key not in self.status:
                continue
            if finding.severity < self.least and key not in self.status:
                continue
            alert = _alert_of(finding, run, logged_step)
            found.add(alert.key)
            before = self.status.get(alert.key)
            if before == alert.status:
                continue
            if before is not None:
                if before != PENDING and alert.status == PENDING:
                    continue  # a log read again from its start: what settled stays settled
                alert.type = "update"
            self.status[alert.key] = alert.status
            out.append(alert)
        for key, before in list(self.status.items()):
            if key not in found and before != WITHDRAWN:
                self.status[key] = WITHDRAWN
                code, step, rank = key
                out.append(
                    Alert(
                        "update",
                        run,
                        code,
                        Severity.INFO,
                        step,
                        rank,
                        WITHDRAWN,
                        "the judgment of the longer log no longer finds this event",
                        logged_step,
                    )
                )
        return out

    def add(self, findings: list[Finding], logged_step: int | None, since: int) -> list[Alert]:
        """The alerts a judgment of the run's last lines adds: a local event at or after
        step `since` (where the tail holds the rules' trailing window) not alerted before,
        or a pending spike it finds settled. It withdraws nothing and brings back nothing
        withdrawn: the tail holds too little of the run to say an event is not there."""
        out: list[Alert] = []
        for finding in findings:
            if finding.code not in TAIL_CODES or finding.step is None or finding.step < since:
                continue
            key = (finding.code, finding.step, finding.rank)
            before = self.status.get(key)
            if before is None and finding.severity < self.least:
                continue
            alert = _alert_of(finding, self.run or "run", logged_step)
            if before is not None and not (before == PENDING and alert.status != PENDING):
                continue
            alert.type = "alert" if before is None else "update"
            self.status[key] = alert.status
            out.append(alert)
        return out

    def to_act_on(self, alert: Alert, fail_on: Severity) -> bool:
        """Whether the hooks act on this alert: a settled event at or above --fail-on, once
        per event (its code, onset step and rank)."""
        if alert.provisional or alert.status == WITHDRAWN or alert.severity < fail_on:
            return False
        if alert.key in self.acted:
            return False
        self.acted.add(alert.key)
        return True


def _alert_of(finding: Finding, run: str, logged_step: int | None) -> Alert:
    status, settles = status_of(finding, logged_step)
    return Alert(
        type="alert",
        run=run,
        code=finding.code,
        severity=finding.severity,
        step=finding.step,
        rank=finding.rank,
        status=status,
        summary=finding.message,
        logged_step=logged_step,
        settles_at_step=settles,
        finding=finding.to_dict(),
    )
