"""`--format concise`: one line per finding, `path:LINE: CODE severity step N: message`, like
ruff's: LINE is the file line of the finding's onset in a line-based log (JSON Lines, a
text log, CSV); a log without lines (Parquet, TensorBoard, a store) gives `path: ...`.

The verdict is a line of its own (`path: VERDICT verdict summary`, after the
findings), so a run with no finding still says what it is; a finding without
a step has no `step N`. One line each, never wrapped: messages are single
lines (a newline in one is written as a space). `quiet` leaves out the info
findings and the closing summary line, as ruff's `--quiet` leaves out its
summary; the settings line (thresholds not at their defaults) is always
written, as a `#` comment line, because it changes what every line means.
Paths and messages may quote the input: their control characters are shown.
"""

from __future__ import annotations

from stabilitycli.core.model import Analysis, Finding, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.report import escape


def _one_line(text: str) -> str:
    return escape.plain(" ".join(text.split()))


def finding_line(path: str, f: Finding, line: int | None = None) -> str:
    path = escape.plain_path(path)
    where = f"{path}:{line}" if line is not None else path
    rank = f" [rank {f.rank}]" if f.rank is not None else ""
    step = f" step {f.step}:" if f.step is not None else ""
    return f"{where}: {f.code} {f.severity}{rank}{step} {_one_line(f.message)}"


def render(analysis: Analysis, quiet: bool = False) -> str:
    path = escape.plain_path(analysis.source.path)
    shown = [f for f in analysis.findings if not (quiet and f.severity is Severity.INFO)]
    lines = [finding_line(path, f, analysis.line_of(f)) for f in sorted(shown, key=_order)]
    v = analysis.verdict
    if not quiet or v.code != "healthy":
        cause = f" ({v.cause})" if v.cause else ""
        lines.append(f"{path}: VERDICT {v.code}{cause} {_one_line(v.summary)}")
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        lines.append(f"# {path}: {escape.plain(settings)}")
    if not quiet:
        counts = {s: sum(f.severity is s for f in analysis.findings) for s in Severity}
        lines.append(
            f"Found {len(analysis.findings)} finding(s): {counts[Severity.ERROR]} error(s), "
            f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info."
        )
    return "\n".join(lines) + "\n"


def _order(f: Finding) -> tuple[int, int]:
    return (f.step if f.step is not None else -1, -int(f.severity))
