"""`stab postmortem PATH [-o FILE]`: the seed-003 post-mortem, filled from the log.

Written to `<run>.postmortem.md` in the current directory unless `-o` names a file
(`-o -`: stdout). Exit status as `stab analyze` (0, or 1 when a finding is at or above
`--fail-on`), 2 for unreadable input or a bad option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    FailOnOpt,
    SetOpt,
    default_output,
    exit_by_verdict,
    load_and_analyze,
    split_codes,
    write_output,
)
from stabilitycli.commands.read_options import ReadArgs, takes_read_options


@takes_read_options()
def command(
    path: Annotated[str, typer.Argument(help="Log file, directory or URI of one run.")],
    *,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the Markdown here; - for stdout (default: <run>.postmortem.md here).",
            show_default=False,
        ),
    ] = None,
    read: ReadArgs,
    set_values: SetOpt = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore",
            help="Rule or finding codes to leave out, as `analyze --ignore` does: the "
            "root cause rests on none of them.",
        ),
    ] = None,
    fail_on: FailOnOpt = FailOn.error,
) -> None:
    # typer prints this line as is in `stab --help`; a wrapped docstring would break the listing
    """Write a Markdown post-mortem: symptoms, ranked hypotheses, root cause, fix, verification, cost."""  # noqa: E501
    import datetime

    from stabilitycli.postmortem.data import build
    from stabilitycli.report.postmortem import render

    data, analysis, thresholds = load_and_analyze(path, read, set_values, split_codes(ignore))
    document = render(build(analysis, data, thresholds), date=datetime.date.today().isoformat())
    write_output(document, output or default_output(analysis, path, ".postmortem.md"))
    raise exit_by_verdict(analysis, fail_on)
