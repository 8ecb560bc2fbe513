"""The one error type that reaches the user: a bad input, said in one line."""

from __future__ import annotations


class StabInputError(Exception):
    """Input that cannot be used at all. The CLI prints `str(err)` and exits 2."""

    def __init__(self, path: str, reason: str, line: int | None = None, record: int | None = None):
        self.path = str(path)
        self.reason = reason
        self.line = line
        self.record = record
        where = self.path
        if line is not None:
            where += f":{line}"
        elif record is not None:
            where += f" (record {record})"
        super().__init__(f"{where}: {reason}")


class StabUsageError(Exception):
    """A bad option or config value (exit 2)."""
