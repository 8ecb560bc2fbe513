"""`stab report`: one HTML file; by default self-contained (plotly.js inlined, works offline).

`render(analysis, plots)` is pure: the plot numbers come from
`stabilitycli.report.plotdata`, the verdict from the `Analysis`. plotly (the optional
`report` extra) is needed only for its bundled plotly.min.js, read from the
installed wheel. Where the page gets it is the caller's choice (`--js`): inlined
(about 4.8 MB, nothing loaded from the network), a `<script src>` to one copy
written beside a folder of reports (`library_file_name`), or the CDN
(`cdn_script`, with a subresource-integrity hash of the same file).

The plot data is one JSON block: x arrays that several traces share (the loss,
its mean and its band) are written once under "xs" and named by index in each
trace ("xs": i); the boot script puts them back before plotly sees the traces.

Every string that came from a log (run name, path, metric keys, layer names,
messages) is escaped: HTML-escaped in the page (control characters shown as
escapes first, by `escape.html`), and in the JSON that feeds
the plots `<`, `>` and `&` are written as \\u escapes so that nothing can close
the script element; plotly displays the HTML-escaped labels as text.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from stabilitycli.core.model import Analysis, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.detect.kinds.spike import BLIP, SPIKE
from stabilitycli.report import escape
from stabilitycli.report.plotdata import Line, Markers, Panel, Plots

PLOTLY_MISSING = "stab report needs plotly: pip install 'stabilitycli[report]'"

_MARKER_STYLE = {
    SPIKE.marker: {
        "symbol": "triangle-up",
        "size": 13,
        "color": "#d62728",
        "line": {"width": 1, "color": "#000"},
    },
    "cause": {
        "symbol": "star",
        "size": 13,
        "color": "#d62728",
        "line": {"width": 1, "color": "#000"},
    },
    "nonfinite": {"symbol": "x", "size": 10, "color": "#b00000"},
    "overflow": {"symbol": "diamond", "size": 7, "color": "#ff7f0e"},
    BLIP.marker: {"symbol": "circle-open", "size": 7, "color": "#7f7f7f"},
    "jump": {"symbol": "triangle-down", "size": 11, "color": "#9467bd"},
    "onset": {
        "symbol": "diamond",
        "size": 12,
        "color": "#ff7f0e",
        "line": {"width": 1, "color": "#000"},
    },
}
_REGION_STYLE = {
    # the stretch after a divergence's onset: faint, under the curves
    "diverged": {"fillcolor": "rgba(255,127,14,0.10)", "label": "top right"},
    # the window the trend test ran on: hatched-looking by a dotted outline
    "trend-window": {"fillcolor": "rgba(120,120,120,0.10)", "label": "bottom left"},
}
_LINE_STYLE = {
    "series": {"color": "#1f77b4", "width": 1.2},
    "band-low": {"color": "rgba(120,120,120,0.8)", "width": 1, "dash": "dot"},
    "band-high": {"color": "rgba(214,39,40,0.6)", "width": 1, "dash": "dot"},
    # the trajectory a resume rewrote: a branch off the curve, drawn under it
    "abandoned": {"color": "rgba(148,103,189,0.85)", "width": 1.2, "dash": "dash"},
}
_SEVERITY_CLASS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}


def plotly_js() -> str:
    """The plotly.js bundle shipped in the plotly wheel; ImportError when the extra is missing."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def library_file_name() -> str:
    """The name of the copy written beside the reports: versioned, so two plotly versions
    never overwrite each other's copy under reports that still point at it."""
    from plotly.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


def cdn_script() -> tuple[str, str]:
    """(URL, integrity) of the same plotly.js on plotly's CDN; the hash is of the installed copy,
    so a browser refuses a CDN file that is not the one this report was made with."""
    from plotly.offline import get_plotlyjs_version

    digest = hashlib.sha384(plotly_js().encode("utf-8")).digest()
    url = f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"
    return url, "sha384-" + base64.b64encode(digest).decode("ascii")


def render(
    analysis: Analysis,
    plots: Plots,
    *,
    js: str | None = None,
    js_src: str | None = None,
    js_integrity: str | None = None,
) -> str:
    """The whole page. `js` replaces the inlined plotly.js (tests pass a stub to stay fast);
    `js_src` loads it from that URL or relative path instead of inlining it."""
    figures = [_figure(panel, plots) for panel in plots.panels]
    xs = _share_x(figures)
    data = _script_json({"xs": xs, "figures": figures})
    src, v = analysis.source, analysis.verdict
    title = f"stab report — {src.run or src.path}"
    body = [
        f"<h1>{_e(title)}</h1>",
        _verdict_block(analysis),
        _source_block(analysis, plots),
        _coverage_block(analysis),
        '<section id="plots">',
        *(
            f'<div class="plot" id="plot-{i}" data-panel="{_e(p.key)}"></div>'
            for i, p in enumerate(plots.panels)
        ),
        "</section>",
        _path_table(v.path),
        _remedy_block(v.remediation),
        _findings_table(analysis),
        _notes_block(analysis),
    ]
    return _PAGE.format(
        title=_e(title),
        css=_CSS,
        body="\n".join(b for b in body if b),
        data=data,
        plotly=_library_tag(js, js_src, js_integrity),
        boot=_BOOT,
    )


def _library_tag(js: str | None, src: str | None, integrity: str | None) -> str:
    if src is None:
        inline = js if js is not None else plotly_js()
        return "<script>" + inline.replace("</script", "<\\/script") + "</script>"
    # a CDN needs CORS for the integrity check; a relative file:// path would fail it
    checked = f' integrity="{_e(integrity)}" crossorigin="anonymous"' if integrity else ""
    return f'<script src="{_e(src)}" charset="utf-8"{checked}></script>'


def _share_x(figures: list[dict[str, Any]]) -> list[list[float]]:
    """Move every line's x array into one list, each distinct array once; traces keep an index.

    The loss, its trailing mean and its band share one x; so do series logged at the same
    steps when nothing had to be cut (every point kept)."""
    shared: list[list[float]] = []
    index: dict[tuple[float, ...], int] = {}
    for fig in figures:
        for trace in fig["data"]:
            if trace.get("mode") != "lines":
                continue  # markers: a few points each, inline
            key = tuple(trace.pop("x"))
            if key not in index:
                index[key] = len(shared)
                shared.append(list(key))
            trace["xs"] = index[key]
    return shared


# ---------------------------------------------------------------- figures


def _p(text: str) -> str:
    """A label for plotly: HTML-escaped, which plotly displays as the original characters."""
    return escape.html(text)


def _vertical_line(x: float, line: dict[str, Any]) -> dict[str, Any]:
    """A plotly shape: a line at step x across the whole height of the plot."""
    return {"type": "line", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1, "line": line}


def _top_note(x: float, label: str, side: str, font: dict[str, Any]) -> dict[str, Any]:
    """A plotly annotation: `label` at the top of the plot, beside step x on `side`."""
    return {
        "x": x,
        "yref": "paper",
        "y": 1,
        "text": _p(label),
        "showarrow": False,
        "xanchor": side,
        "yanchor": "top",
        "font": font,
    }


def _figure(panel: Panel, plots: Plots) -> dict[str, Any]:
    traces: list[dict[str, Any]] = []
    for line in panel.lines:
        traces.append(_line_trace(line))
    for markers in panel.markers:
        traces.append(_marker_trace(markers))
    if panel.heatmap is not None:
        h = panel.heatmap
        traces.append(
            {
                "type": "heatmap",
                "x": h.x,
                "y": h.y,
                "z": h.z,
                "text": h.text,  # fixed words and numbers, nothing from the log
                "hovertemplate": (
                    f"rank %{{y}}, {h.bin_steps} steps around {_p(plots.x_title)} %{{x:.0f}}: "
                    "%{text}<extra></extra>"
                ),
                "zmin": -10,
                "zmax": 11,
                # z runs -10..+10 (clipped robust z) blue-white-red; 11 (non-finite) alone is black
                "colorscale": [
                    [0, "#2166ac"],
                    [10 / 21, "#f7f7f7"],
                    [20 / 21, "#b2182b"],
                    [20.5 / 21, "#000000"],
                    [1, "#000000"],
                ],
                "colorbar": {"title": {"text": "robust z"}},
                "hoverongaps": False,
            }
        )
    shapes, notes = [], []
    for x, label in plots.restarts:
        shapes.append(_vertical_line(x, {"color": "#2ca02c", "width": 1.5, "dash": "dash"}))
        notes.append(_top_note(x, label, "left", {"size": 10, "color": "#2ca02c"}))
    for region in panel.regions:
        style = _REGION_STYLE.get(region.role, _REGION_STYLE["trend-window"])
        shapes.append(
            {
                "type": "rect",
                "x0": region.x0,
                "x1": region.x1,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "fillcolor": style["fillcolor"],
                "line": {"width": 1, "dash": "dot", "color": "rgba(90,90,90,0.5)"},
                "layer": "below",
                "label": {
                    "text": _p(region.label),
                    "textposition": style["label"],
                    "font": {"size": 10, "color": "#555"},
                },
            }
        )
    for x, label in panel.events:
        shapes.append(_vertical_line(x, {"color": "#ff7f0e", "width": 2}))
        notes.append(_top_note(x, label, "right", {"size": 11, "color": "#c05a00"}))
    yaxis: dict[str, Any] = {
        "title": {"text": _p(panel.y_title)},
        "type": "log" if panel.log_y else "linear",
    }
    if panel.log_y and panel.y_ticks is not None:
        yaxis.update(tickmode="array", tickvals=panel.y_ticks[0], ticktext=panel.y_ticks[1])
    elif panel.y_range is not None:
        yaxis["range"] = list(panel.y_range)
    layout = {
        "title": {"text": _p(panel.title), "font": {"size": 15}},
        "height": 440 if panel.heatmap is not None else 350,
        "margin": {"l": 70, "r": 20, "t": 40, "b": 80},
        # axis types are set, never guessed from the data: a series of "NaN" words must not
        # turn an axis into categories
        "xaxis": {"title": {"text": _p(plots.x_title)}, "type": "linear"},
        "yaxis": yaxis,
        "legend": {"orientation": "h", "y": -0.3},
        "shapes": shapes,
        "annotations": notes,
        "hovermode": "closest",
    }
    return {"data": traces, "layout": layout}


def _line_trace(line: Line) -> dict[str, Any]:
    trace = {
        "type": "scatter",
        "mode": "lines",
        "name": _p(line.name),
        "x": line.x,
        "y": line.y,
        "connectgaps": False,
        "hovertemplate": f"{_p(line.name)}<br>%{{x}}: %{{y:.4g}}<extra></extra>",
    }
    if line.role in _LINE_STYLE:
        trace["line"] = _LINE_STYLE[line.role]
    if line.role == "band-high":
        trace["fill"] = "tonexty"
        trace["fillcolor"] = "rgba(214,39,40,0.08)"
    return trace


def _marker_trace(markers: Markers) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "markers",
        "name": _p(markers.name),
        "x": markers.x,
        "y": markers.y,
        "text": [_p(t) for t in markers.text],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": _MARKER_STYLE.get(markers.role, {}),
    }


def _script_json(value: Any) -> str:
    """JSON that cannot end the <script> element it sits in, whatever the strings hold."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    for char, coded in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, coded)
    return text


# ---------------------------------------------------------------- text blocks


def _e(text: Any) -> str:
    return escape.html(text)


def _verdict_block(analysis: Analysis) -> str:
    v = analysis.verdict
    cls = "healthy" if v.code in ("healthy", "insufficient-data") else _SEVERITY_CLASS[v.severity]
    inferred = ", inferred" if v.cause_inferred else ""
    cause = f' <span class="cause">cause: {_e(v.cause)}{inferred}</span>' if v.cause else ""
    said = sentence(analysis.extras.get("settings"))
    settings = f'<p class="settings"><strong>{_e(said)}</strong></p>' if said else ""
    return (
        f'<div class="verdict {cls}"><span class="code">{_e(v.code)}</span>{cause}'
        f"<p>{_e(v.summary)}</p>{settings}</div>"
    )


def _source_block(analysis: Analysis, plots: Plots) -> str:
    s = analysis.source
    metrics = ", ".join(
        f"{k} &larr; {_e(val)}"
        for k, val in s.metrics.items()
        if k in ("loss", "grad_norm", "lr", "loss_scale", "tokens")
    )
    ranks = f"; {s.ranks} ranks" if s.ranks else ""
    drawn = (
        (
            f"; plots draw {plots.points_drawn:,} of {plots.points_in:,} logged values "
            "(min/max per bucket, every flagged point kept)"
        )
        if plots.points_in
        else ""
    )
    set_aside = f", {s.rows_rewritten:,} rewritten by a resume" if s.rows_rewritten else ""
    return (
        f'<p class="source"><b>{_e(s.path)}</b> ({_e(s.format)}): '
        f"{s.rows_read:,} rows read, {s.rows_used:,} used, "
        f"{s.rows_rejected:,} rejected{set_aside}; "
        f"{_e(s.steps_text())}{ranks}; "
        f"dtype {_e(s.dtype or 'unknown')}; {metrics}{drawn}</p>"
    )


def _path_table(path) -> str:
    if not path:
        return ""
    rows = "".join(
        f"<tr><td>{_e(p.question)}</td><td>{_e(p.answer)}</td><td>{_e(p.evidence)}</td></tr>"
        for p in path
    )
    return (
        '<h2>Questions asked</h2><table class="path">'
        "<tr><th>Q</th><th>answer</th><th>evidence</th></tr>"
        f"{rows}</table>"
    )


def _remedy_block(remedies: list[str]) -> str:
    if not remedies:
        return ""
    return "<h2>Remedy</h2><ul>" + "".join(f"<li>{_e(r)}</li>" for r in remedies) + "</ul>"


def _findings_table(analysis: Analysis, limit: int = 200) -> str:
    if not analysis.findings:
        return "<h2>Findings</h2><p>none</p>"
    rows = []
    for f in analysis.findings[:limit]:
        step = "" if f.step is None else f.step
        rank = "" if f.rank is None else f.rank
        rows.append(
            f'<tr class="{_SEVERITY_CLASS[f.severity]}"><td>{f.severity}</td><td>{_e(f.code)}</td>'
            f"<td>{_e(step)}</td><td>{_e(rank)}</td><td>{_e(f.message)}</td></tr>"
        )
    more = (
        f"<p>{len(analysis.findings) - limit} more findings not shown.</p>"
        if len(analysis.findings) > limit
        else ""
    )
    return (
        f"<h2>Findings ({len(analysis.findings)})</h2>"
        "<table><tr><th>severity</th><th>code</th><th>step</th>"
        f"<th>rank</th><th>message</th></tr>{''.join(rows)}</table>{more}"
    )


def _coverage_block(analysis: Analysis) -> str:
    if analysis.coverage is None:
        return ""
    return f'<p class="coverage"><b>Coverage</b>: {_e(analysis.coverage.line())}</p>'


def _notes_block(analysis: Analysis) -> str:
    s = analysis.source
    notes = [*s.warnings, *s.notes, *(f"{k.code}: {k.reason}" for k in analysis.skipped)]
    if not notes:
        return ""
    return (
        '<h2>Notes</h2><ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"
    )


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
.verdict{border-left:6px solid #888;padding:.5em 1em;background:#f6f6f6}
.verdict.error{border-color:#d62728}.verdict.warning{border-color:#ff9800}.verdict.healthy{border-color:#2ca02c}
.verdict .code{font-weight:bold;font-size:1.2em}.verdict .cause{color:#1565c0;margin-left:1em}
.source{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.88em;width:100%}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
tr.error td:first-child{color:#d62728;font-weight:bold}tr.warning td:first-child{color:#e65100}tr.info td:first-child{color:#888}
.plot{margin:.6em 0}.notes{color:#666;font-size:.88em}
"""  # noqa: E501 (one CSS rule per line; wrapping would change the page it writes)

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
{body}
<script type="application/json" id="stab-data">{data}</script>
{plotly}
<script>{boot}</script>
</body>
</html>
"""

_BOOT = """
(function () {
  var doc = JSON.parse(document.getElementById("stab-data").textContent);
  if (typeof Plotly === "undefined") {
    var note = document.createElement("p");
    note.className = "nolib";
    note.textContent = "The plots need plotly.js, which did not load (offline, or the file " +
      "beside this report is missing). stab report --js inline writes one self-contained page.";
    document.getElementById("plots").prepend(note);
    return;
  }
  var config = {displaylogo: false, responsive: true};
  doc.figures.forEach(function (fig, i) {
    fig.data.forEach(function (trace) {
      if (trace.xs !== undefined) { trace.x = doc.xs[trace.xs]; delete trace.xs; }
    });
    Plotly.newPlot("plot-" + i, fig.data, fig.layout, config);
  });
  document.body.setAttribute("data-plots-rendered", String(doc.figures.length));
})();
"""
