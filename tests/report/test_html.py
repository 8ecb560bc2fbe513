"""`stab report`: plot data, downsampling, escaping, offline page; and a real headless browser."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from stabilitycli.report import html as html_report
from stabilitycli.report.plotdata import build, keep_indices
from tests.conftest import FIXTURES, run_fixture
from tests.report.helpers import analyse_path, analysed, loss_rows, write_jsonl

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)
EVIL_LAYER = "h.0.attn<img src=x onerror=\"document.title='PWNED'\">"
EVIL_LAYER2 = "ln_f</script><script>document.title='PWNED'</script>"
EVIL_DIR = "<img src=x onerror=document.title='PWNED'>"


def _page(name: str, **kwargs) -> tuple[str, object]:
    data, analysis = analysed(name)
    plots = build(analysis, data, **kwargs)
    return html_report.render(analysis, plots, js="/* plotly stub */"), plots


def _figures(page: str) -> list[dict]:
    raw = re.search(
        r'<script type="application/json" id="stab-data">(.*?)</script>', page, re.DOTALL
    ).group(1)
    return json.loads(raw)["figures"]


def _evil_nan_run(tmp_path):
    rows = loss_rows("nan-fp32-origin")
    for r in rows:
        r[f"act_norm/{EVIL_LAYER}"] = r.pop("act_norm/h.0.attn")
        r[f"act_norm/{EVIL_LAYER2}"] = r.pop("act_norm/ln_f")
    path = write_jsonl(tmp_path / EVIL_DIR / "run.jsonl", rows)
    (tmp_path / EVIL_DIR / "manifest.json").write_text('{"dtype": "fp32"}')
    return analyse_path(path)


# ---------------------------------------------------------------- plot data


def test_downsampling_keeps_shape_and_every_flagged_point() -> None:
    rng = np.random.default_rng(0)
    values = 3 + 0.05 * rng.standard_normal(200_000)
    values[123_457] = 9.0  # a spike
    values[150_000:150_010] = np.nan
    must = np.zeros(values.size, dtype=bool)
    must[[5, 99_999, 188_888]] = True  # flagged by findings
    idx = keep_indices(values, 500, must)
    assert idx.size <= 2 * 500 + 2 + 3 + 500
    kept = set(idx.tolist())
    assert {123_457, 5, 99_999, 188_888, 0, values.size - 1, 150_000} <= kept
    assert np.nanmin(values[idx]) == np.nanmin(values) and np.nanmax(values[idx]) == 9.0
    assert np.all(np.diff(idx) > 0)
    short = np.arange(50.0)
    assert keep_indices(short, 500).tolist() == list(range(50))


def test_loss_panel_has_band_and_spike_marker() -> None:
    data, analysis = analysed("spike-long-tail")
    plots = build(analysis, data)
    loss = next(p for p in plots.panels if p.key == "loss")
    roles = [line.role for line in loss.lines]
    assert roles == ["band-low", "band-high", "series"]
    spike = next(m for m in loss.markers if m.role == "spike")
    assert spike.x == [900.0] and abs(spike.y[0] - 6.05119) < 1e-9
    grad = next(p for p in plots.panels if p.key == "grad_norm")
    assert grad.log_y and next(m for m in grad.markers if m.role == "cause").x == [899.0]
    assert plots.points_in == plots.points_drawn  # 1,500 points: nothing to cut


def test_nan_layers_panel_and_nonfinite_markers() -> None:
    data, analysis = analysed("nan-fp32-origin")
    plots = build(analysis, data)
    loss = next(p for p in plots.panels if p.key == "loss")
    bad = next(m for m in loss.markers if m.role == "nonfinite")
    assert bad.x[0] == 1200.0 and bad.text[0] == "loss = NaN at step 1200"
    layers = next(p for p in plots.panels if p.key == "layers")
    names = [line.name for line in layers.lines]
    assert names[0] == "act_norm/embed" and "act_norm/h.1.mlp  (first non-finite)" in names
    assert all(1100 <= x <= 1203 for line in layers.lines for x in line.x)


def test_loss_scale_panel_marks_overflows() -> None:
    data, analysis = analysed("fp16-healthy-scaler")
    scale = next(p for p in build(analysis, data).panels if p.key == "loss_scale")
    overflow = next(m for m in scale.markers if m.role == "overflow")
    assert scale.log_y and len(overflow.x) >= 1 and all(y is not None for y in overflow.y)


def test_restart_is_drawn_on_every_panel() -> None:
    page, plots = _page("restart-clean")
    assert plots.restarts and plots.restarts[0][0] == 800.0
    for fig in _figures(page):
        assert any(s["x0"] == 800.0 for s in fig["layout"]["shapes"])


def test_rank_heatmap(tmp_path) -> None:
    data, analysis = analyse_path(FIXTURES / "ranks" / "seed_64")
    panel = next(p for p in build(analysis, data).panels if p.key == "ranks")
    assert len(panel.heatmap.y) == 64 and len(panel.heatmap.z) == 64
    assert (
        max(v for row in panel.heatmap.z for v in row if v is not None) > 5
    )  # the bad rank stands out


def test_tokens_axis(tmp_path) -> None:
    rows = loss_rows("spike-long-tail")
    for r in rows:
        r["tokens"] = 2048 * (r["step"] + 1)
    data, analysis = analyse_path(write_jsonl(tmp_path / "tok" / "run.jsonl", rows))
    plots = build(analysis, data, x_axis="tokens")
    assert plots.x_title == "tokens"
    spike = next(m for p in plots.panels for m in p.markers if m.role == "spike")
    assert spike.x == [2048.0 * 901]


def test_tokens_axis_without_tokens_is_exit_2(cli, tmp_path) -> None:
    pytest.importorskip("plotly")
    result = cli(
        "report", run_fixture("spike-long-tail"), "-o", tmp_path / "r.html", "--x", "tokens"
    )
    assert (
        result.exit_code == 2 and "tokens" in result.stderr and not (tmp_path / "r.html").exists()
    )


# ---------------------------------------------------------------- the page


def test_strings_from_the_log_are_escaped(tmp_path) -> None:
    data, analysis = _evil_nan_run(tmp_path)
    page = html_report.render(analysis, build(analysis, data), js="/* stub */")
    assert "<img" not in page
    assert page.count("<script") == 3  # the data block, plotly, the boot script: nothing injected
    assert "</script><script>document" not in page
    figures = _figures(page)  # the JSON block still parses, and carries the names as escaped labels
    names = [t.get("name", "") for f in figures for t in f["data"]]
    assert any("&lt;img src=x" in n for n in names)


def test_page_is_self_contained() -> None:
    pytest.importorskip("plotly")
    data, analysis = analysed("spike-long-tail")
    page = html_report.render(analysis, build(analysis, data))
    assert not re.search(r"<(script|img|iframe)[^>]+src=", page)
    hrefs = re.findall(r"<link[^>]+href=[\"']([^\"']*)", page)
    assert hrefs and all(h.startswith("data:") for h in hrefs)
    assert "@import" not in page and "fonts.googleapis" not in page
    assert "Plotly.newPlot" in page and len(page) < 6_000_000


def test_plot_data_stays_small_on_a_long_run(tmp_path) -> None:
    rng = np.random.default_rng(1)
    steps = 60_000
    loss = 2.5 + 0.05 * rng.standard_normal(steps)
    loss[30_000] = 9.0
    loss[30_001] = 8.0
    grad = 0.5 + 0.02 * rng.standard_normal(steps)
    grad[29_999] = 40.0
    rows = [
        {"step": i, "loss": round(float(loss[i]), 4), "grad_norm": round(float(grad[i]), 4)}
        for i in range(steps)
    ]
    data, analysis = analyse_path(write_jsonl(tmp_path / "long" / "run.jsonl", rows))
    plots = build(analysis, data)
    page = html_report.render(analysis, plots, js="")
    assert plots.points_drawn < plots.points_in / 8
    assert len(page) < 700_000
    loss_panel = next(p for p in plots.panels if p.key == "loss")
    series = next(line for line in loss_panel.lines if line.role == "series")
    assert 30_000.0 in series.x and 30_001.0 in series.x  # the flagged points survived the cut


def test_missing_plotly_is_one_line_exit_2(cli, tmp_path, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a)
    )
    result = cli("report", run_fixture("spike-long-tail"), "-o", tmp_path / "r.html")
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "stab: error: stab report needs plotly: pip install 'stabilitycli[report]'"
    )


def test_cli_report_writes_the_page(cli, tmp_path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    result = cli("report", run_fixture("spike-long-tail"), "-o", out)
    assert result.exit_code == 0 and out.read_text().startswith("<!DOCTYPE html>")
    assert cli("report", tmp_path / "nope.jsonl", "-o", out).exit_code == 2


# ---------------------------------------------------------------- a real browser


# headless, offline and quiet: no network, no first-run or update work to wait for
HEADLESS_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _chromium(tmp_path, url: str, *extra: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium); browser checks skipped")
    args = [
        CHROMIUM,
        *HEADLESS_FLAGS,
        f"--user-data-dir={tmp_path / 'chrome-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=15000",
        *extra,
        url,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _browser_page(tmp_path, name: str) -> str:
    pytest.importorskip("plotly")
    data, analysis = analysed(name)
    path = tmp_path / f"{name}.html"
    path.write_text(html_report.render(analysis, build(analysis, data)), encoding="utf-8")
    return path.as_uri()


@pytest.mark.parametrize("name", ["spike-long-tail", "nan-fp16-overflow"])
def test_browser_renders_every_plot_without_console_errors(tmp_path, name) -> None:
    url = _browser_page(tmp_path, name)
    done = _chromium(tmp_path, url, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _console(done.stderr) == []
    dom = done.stdout
    rendered = int(re.search(r'data-plots-rendered="(\d+)"', dom).group(1))
    assert rendered >= 3
    assert dom.count('class="main-svg"') >= rendered  # plotly drew an SVG per plot
    assert dom.count('class="point"') >= 1  # markers (spike / NaN) are on the page
    assert "scatterlayer" in dom


def test_browser_does_not_run_injected_markup(tmp_path) -> None:
    pytest.importorskip("plotly")
    data, analysis = _evil_nan_run(tmp_path)
    path = tmp_path / "evil.html"
    path.write_text(html_report.render(analysis, build(analysis, data)), encoding="utf-8")
    done = _chromium(tmp_path, path.as_uri(), "--dump-dom")
    assert done.returncode == 0
    title = re.search(r"<title>(.*?)</title>", done.stdout, re.DOTALL).group(1)
    assert title.startswith(("stab report &#x2014;", "stab report —"))  # not replaced by "PWNED"
    assert not re.search(r"<img[^>]*onerror", done.stdout)
    assert _console(done.stderr) == []
    assert 'data-plots-rendered="' in done.stdout


def test_browser_screenshot(tmp_path) -> None:
    url = _browser_page(tmp_path, "spike-long-tail")
    shot = tmp_path / "report.png"
    done = _chromium(
        tmp_path, url, f"--screenshot={shot}", "--window-size=1280,1600", "--hide-scrollbars"
    )
    assert done.returncode == 0 and shot.stat().st_size > 50_000  # a blank page is a few kB
