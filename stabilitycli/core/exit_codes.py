"""Exit status, the contract CI gates on (docs/contract.md, 'Exit status')."""

from __future__ import annotations

from enum import IntEnum

from stabilitycli.core.model import Severity


class ExitCode(IntEnum):
    OK = 0
    INSTABILITY = 1
    BAD_INPUT = 2
    INTERRUPTED = 130  # Ctrl-C: the shell's 128 + SIGINT, so scripts see what a signal gives


def exit_code_for(worst: Severity | None, fail_on: Severity) -> ExitCode:
    """1 when the worst finding is at or above `fail_on`, else 0."""
    if worst is not None and worst >= fail_on:
        return ExitCode.INSTABILITY
    return ExitCode.OK
