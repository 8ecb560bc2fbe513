"""The Markdown post-mortem (seed 003's template, spec 7) from a `Postmortem`.

Pure formatting: every number comes from `stabilitycli.postmortem.data`.
What the data cannot fill is written as *needs a human*, never invented.
Every text that may quote the input (run, path, keys, dtype origin, notes,
evidence) goes through `escape`'s Markdown functions.
"""

from __future__ import annotations

from stabilitycli.detect.kinds.divergence import DIVERGENCE, PLATEAU
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_STATIC,
)
from stabilitycli.detect.kinds.nan import NAN
from stabilitycli.detect.kinds.spike import RECURRING_SPIKES, SPIKE
from stabilitycli.postmortem.data import Cost, Incident, Postmortem
from stabilitycli.report import escape

HUMAN = "*needs a human*"
_VERB = {
    "supported": "favours",
    "possible": "leans towards",
    "not testable": "cannot decide",
    "ruled out": "rules out",
}


def render(pm: Postmortem, date: str | None = None) -> str:
    """The whole document; `date` (ISO) is the day it was written, when given."""
    kind = _headline_kind(pm)
    lines = [f"# {kind} post-mortem — {date or 'date: ' + HUMAN} — {escape.markdown(pm.run)}", ""]
    lines += [
        f"Written by `stab postmortem` from {escape.markdown_code(pm.path)} (steps "
        f"{pm.first_step}–{pm.last_step}; dtype "
        f"{escape.markdown(pm.dtype) if pm.dtype else 'unknown'}). Verdict: **{pm.verdict}**"
        + (f" (cause: {escape.markdown(pm.cause)})" if pm.cause else "")
        + f" — {escape.markdown(pm.summary)}",
        "",
        f"Sections marked {HUMAN} hold what the log cannot tell; "
        "everything else is a number from the log.",
        "",
    ]
    if pm.settings:
        lines += [f"**{escape.markdown(pm.settings)}**", ""]
    if not pm.incidents:
        lines += _no_incident(pm)
    for i, incident in enumerate(pm.incidents, 1):
        title = escape.markdown(incident.title)
        heading = f"## {i}. {title}" if len(pm.incidents) > 1 else f"## {title}"
        lines += [heading, "", *_incident(incident)]
    if pm.notes:
        lines += [
            "## Notes from the analysis",
            "",
            *(f"- {escape.markdown(n)}" for n in pm.notes),
            "",
        ]
    return escape.markdown_document("\n".join(lines).rstrip() + "\n")


# the document's kind: the first of these its sections hold (the verdict order)
_KINDS = (
    (NAN.code, NAN.incident),
    ("rank", "Rank outlier"),
    *(
        (kind.code, kind.incident)
        for kind in (
            SPIKE,
            RECURRING_SPIKES,
            LOSS_SCALE_COLLAPSED,
            LOSS_SCALE_STATIC,
            FP16_OVERFLOW,
            DIVERGENCE,
            PLATEAU,
        )
    ),
    ("insufficient-data", "Short log"),
)


def _headline_kind(pm: Postmortem) -> str:
    kinds = {i.kind for i in pm.incidents}
    for kind, name in _KINDS:
        if kind in kinds:
            return name
    return "Run"


def _no_incident(pm: Postmortem) -> list[str]:
    out = [
        "## No loss spike, NaN or divergence",
        "",
        "The analysis found no incident to write up: "
        f"the verdict is **{pm.verdict}**. {escape.markdown(pm.summary)}",
        "",
    ]
    if pm.remediation:
        out += ["### Remediation", "", *(f"- {escape.markdown(r)}" for r in pm.remediation), ""]
    out += ["### Lesson", "", HUMAN, ""]
    return out


def _incident(inc: Incident) -> list[str]:
    out = ["### 1. Symptoms (numbers only)", ""]
    for label, value in inc.symptoms:
        shown = HUMAN if value is None else escape.markdown(value)
        out.append(f"- {escape.markdown(label)}: {shown}")
    out += ["", "### 2. Hypotheses (ranked by the data)", ""]
    if not inc.hypotheses:
        out.append(f"1. no cause is visible in the logged series — {HUMAN}")
    for n, h in enumerate(inc.hypotheses, 1):
        out.append(
            f"{n}. **{escape.markdown(h.title)}** — {h.status}; "
            f"panel {escape.markdown_code(h.series)}: "
            f"{escape.markdown(h.evidence)}"
        )
    out += ["", "### 3. Discriminating evidence", ""]
    for n, h in enumerate(inc.hypotheses, 1):
        out.append(
            f"- {escape.markdown_code(h.series)}: {escape.markdown(h.evidence)} "
            f"→ {_VERB[h.status]} H{n}"
        )
    if not inc.hypotheses:
        out.append(f"- {HUMAN}")
    out += [
        "",
        "### 4. Root cause",
        "",
        escape.markdown(inc.root_cause)
        if inc.root_cause
        else f"Not reached from the data (no hypothesis is supported by a logged series): {HUMAN}.",
    ]
    out += ["", "### 5. Remediation (the smallest change)", ""]
    out += [f"- {escape.markdown(r)}" for r in inc.remediation] or [f"- {HUMAN}"]
    out += ["", "### 6. Verification", ""]
    if inc.verification:
        out.append(
            "Re-run from the last checkpoint before the incident with the change "
            "(same seed and data order); expect:"
            if inc.rerun
            else "Expect:"
        )
        out += [f"- {escape.markdown(v)}" for v in inc.verification]
    else:
        out.append(f"- {HUMAN}")
    if inc.expects:
        # a fenced block shows its text as is: only controls need showing
        args = " ".join(f'--expect "{escape.visible(e)}"' for e in inc.expects)
        out += ["", "As `stab compare` checks on the re-run:", "", "```", args, "```"]
    out += [
        "",
        "### 7. Cost",
        "",
        f"- {_cost(inc.cost, inc.kind)}",
        "",
        "### 8. Lesson",
        "",
        HUMAN,
        "",
    ]
    return out


def _cost(cost: Cost, kind: str) -> str:
    if cost.note is not None:
        return escape.markdown(cost.note)
    if cost.steps is None:
        return HUMAN
    until = (
        " (to the end of the log; plus the steps to re-run from the last checkpoint)"
        if cost.until_end_of_log
        else ""
    )
    what = "until recovery" if kind == SPIKE.code and not cost.until_end_of_log else "lost"
    parts = [f"{cost.steps:,} step{'' if cost.steps == 1 else 's'} {what}{until}"]
    if cost.tokens is not None:
        parts.append(f"{cost.tokens:,.0f} tokens")
    if cost.samples is not None:
        parts.append(f"{cost.samples:,.0f} samples")
    return "; ".join(parts)
