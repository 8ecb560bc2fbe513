"""What the tests on the detection benchmark's own LM runs share (the runs come from the
`synth` fixture, tests/detect/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from stabilitycli.core.model import Severity


def write_csv(path: Path, frame) -> Path:
    """A run's frame as the CSV a pandas-using trainer writes."""
    frame.to_pandas().to_csv(path, index=False)
    return path


def alarms(result):
    """The warning and error findings of an analysis."""
    return [f for f in result.findings if f.severity in (Severity.WARNING, Severity.ERROR)]
