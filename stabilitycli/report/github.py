"""GitHub Actions workflow-command annotations: one line per finding.

`::error file=runs/x.jsonl,title=stab spike at step 900::loss spike ...`
shows up on the job summary and, for files in the repository, on the file.
Severity maps error -> error, warning -> warning, info -> notice. The verdict
comes first, so the headline is readable without opening the log. A finding
in a line-based log (JSON Lines, a text log, CSV) points at the file line of its
onset (`line=N`), its step in the title and the message; in a log without lines
(Parquet, TensorBoard, a tracking store) the annotation names the file only.
"""

from __future__ import annotations

from stabilitycli.core.model import Analysis, Finding, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.report import escape

LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def annotation(level: str, file: str, title: str, message: str, line: int | None = None) -> str:
    """One workflow command; every part may quote the input and is escaped for its place."""
    file, title = escape.github_property(file), escape.github_property(title)
    at = "" if line is None else f",line={line}"
    return f"::{level} file={file}{at},title={title}::{escape.github_data(message)}"


def render(analysis: Analysis) -> str:
    path = analysis.source.path
    v = analysis.verdict
    level = "notice" if v.code in ("healthy", "insufficient-data") else LEVEL[v.severity]
    # the verdict's remedies ride in its annotation (one per finding stays the rule of the rest)
    remedy = "".join(f"\n- {r}" for r in v.remediation)
    lines = [
        annotation(
            level,
            path,
            f"stab verdict: {v.code}" + (f" ({v.cause})" if v.cause else ""),
            v.summary + (f"\nRemedy:{remedy}" if remedy else ""),
        )
    ]
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        lines.append(annotation("notice", path, "stab settings", settings))
    lines += [_finding(f, path, analysis.line_of(f)) for f in analysis.findings]
    return "\n".join(lines) + "\n"


def _finding(f: Finding, path: str, line: int | None) -> str:
    where = f" at step {f.step}" if f.step is not None else ""
    rank = f" on rank {f.rank}" if f.rank is not None else ""
    said = f"step {f.step}: {f.message}" if f.step is not None else f.message
    return annotation(LEVEL[f.severity], path, f"stab {f.code}{where}{rank}", said, line)
