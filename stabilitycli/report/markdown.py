"""Markdown for a PR comment: verdict, the path of questions, findings, remedy."""

from __future__ import annotations

from stabilitycli.core.model import Analysis, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.report import escape

ICON = {Severity.ERROR: "🔴", Severity.WARNING: "🟠", Severity.INFO: "⚪"}
MAX_FINDINGS = 50


def render(analysis: Analysis, heading_level: int = 3) -> str:
    v, s = analysis.verdict, analysis.source
    h = "#" * heading_level
    icon = "🟢" if v.code in ("healthy", "insufficient-data") else ICON[v.severity]
    lines = [
        f"{h} {icon} stab: `{v.code}`"
        + (f" (cause: `{v.cause}`{', inferred' if v.cause_inferred else ''})" if v.cause else "")
        + f" — {escape.markdown(s.run or s.path)}",
        "",
        escape.markdown(v.summary),
        "",
        f"{escape.markdown_code(s.path)} ({s.format}): "
        f"{s.rows_read:,} rows, {s.rows_rejected:,} rejected"
        + (f", {s.rows_rewritten:,} rewritten by a resume" if s.rows_rewritten else "")
        + "; "
        f"{escape.markdown(s.steps_text())}; dtype {escape.markdown(s.dtype or 'unknown')}"
        + (f"; {s.ranks} ranks" if s.ranks else ""),
        "",
    ]
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        lines += [f"**{escape.markdown(settings)}**", ""]
    if analysis.coverage is not None:
        lines += [f"_Coverage_: {escape.markdown(analysis.coverage.line())}", ""]
    schedule = (analysis.extras.get("lr_schedule") or {}).get("summary")
    if schedule:
        lines += [f"_LR schedule_: {escape.markdown(schedule)}", ""]
    if analysis.extras.get("ignored"):
        lines += [f"_Ignored_: {escape.markdown(', '.join(analysis.extras['ignored']))}", ""]
    if v.path:
        lines += ["| Q | answer | evidence |", "|---|---|---|"]
        lines += [
            f"| {escape.markdown_cell(p.question)} | {escape.markdown_cell(p.answer)} "
            f"| {escape.markdown_cell(p.evidence)} |"
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
                f"| {ICON[f.severity]} | {f.severity} | {escape.markdown_code(f.code)} | {step} "
                f"| {escape.markdown_cell(f.message)} |"
            )
        if len(analysis.findings) > MAX_FINDINGS:
            lines.append(f"| | | | | {len(analysis.findings) - MAX_FINDINGS} more |")
        lines += ["", "</details>", ""]
    if v.remediation:
        lines += ["**Remedy**", "", *(f"- {escape.markdown(r)}" for r in v.remediation), ""]
    return escape.markdown_document("\n".join(lines).rstrip() + "\n")
