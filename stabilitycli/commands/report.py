"""`stab report PATH -o report.html`: a self-contained HTML report with plots.

Needs the optional `report` extra (plotly, for its bundled plotly.min.js);
without it the command exits 2 with one line naming the extra. Exit status:
0 when written, 2 for unreadable input, a bad option or the missing extra.
"""

from __future__ import annotations

from enum import StrEnum
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
    fail,
    load_and_analyze,
    write_output,
)


class XAxis(StrEnum):
    steps = "steps"
    tokens = "tokens"


def command(
    path: Annotated[str, typer.Argument(help="Log file, directory or URI of one run.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")],
    x: Annotated[
        XAxis,
        typer.Option(
            "--x", help="x-axis: training steps, or consumed tokens (samples if no tokens)."
        ),
    ] = XAxis.steps,
    metric: MetricOpt = None,
    step_key: StepKeyOpt = None,
    format_in: FormatInOpt = None,
    dtype: DtypeOpt = None,
    run: RunOpt = None,
    set_values: SetOpt = None,
) -> None:
    # typer prints this line as is in `stab --help`; a wrapped docstring would break the listing
    """Write one offline HTML page: verdict, loss with its mu+3 sigma band and spikes, grad norm, LR, loss scale."""  # noqa: E501
    import importlib.util

    from stabilitycli.report.html import PLOTLY_MISSING

    if importlib.util.find_spec("plotly") is None:
        raise fail(PLOTLY_MISSING)
    data, analysis, thresholds = load_and_analyze(
        path,
        metric=metric,
        step_key=step_key,
        format_in=format_in,
        dtype=dtype,
        run=run,
        set_values=set_values,
    )
    from stabilitycli.errors import StabUsageError
    from stabilitycli.report.html import render
    from stabilitycli.report.plotdata import build

    try:
        plots = build(analysis, data, thresholds, x_axis=x.value)
    except StabUsageError as err:
        raise fail(str(err)) from None
    write_output(render(analysis, plots), output)
