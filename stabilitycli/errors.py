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


def internal_error_message(err: BaseException, where: str) -> str:
    """The one line for a bug in stab itself (not in the input), naming the run it hit.

    Every command and the batch workers say it the same way, so a user who
    reports one can be asked for the same thing: the run, the type, the text.
    """
    return f"{where}: internal error {type(err).__name__}: {err}"
