"""`stab postmortem PATH [-o FILE]`: the seed-003 post-mortem, filled from the log.

Exit status: 0 when written (whatever the verdict: the document is the
product), 2 for unreadable input or a bad option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    DtypeOpt,
    FormatInOpt,
    MetricOpt,
    RunOpt,
    SetOpt,
    StepKeyOpt,
    load_and_analyze,
    write_output,
)


def command(
    path: Annotated[str, typer.Argument(help="Log file, directory or URI of one run.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the Markdown here (default: stdout)."),
    ] = None,
    metric: MetricOpt = None,
    step_key: StepKeyOpt = None,
    format_in: FormatInOpt = None,
    dtype: DtypeOpt = None,
    run: RunOpt = None,
    set_values: SetOpt = None,
) -> None:
    # typer prints this line as is in `stab --help`; a wrapped docstring would break the listing
    """Write a Markdown post-mortem: symptoms, ranked hypotheses, root cause, fix, verification, cost."""  # noqa: E501
    import datetime

    from stabilitycli.postmortem.data import build
    from stabilitycli.report.postmortem import render

    data, analysis, thresholds = load_and_analyze(
        path,
        metric=metric,
        step_key=step_key,
        format_in=format_in,
        dtype=dtype,
        run=run,
        set_values=set_values,
    )
    document = render(build(analysis, data, thresholds), date=datetime.date.today().isoformat())
    write_output(document, output)
