"""What the sub-commands share: options, argument parsing, failing cleanly, one run analysed.

Heavy modules (polars, the pipeline) are imported inside the functions so that
`stab --help` stays instant.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from stabilitycli.commands.read_options import ReadArgs, pairs
from stabilitycli.core.errors import (
    NOT_ERRORS,
    StabInputError,
    StabUsageError,
    internal_error_message,
    visible,
)
from stabilitycli.core.exit_codes import ExitCode


class FailOn(StrEnum):
    """`--fail-on`: the lowest severity that makes the command exit 1 (`stab analyze`, `ranks`)."""

    info = "info"
    warning = "warning"
    error = "error"


def set_flag(example: str = "spike_sigma=4", see_also: str = "") -> Any:
    """`--set`, its help giving an example threshold of the command (and where to look)."""
    return typer.Option(
        "--set", help=f"Override a threshold, e.g. {example} (repeatable{see_also})."
    )


SetOpt = Annotated[list[str] | None, set_flag()]

FailOnOpt = Annotated[FailOn, typer.Option(help="Lowest finding severity that exits 1.")]

# `-o -`: the document on stdout rather than in a file
STDOUT = "-"


def split_codes(values: list[str] | None) -> list[str]:
    """`--select a,b --select c` -> ['a', 'b', 'c'] (analyze, one run or many)."""
    return [c.strip() for v in values or [] for c in v.split(",") if c.strip()]


def metric_keys(values: list[str] | None) -> tuple[tuple[str, ...], dict[str, str]]:
    """NAME or NAME=LOGKEY items (`--metric` of compare and ranks): the metrics, in order,
    and the log keys given for some of them."""
    names: list[str] = []
    overrides: dict[str, str] = {}
    for item in values or []:
        name, sep, key = item.partition("=")
        name = name.strip()
        if not name or (sep and not key.strip()):
            raise StabUsageError(f"--metric expects NAME or NAME=LOGKEY, got {item!r}")
        names.append(name)
        if sep:
            overrides[name] = key.strip()
    return tuple(names), overrides


def fail(message: str) -> typer.Exit:
    # control characters from a file name or an error text would break the one line
    typer.echo(f"stab: error: {visible(message)}", err=True)
    return typer.Exit(ExitCode.BAD_INPUT)


DEBUG_HINT = "run `stab --debug ...` or set STAB_DEBUG=1 for a traceback"


# set by `stab --debug` (the app callback runs before every command, so each invocation
# sets it afresh); a context variable rather than a module global for in-process callers
DEBUG: ContextVar[bool] = ContextVar("stab_debug", default=False)


def debugging() -> bool:
    """`stab --debug` (the app's own option) or STAB_DEBUG set in the environment."""
    return DEBUG.get() or bool(os.environ.get("STAB_DEBUG"))


def internal_error(err: BaseException, where: str) -> typer.Exit:
    """A bug in stab, not in the input: one line and exit 2, the traceback first with --debug.

    Called from an `except` block: `raise internal_error(err, path) from None`. Ctrl-C,
    exits and typer's own exits are raised again untouched.
    """
    if _passes_through(err):
        raise err
    if debugging():
        _print_traceback(err)
        return fail(internal_error_message(err, where))
    return fail(f"{internal_error_message(err, where)} ({DEBUG_HINT})")


def boundary(err: BaseException, where: str) -> BaseException:
    """What a command raises for anything that escaped it: exits pass through untouched, an
    input or usage error is its one line, anything else is an internal error (exit 2)."""
    if _passes_through(err):
        return err
    if isinstance(err, (StabInputError, StabUsageError)):
        if debugging():
            _print_traceback(err)
        return fail(str(err))
    return internal_error(err, where)


def _passes_through(err: BaseException) -> bool:
    """Ctrl-C, exits, and typer's own exits and usage errors: not ours to report."""
    return isinstance(err, (*NOT_ERRORS, typer.Exit, typer.Abort, typer.TyperException))


def _print_traceback(err: BaseException) -> None:
    import sys
    import traceback

    # an input error raised at the read boundary carries the reader's failure as __cause__
    traceback.print_exception(err, file=sys.stderr)


def load_thresholds(path: str, set_values: list[str] | None):
    """(Thresholds, settings) for a run: defaults <- config file above it <- --set, and
    `settings` the thresholds that differ from the defaults with their sources (a dict)."""
    from stabilitycli.core.settings import load_settings

    thresholds, settings = load_settings(path, pairs(set_values, "--set"))
    return thresholds, settings.to_dict()


def with_settings(analysis, settings: dict | None):
    """The analysis, carrying the thresholds not at their defaults (and their sources), if any:
    every renderer says them, and the JSON has them as `settings`."""
    if settings and settings.get("non_default"):
        analysis.extras["settings"] = settings
    return analysis


def print_rendered(rendered, width: int | None = None) -> None:
    """Text exactly as rendered; a rich renderable laid out for where stdout lands (a
    terminal: panels at its width; a pipe or a file: plain lines of at most 100 columns,
    unless `width`, `stab --width` or `COLUMNS` names one; see `report/console.py`)."""
    if isinstance(rendered, str):
        typer.echo(rendered, nl=False)
        return
    from stabilitycli.report.console import medium, render_text

    where = medium(width=width)
    # click strips colour codes from a stream that is not a terminal unless told otherwise
    typer.echo(render_text(rendered, where), nl=False, color=where.colour)


def load_and_analyze(path: str, read: ReadArgs | None = None, set_values=None, ignore=None):
    """(RunData, Analysis, Thresholds) for one run; exit 2 with one line on bad input."""
    try:
        from stabilitycli.pipeline import run as pipeline

        thresholds, settings = load_thresholds(path, set_values)
        data = pipeline.load_run(path, (read or ReadArgs()).options())
        analysis = with_settings(pipeline.analyze(data, thresholds, ignore=ignore), settings)
        return data, analysis, thresholds
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, path) from None
    except BaseException as err:
        raise internal_error(err, path) from None


def default_output(analysis, path: str, suffix: str) -> Path:
    """`<run><suffix>` in the current directory: the run's name (else the log's stem) made
    safe as a file name, so that reports of several runs written in one folder differ."""
    import re

    name = analysis.source.run or Path(path.rstrip("/")).stem or "run"
    safe = re.sub(r"[^\w.-]+", "_", name).strip("._") or "run"
    return Path(f"{safe}{suffix}")


def exit_by_verdict(analysis, fail_on: FailOn) -> typer.Exit:
    """The exit `stab analyze` gives the same run: 1 when a finding is at or above
    `--fail-on`, else 0."""
    from stabilitycli.core.exit_codes import exit_code_for
    from stabilitycli.core.model import Severity

    return typer.Exit(int(exit_code_for(analysis.worst_severity, Severity.parse(fail_on.value))))


def write_output(text: str, output: Path | None) -> None:
    """To the file when given (one line on stderr says where), else (None or `-`) to
    stdout."""
    if output is None or str(output) == STDOUT:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        raise fail(f"{output}: cannot write: {err.strerror or err}") from None
    typer.echo(f"wrote {output}", err=True)
