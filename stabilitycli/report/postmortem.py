"""The Markdown post-mortem (seed 003's template, spec 7) from a `Postmortem`.

Pure formatting: every number comes from `stabilitycli.postmortem.data`.
What the data cannot fill is written as *needs a human*, never invented.
"""

from __future__ import annotations

from stabilitycli.postmortem.data import Cost, Incident, Postmortem
from stabilitycli.report import mdtext

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
    lines = [f"# {kind} post-mortem — {date or 'date: ' + HUMAN} — {mdtext.text(pm.run)}", ""]
    lines += [
        f"Written by `stab postmortem` from {mdtext.code(pm.path)} (steps "
        f"{pm.first_step}–{pm.last_step}; dtype "
        f"{mdtext.text(pm.dtype) if pm.dtype else 'unknown'}). Verdict: **{pm.verdict}**"
        + (f" (cause: {pm.cause})" if pm.cause else "")
        + f" — {mdtext.text(pm.summary)}",
        "",
        f"Sections marked {HUMAN} hold what the log cannot tell; "
        "everything else is a number from the log.",
        "",
    ]
    if pm.settings:
        lines += [f"**{mdtext.text(pm.settings)}**", ""]
    if not pm.incidents:
        lines += _no_incident(pm)
    for i, incident in enumerate(pm.incidents, 1):
        heading = f"## {i}. {incident.title}" if len(pm.incidents) > 1 else f"## {incident.title}"
        lines += [heading, "", *_incident(incident)]
    if pm.notes:
        lines += ["## Notes from the analysis", "", *(f"- {mdtext.text(n)}" for n in pm.notes), ""]
    return "\n".join(lines).rstrip() + "\n"


# the document's kind: the first of these its sections hold (the verdict order)
_KINDS = (
    ("nan", "NaN loss"),
    ("rank", "Rank outlier"),
    ("spike", "Loss spike"),
    ("loss-scale-collapsed", "Loss-scale collapse"),
    ("loss-scale-static", "Static loss scale"),
    ("fp16-overflow", "fp16 overflow"),
    ("divergence", "Divergence"),
    ("plateau", "Plateau"),
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
        f"the verdict is **{pm.verdict}**. {mdtext.text(pm.summary)}",
        "",
    ]
    if pm.remediation:
        out += ["### Remediation", "", *(f"- {mdtext.text(r)}" for r in pm.remediation), ""]
    out += ["### Lesson", "", HUMAN, ""]
    return out


def _incident(inc: Incident) -> list[str]:
    out = ["### 1. Symptoms (numbers only)", ""]
    for label, value in inc.symptoms:
        shown = HUMAN if value is None else mdtext.text(value)
        out.append(f"- {label}: {shown}")
    out += ["", "### 2. Hypotheses (ranked by the data)", ""]
    if not inc.hypotheses:
        out.append(f"1. no cause is visible in the logged series — {HUMAN}")
    for n, h in enumerate(inc.hypotheses, 1):
        out.append(
            f"{n}. **{mdtext.text(h.title)}** — {h.status}; panel `{h.series}`: "
            f"{mdtext.text(h.evidence)}"
        )
    out += ["", "### 3. Discriminating evidence", ""]
    for n, h in enumerate(inc.hypotheses, 1):
        out.append(f"- `{h.series}`: {mdtext.text(h.evidence)} → {_VERB[h.status]} H{n}")
    if not inc.hypotheses:
        out.append(f"- {HUMAN}")
    out += [
        "",
        "### 4. Root cause",
        "",
        mdtext.text(inc.root_cause)
        if inc.root_cause
        else f"Not reached from the data (no hypothesis is supported by a logged series): {HUMAN}.",
    ]
    out += ["", "### 5. Remediation (the smallest change)", ""]
    out += [f"- {mdtext.text(r)}" for r in inc.remediation] or [f"- {HUMAN}"]
    out += ["", "### 6. Verification", ""]
    if inc.verification:
        out.append(
            "Re-run from the last checkpoint before the incident with the change "
            "(same seed and data order); expect:"
            if inc.rerun
            else "Expect:"
        )
        out += [f"- {mdtext.text(v)}" for v in inc.verification]
    else:
        out.append(f"- {HUMAN}")
    if inc.expects:
        args = " ".join(f'--expect "{e}"' for e in inc.expects)
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
    if cost.steps is None:
        return HUMAN
    until = (
        " (to the end of the log; plus the steps to re-run from the last checkpoint)"
        if cost.until_end_of_log
        else ""
    )
    what = "until recovery" if kind == "spike" and not cost.until_end_of_log else "lost"
    parts = [f"{cost.steps:,} step{'' if cost.steps == 1 else 's'} {what}{until}"]
    if cost.tokens is not None:
        parts.append(f"{cost.tokens:,.0f} tokens")
    if cost.samples is not None:
        parts.append(f"{cost.samples:,.0f} samples")
    return "; ".join(parts)
