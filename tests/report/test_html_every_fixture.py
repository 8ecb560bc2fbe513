"""The report of every fixture draws in a real browser, with every series the verdict cites.

All reports go into one folder with `--js beside` (plotly.js written once), plus a few
inline pages; one headless Chromium loads them all, one after another, through a small
harness page that reads each page's figures back with JavaScript (`el.data`, `el.layout`):
one browser start instead of one per page, which keeps this test under a minute and a half
on a loaded two-core machine. Sizes with and without the library: `scripts/report_sizes.py`.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.report.test_html import CHROMIUM, HEADLESS_FLAGS
from tests.report.test_html_story import _cited

# a rank folder `stab report` cannot read without --rank-pattern (it has no such option)
NOT_A_REPORT = {"ranks/custom_names"}
INLINE = ("runs/divergence-weight-norm", "torch-runs/nan-adam-eps0", "ranks/seed_64")


def _fixtures() -> dict[str, Path]:
    """Every log `stab report` takes: one per run folder, and every rank file or folder."""
    found = {}
    for group in ("runs", "torch-runs"):
        for folder in sorted((FIXTURES / group).iterdir()):
            logs = sorted(folder.glob("run.jsonl*"))
            if logs:
                found[f"{group}/{folder.name}"] = logs[0]
    for entry in sorted((FIXTURES / "ranks").iterdir()):
        if f"ranks/{entry.name}" not in NOT_A_REPORT:
            found[f"ranks/{entry.name}"] = entry
    return found


FIXTURE_LOGS = _fixtures()


def _file(name: str) -> str:
    return name.replace("/", "--") + ".html"


_HARNESS = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>harness</title></head>
<body><pre id="out"></pre><script>
var pages = %s, results = {}, at = 0;
function probe(doc) {
  var plots = Array.prototype.map.call(doc.querySelectorAll(".js-plotly-plot"), function (el) {
    var title = el.layout && el.layout.title ? el.layout.title.text || "" : "";
    return {names: (el.data || []).map(function (t) { return t.name || ""; }), title: title,
            svg: el.querySelectorAll("svg.main-svg").length};
  });
  return {rendered: doc.body.getAttribute("data-plots-rendered"),
          divs: doc.querySelectorAll("div.plot").length,
          nolib: doc.querySelectorAll(".nolib").length, plots: plots};
}
function next() {
  if (at >= pages.length) {
    document.getElementById("out").textContent = JSON.stringify(results);
    return;
  }
  var page = pages[at++], frame = document.createElement("iframe"), tries = 0;
  frame.style.width = "1200px";
  frame.style.height = "900px";
  frame.onload = function () {
    (function wait() {
      var r;
      try { r = probe(frame.contentDocument); } catch (e) { r = {error: String(e)}; }
      var drawn = r.plots && r.plots.length === r.divs &&
        r.plots.every(function (p) { return p.svg > 0; });
      if (r.error || r.nolib || (r.rendered !== null && drawn) || ++tries > 400) {
        results[page] = r;
        frame.remove();
        next();
      } else {
        setTimeout(wait, 25);
      }
    })();
  };
  frame.src = page;
  document.body.appendChild(frame);
}
next();
</script></body></html>
"""


def _run_browser(folder: Path, pages: list[str]) -> tuple[dict, list[str]]:
    harness = folder / "harness.html"
    harness.write_text(_HARNESS % json.dumps(pages), encoding="utf-8")
    done = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS_FLAGS,
            "--allow-file-access-from-files",  # the harness reads the framed pages' figures
            f"--user-data-dir={folder.parent / 'chrome-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=600000",
            "--dump-dom",
            harness.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.DOTALL).group(1)
    assert out, "the harness did not finish: " + done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return json.loads(html.unescape(out)), console


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """(figures read back per page, console lines, cited series per page), for all pages."""
    pytest.importorskip("plotly")
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium); browser checks skipped")
    from typer.testing import CliRunner

    from stabilitycli.cli import app
    from stabilitycli.commands._common import load_and_analyze

    root = tmp_path_factory.mktemp("every-report")
    beside, inline = root / "beside", root / "inline"
    beside.mkdir()
    inline.mkdir()
    runner = CliRunner()
    pages, cited = {}, {}
    jobs = [(name, "beside", beside) for name in FIXTURE_LOGS]
    jobs += [(name, "inline", inline) for name in INLINE]
    for name, js, folder in jobs:
        out = folder / _file(name)
        result = runner.invoke(app, ["report", str(FIXTURE_LOGS[name]), "-o", str(out), "--js", js])
        assert result.exit_code in (0, 1), (name, js, result.output, result.exception)
        pages[(name, js)] = f"../{folder.name}/{out.name}"
    assert [p.name for p in beside.glob("*.js")] == [p.name for p in beside.glob("plotly-*.js")]
    assert len(list(beside.glob("*.js"))) == 1  # the library once for the whole folder
    assert list(inline.glob("*.js")) == []
    # the library is in the inline pages (4.8 MB), in no page beside it
    assert all(p.stat().st_size < 500_000 for p in beside.glob("*.html"))
    assert all(p.stat().st_size > 4_000_000 for p in inline.glob("*.html"))
    for name in FIXTURE_LOGS:
        data, analysis, _ = load_and_analyze(str(FIXTURE_LOGS[name]))
        cited[name] = _cited_and_logged(data, analysis)
    figures, console = _run_browser(beside, list(pages.values()))
    return {key: figures.get(url) for key, url in pages.items()}, console, cited


def _cited_and_logged(data, analysis) -> set[str]:
    """The logged series the findings cite (their metric, evidence and causes), and any
    logged series whose key the verdict names in its headline, path or remedies."""
    logged = set(data.metric_columns) | {"loss", "grad_norm", "lr", "loss_scale"}
    names = {n for n in _cited(analysis) if n in logged}
    v = analysis.verdict
    text = " ".join([v.summary, *v.remediation, *(f"{s.question} {s.evidence}" for s in v.path)])
    for key in data.metric_columns:
        # keys that read as identifiers (grad_norm, act_norm/ln_f), not words such as "tokens"
        if ("_" in key or "/" in key) and re.search(rf"(?<![\w/.]){re.escape(key)}(?![\w/])", text):
            names.add(key)
    return names


def _drawn(figure: dict) -> set[str]:
    """Series names as the page shows them: trace names and panel titles, without the notes
    in parentheses ("act_norm/embed  (first non-finite)", "param_norm (cited by: ...)")."""
    names = {html.unescape(n).split("  (")[0] for p in figure["plots"] for n in p["names"]}
    return names | {html.unescape(p["title"]).split(" (")[0] for p in figure["plots"]}


def _page_errors(console: list[str], name: str, js: str) -> list[str]:
    """The console lines Chromium attributes to that page (it names the page's URL)."""
    return [line for line in console if f"/{js}/{_file(name)}" in line]


CASES = [(name, "beside") for name in FIXTURE_LOGS] + [(name, "inline") for name in INLINE]


@pytest.mark.parametrize(("name", "js"), CASES, ids=[f"{n}-{j}" for n, j in CASES])
def test_every_report_draws_every_cited_series(browser, name, js) -> None:
    figures, console, cited = browser
    page = figures[(name, js)]
    assert page is not None, "the harness never reached this page"
    assert "error" not in page, page
    assert _page_errors(console, name, js) == []
    assert page["nolib"] == 0, "plotly.js did not load"
    assert page["divs"] >= 1 and page["rendered"] == str(page["divs"])
    assert len(page["plots"]) == page["divs"], "a plot div plotly never drew into"
    assert all(p["svg"] >= 1 for p in page["plots"]), [p["title"] for p in page["plots"]]
    missing = cited[name] - _drawn(page)
    assert not missing, f"cited but not plotted: {sorted(missing)}"


def test_no_page_wrote_to_the_console(browser) -> None:
    # lines the library itself logs cannot be put on one page: none is allowed at all
    assert browser[1] == []
