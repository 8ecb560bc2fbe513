"""`stab report PATH [-o report.html]`: a self-contained HTML report with plots.

Written to `<run>.stab.html` in the current directory unless `-o` names a file (`-o -`:
stdout). Needs the optional `report` extra (plotly, for its bundled plotly.min.js);
without it the command exits 2 with one line naming the extra. Exit status as `stab
analyze` (0, or 1 when a finding is at or above `--fail-on`), 2 for unreadable input,
a bad option or the missing extra.

`--js` says where the page gets plotly.js (4.8 MB, most of a page): `inline`
(the default: one file that works offline), `beside` (one copy written next to
the report, shared by every report in that folder, loaded by relative path) or
`cdn` (a link to cdn.plot.ly: a small page that needs the network; only when asked).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    FailOnOpt,
    SetOpt,
    default_output,
    exit_by_verdict,
    fail,
    load_and_analyze,
    write_output,
)
from stabilitycli.commands.read_options import ReadArgs, takes_read_options


class XAxis(StrEnum):
    steps = "steps"
    tokens = "tokens"


class JsFrom(StrEnum):
    inline = "inline"
    beside = "beside"
    cdn = "cdn"


@takes_read_options()
def command(
    path: Annotated[str, typer.Argument(help="Log file, directory or URI of one run.")],
    *,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The HTML file to write; - for stdout (default: <run>.stab.html here).",
            show_default=False,
        ),
    ] = None,
    x: Annotated[
        XAxis,
        typer.Option(
            "--x", help="x-axis: training steps, or consumed tokens (samples if no tokens)."
        ),
    ] = XAxis.steps,
    js: Annotated[
        JsFrom,
        typer.Option(
            "--js",
            help=(
                "Where the page gets plotly.js: inline (one offline file, ~5 MB), beside "
                "(one copy next to the report, shared by a folder of reports), "
                "cdn (a link; the page needs the network)."
            ),
        ),
    ] = JsFrom.inline,
    read: ReadArgs,
    set_values: SetOpt = None,
    fail_on: FailOnOpt = FailOn.error,
) -> None:
    # typer prints this line as is in `stab --help`; a wrapped docstring would break the listing
    """Write one offline HTML page: verdict, loss with its mu+3 sigma band and spikes, grad norm, LR, loss scale."""  # noqa: E501
    import importlib.util

    from stabilitycli.report.html import PLOTLY_MISSING

    if importlib.util.find_spec("plotly") is None:
        raise fail(PLOTLY_MISSING)
    data, analysis, thresholds = load_and_analyze(path, read, set_values)
    output = output or default_output(analysis, path, ".stab.html")
    from stabilitycli.core.errors import StabUsageError
    from stabilitycli.report.html import cdn_script, render
    from stabilitycli.report.plotdata import build

    try:
        plots = build(analysis, data, thresholds, x_axis=x.value)
    except StabUsageError as err:
        raise fail(str(err)) from None
    if js is JsFrom.beside:
        page = render(analysis, plots, js_src=_library_beside(output))
    elif js is JsFrom.cdn:
        url, integrity = cdn_script()
        page = render(analysis, plots, js_src=url, js_integrity=integrity)
    else:
        page = render(analysis, plots)
    write_output(page, output)
    raise exit_by_verdict(analysis, fail_on)


def _library_beside(output: Path) -> str:
    """Write plotly.js next to `output` unless that very file is already there; its name,
    which the page loads by relative path (so the folder can be moved or served as a whole)."""
    from stabilitycli.report.html import library_file_name, plotly_js

    name = library_file_name()
    path = output.parent / name
    code = plotly_js().encode("utf-8")
    try:
        same = path.is_file() and path.stat().st_size == len(code) and path.read_bytes() == code
        if not same:
            path.write_bytes(code)
            typer.echo(f"wrote {path}", err=True)
    except OSError as err:
        raise fail(f"{path}: cannot write: {err.strerror or err}") from None
    return name
