"""What the sub-commands share: options, argument parsing, failing cleanly, one run analysed.

Heavy modules (polars, the pipeline) are imported inside the functions so that
`stab --help` stays instant.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from stabilitycli.errors import StabInputError, StabUsageError, internal_error_message
from stabilitycli.exit_codes import ExitCode


class FailOn(StrEnum):
    """`--fail-on`: the lowest severity that makes the command exit 1 (`stab analyze`, `ranks`)."""

    info = "info"
    warning = "warning"
    error = "error"


MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        "-m",
        help="Map a canonical metric to a log key, e.g. loss=train/my_loss (repeatable).",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a threshold, e.g. spike_sigma=4 (repeatable)."),
]
StepKeyOpt = Annotated[str | None, typer.Option(help="Log key holding the step.")]
FormatInOpt = Annotated[
    str | None, typer.Option(help="Input format, when detection guesses wrong.")
]
DtypeOpt = Annotated[str | None, typer.Option(help="dtype regime: fp32, fp16 or bf16.")]
RunOpt = Annotated[
    str | None, typer.Option(help="Run id or name inside a store with several runs.")
]


def pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """NAME=VALUE items (`--set`, `--metric` of analyze): both sides required."""
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise StabUsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


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
    typer.echo(f"stab: error: {message}", err=True)
    return typer.Exit(ExitCode.BAD_INPUT)


def internal_error(err: Exception, where: str) -> typer.Exit:
    """A bug in stab, not in the input: one line and exit 2, or the traceback with STAB_DEBUG.

    Called from an `except` block: `raise internal_error(err, path) from None`.
    """
    if os.environ.get("STAB_DEBUG"):
        raise err
    return fail(f"{internal_error_message(err, where)} (set STAB_DEBUG=1 for a traceback)")


def load_thresholds(path: str, set_values: list[str] | None):
    """(Thresholds, settings) for a run: defaults <- config file above it <- --set, and
    `settings` the thresholds that differ from the defaults with their sources (a dict)."""
    from stabilitycli.settings import load_settings

    thresholds, settings = load_settings(path, pairs(set_values, "--set"))
    return thresholds, settings.to_dict()


def with_settings(analysis, settings: dict | None):
    """The analysis, carrying the thresholds not at their defaults (and their sources), if any:
    every renderer says them, and the JSON has them as `settings`."""
    if settings and settings.get("non_default"):
        analysis.extras["settings"] = settings
    return analysis


def print_rendered(rendered, width: int | None = None) -> None:
    """Text exactly as rendered; a rich renderable on a console sized to the terminal.

    Piped (not a terminal) there is no width to fit: the console is as wide as the
    widest line (at least 80 columns), so nothing is cut or wrapped at 80 columns;
    `COLUMNS` still sets the width when given."""
    if isinstance(rendered, str):
        typer.echo(rendered, nl=False)
        return
    import sys

    from rich.console import Console

    console = Console(width=width)
    if width is None and not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        wide = Console(width=10_000)
        needed = wide.measure(rendered).maximum
        console = Console(width=min(max(80, needed), 10_000))
    console.print(rendered)


def load_and_analyze(
    path: str, *, metric=None, step_key=None, format_in=None, dtype=None, run=None, set_values=None
):
    """(RunData, Analysis, Thresholds) for one run; exit 2 with one line on bad input."""
    try:
        from stabilitycli.ingest.options import ReadOptions
        from stabilitycli.pipeline import run as pipeline

        thresholds, settings = load_thresholds(path, set_values)
        options = ReadOptions(
            format_in=format_in,
            metric_overrides=pairs(metric, "--metric"),
            step_key=step_key,
            dtype=dtype,
            run=run,
        )
        data = pipeline.load_run(path, options)
        analysis = with_settings(pipeline.analyze(data, thresholds), settings)
        return data, analysis, thresholds
    except (StabInputError, StabUsageError) as err:
        raise fail(str(err)) from None
    except Exception as err:
        raise internal_error(err, path) from None


def write_output(text: str, output: Path | None) -> None:
    """To the file when given (one line on stderr says where), else to stdout."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        raise fail(f"{output}: cannot write: {err.strerror or err}") from None
    typer.echo(f"wrote {output}", err=True)
