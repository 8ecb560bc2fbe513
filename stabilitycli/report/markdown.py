"""Markdown for a PR comment: verdict, the path of questions, findings, remedy."""

from __future__ import annotations

from stabilitycli.model import Analysis, Severity
from stabilitycli.report import mdtext
from stabilitycli.settings import sentence

ICON = {Severity.ERROR: "🔴", Severity.WARNING: "🟠", Severity.INFO: "⚪"}
MAX_FINDINGS = 50


def render(analysis: Analysis, heading_level: int = 3) -> str:
    v, s = analysis.verdict, analysis.source
    h = "#" * heading_level
    icon = "🟢" if v.code in ("healthy", "insufficient-data") else ICON[v.severity]
    lines = [
        f"{h} {icon} stab: `{v.code}`"
        + (f" (cause: `{v.cause}`)" if v.cause else "")
        + f" — {mdtext.text(s.run or s.path)}",
        "",
        mdtext.text(v.summary),
        "",
        f"{mdtext.code(s.path)} ({s.format}): {s.rows_read:,} rows, {s.rows_rejected:,} rejected"
        + (f", {s.rows_rewritten:,} rewritten by a resume" if s.rows_rewritten else "")
        + "; "
        f"steps {s.first_step}–{s.last_step}; dtype {s.dtype or 'unknown'}"
        + (f"; {s.ranks} ranks" if s.ranks else ""),
        "",
    ]
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        lines += [f"**{mdtext.text(settings)}**", ""]
    if analysis.coverage is not None:
        lines += [f"_Coverage_: {mdtext.text(analysis.coverage.line())}", ""]
    if v.path:
        lines += ["| Q | answer | evidence |", "|---|---|---|"]
        lines += [
            f"| {p.question} | {mdtext.cell(p.answer)} | {mdtext.cell(p.evidence)} |"
            for p in v.path
        ]
        lines.append("")
    if analysis.findings:
        lines += [
            "<details><summary>Findings (" + str(len(analysis.findings)) + ")</summary>",
            "",
            "| | severity | code | step | message |",
            "|---|---|---|---|---|",
        ]
        for f in analysis.findings[:MAX_FINDINGS]:
            step = "" if f.step is None else str(f.step)
            lines.append(
                f"| {ICON[f.severity]} | {f.severity} | `{f.code}` | {step} "
                f"| {mdtext.cell(f.message)} |"
            )
        if len(analysis.findings) > MAX_FINDINGS:
            lines.append(f"| | | | | {len(analysis.findings) - MAX_FINDINGS} more |")
        lines += ["", "</details>", ""]
    if v.remediation:
        lines += ["**Remedy**", "", *(f"- {mdtext.text(r)}" for r in v.remediation), ""]
    return "\n".join(lines).rstrip() + "\n"
