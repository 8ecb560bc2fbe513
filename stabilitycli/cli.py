"""The `stab` command line: the typer app, the sub-commands it registers, `main()`.

Each sub-command lives in `stabilitycli/commands/<name>.py` and exposes
`command`; this module only registers them and adds `--version`. No
thresholds and no detection logic here, and polars is never imported at
module level (here or in `commands/`), so `stab --help` stays instant.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from stabilitycli import __version__
from stabilitycli.exit_codes import ExitCode

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="stab: read an ML training run's metric logs and say what went wrong.\n\n"
    "Exit status: 0 nothing at/above --fail-on, 1 instability found, 2 bad input or usage.",
)

# in the order `stab --help` lists them
COMMANDS: tuple[str, ...] = ("analyze", "explain", "ranks", "compare", "postmortem", "report")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"stab {__version__}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options of `stab` itself, given before the command."""


for _name in COMMANDS:
    _module = importlib.import_module(f"stabilitycli.commands.{_name}")
    app.command(_name, epilog=getattr(_module, "EPILOG", None))(_module.command)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    main()
