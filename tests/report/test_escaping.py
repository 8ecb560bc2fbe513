"""Issue 12 item 5: every output escaped for its medium, whatever the input's names hold.

Real runs are written here whose folder names, metric keys, MLflow experiment and run
names, params and tags carry a newline followed by a workflow command, ANSI and OSC 8
escapes, rich markup, HTML, Markdown syntax, a `%0A` and a bidi override. Each goes
through every renderer by the CLI (`analyze` in every `--format`, one run and many,
`ranks`, `compare`, `postmortem`, `report`) and the text is checked for its medium:

- no control character of the input survives (ESC, BEL, CR, U+202E...), only stab's
  own newlines;
- no line starts with `::` (GitHub Actions runs such a line as a workflow command,
  whatever the format), except the GitHub format's own commands, which must be well
  formed with the input escaped inside them;
- no MarkupError, no traceback, the exit status of a run with a spike;
- Markdown rendered by a CommonMark parser has no image, link or HTML from the input;
- JUnit parses with ElementTree.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app

OSC8 = "\x1b]8;;http://x\x07link\x1b]8;;\x07"
EVIL = (
    "\n::error::pwned "
    f"{OSC8} \x1b[31mred [bold red]x[/] [/] [link=http://x]y[/link] :smile: "
    "<img src=x onerror=alert(1)> [a](http://x) ![i](http://x/i.png) a|b `tick` ``two`` "
    "*em* %0A %25 \r\u2028\u202eevil, done"
)
# what no text output may hold: the input's controls (stab's own newlines aside)
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069]")
# JSON is left out: its escaping is JSON's own, and test_json_is_exact checks it kept the input
FORMATS = ("terminal", "github", "junit", "markdown", "concise")
# a workflow command as stab writes it: properties without raw ':' or ','
GITHUB_LINE = re.compile(r"^::(error|warning|notice) file=[^:,]*(,line=\d+)?,title=[^:,]*::")


def _fs(text: str) -> str:
    """The text as one file name: '/' (and NUL) cannot be part of one."""
    return text.replace("/", "\u2215")


def _losses(n: int = 400, spike_at: int = 200, seed: float = 0.0) -> list[float]:
    out = []
    for s in range(n):
        loss = 3.0 * math.exp(-s / 300) + 0.01 * math.sin(7.3 * s + seed)
        out.append(loss * (4.0 if spike_at <= s < spike_at + 5 else 1.0))
    return out


LOSS_KEY = "train loss" + EVIL


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    out: dict[str, Path] = {}

    # a JSONL log in a folder whose name is the run name
    for name, seed in (("jsonl", 0.0), ("jsonl2", 1.0)):
        folder = root / name / _fs("run" + EVIL)
        folder.mkdir(parents=True)
        rows = [
            {"step": s, LOSS_KEY: v, "grad_norm": 1.0 + 0.01 * math.cos(s), "x" + EVIL: 1.0}
            for s, v in enumerate(_losses(seed=seed))
        ]
        path = folder / "metrics.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out[name] = path

    # an MLflow file store: experiment and run names, params and tags from the input;
    # a metric file cut off mid-write makes a warning that quotes its path
    store = root / _fs("store" + EVIL) / "mlruns"
    exp = store / "1"
    run = exp / "0123456789abcdef0123456789abcdef"
    for sub in ("metrics", "params", "tags"):
        (run / sub).mkdir(parents=True)
    (exp / "meta.yaml").write_text(
        f"experiment_id: '1'\nlifecycle_stage: active\nname: {json.dumps('exp' + EVIL)}\n"
    )
    (run / "meta.yaml").write_text(
        "experiment_id: '1'\nlifecycle_stage: active\n"
        f"run_id: 0123456789abcdef0123456789abcdef\nrun_name: {json.dumps('mlrun' + EVIL)}\n"
    )
    lines = [f"{1_700_000_000_000 + s} {v!r} {s}\n" for s, v in enumerate(_losses())]
    (run / "metrics" / "loss").write_text("".join(lines))
    (run / "metrics" / _fs("grad_norm" + EVIL)).write_text("1700000000000 1.0 0\n1700000000001 1")
    (run / "params" / "mixed_precision").write_text("<img src=x onerror=alert(1)>" + EVIL + " bf16")
    (run / "params" / _fs("p" + EVIL)).write_text(EVIL)
    (run / "tags" / "mlflow.runName").write_text("mlrun" + EVIL)
    (run / "tags" / _fs("t" + EVIL)).write_text(EVIL)
    out["mlflow"] = store

    # Lightning's CSVLogger: the dtype comes from hparams.yaml
    version = root / "lightning" / _fs("pl" + EVIL) / "version_0"
    version.mkdir(parents=True)
    csv = ["step,epoch,train_loss"] + [f"{s},0,{v!r}" for s, v in enumerate(_losses())]
    (version / "metrics.csv").write_text("\n".join(csv) + "\n")
    (version / "hparams.yaml").write_text(
        "precision: <img/src=x/onerror=alert(1)>`x`|[/]bf16-mixed\nlr: 0.001\n"
    )
    out["lightning"] = version.parent

    # per-rank rows: rank 3 sits far above its cohort from step 200
    folder = root / "ranks" / _fs("ranks" + EVIL)
    folder.mkdir(parents=True)
    rows = []
    for s, v in enumerate(_losses(spike_at=10_000)):
        for rank in range(8):
            level = v + 0.002 * rank + (3.0 if rank == 3 and s >= 200 else 0.0)
            rows.append({"step": s, "rank": rank, LOSS_KEY: level})
    out["ranks"] = folder / "metrics.jsonl"
    out["ranks"].write_text("".join(json.dumps(r) + "\n" for r in rows))

    # a run that cannot be read, named like the others
    bad = root / "bad" / _fs("bad" + EVIL)
    bad.mkdir(parents=True)
    (bad / "metrics.jsonl").write_text("not json at all\n")
    out["bad"] = bad / "metrics.jsonl"
    return out


def _args(runs: dict[str, Path], name: str) -> list[str]:
    path = str(runs[name])
    return [path, "--metric", f"loss={LOSS_KEY}"] if name.startswith("jsonl") else [path]


def _invoke(args: list[str], env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, args, env={"COLUMNS": "100", **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _check_lines(text: str, fmt: str) -> None:
    """No raw control of the input; no line that GitHub would run, but stab's own."""
    bad = RAW.findall(text)
    assert not bad, f"raw control characters {sorted(set(bad))!r} in {fmt} output"
    assert "Traceback" not in text and "MarkupError" not in text
    for line in text.split("\n"):
        if not line.lstrip().startswith("::"):
            continue
        assert fmt == "github", f"{fmt} output has a line GitHub would run: {line!r}"
        assert GITHUB_LINE.match(line), f"malformed workflow command: {line!r}"


def _check_markdown(text: str) -> None:
    """Rendered by CommonMark (raw HTML passed through, as GitHub's sanitiser sees it):
    the only HTML is stab's own `<details>`, and the input made no link or image."""
    from markdown_it import MarkdownIt

    page = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    tags = set(re.findall(r"<(/?[a-z][a-z0-9]*)", page))
    allowed = {"h1", "h2", "h3", "p", "code", "strong", "em", "ul", "li", "ol", "pre"}
    allowed |= {"table", "thead", "tbody", "tr", "th", "td", "details", "summary"}
    assert tags <= allowed | {"/" + t for t in allowed}, tags - allowed
    assert "<img" not in page and "<a " not in page and "<em>em</em>" not in page
    assert "<img" not in re.sub(r"`+[^`]*`+", "", text), "raw <img outside code"


def _check_junit(text: str) -> None:
    root = ET.fromstring(text.encode())
    names = [s.get("name", "") for s in root.iter("testsuite")]
    assert names and all("\x1b" not in n and "\n" not in n for n in names)


def _check(text: str, fmt: str) -> None:
    _check_lines(text, fmt)
    if fmt == "markdown":
        _check_markdown(text)
    if fmt == "junit":
        _check_junit(text)
    if fmt == "json":
        json.loads(text)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["jsonl", "mlflow", "lightning"])
def test_analyze_every_format(runs, name: str, fmt: str) -> None:
    result = _invoke(["analyze", *_args(runs, name), "--format", fmt, "--verbose"])
    assert result.exit_code in (0, 1), result.output
    _check(result.stdout, fmt)
    if fmt == "terminal":
        # markup from the input is text, not styling or a link
        assert "[bold red]x[/]" in result.stdout or "[bold red]x[\u2215]" in result.stdout


@pytest.mark.parametrize("fmt", FORMATS)
def test_analyze_many_every_format(runs, fmt: str) -> None:
    paths = [str(runs[n]) for n in ("mlflow", "lightning", "bad")]
    result = _invoke(["analyze", *paths, "--format", fmt, "--jobs", "1", "--quiet"])
    # 2 when one run is unreadable, where the exit status contract says so
    assert result.exit_code in (0, 1, 2), result.output
    _check(result.stdout, fmt)


def test_terminal_in_colour_writes_only_stabs_own_escapes(runs) -> None:
    """On a real terminal rich writes its own SGR codes; the input's never get through."""
    result = _invoke(
        ["analyze", *_args(runs, "mlflow"), "--verbose"], env={"FORCE_COLOR": "1", "TERM": "xterm"}
    )
    assert result.exit_code in (0, 1), result.output
    out = result.stdout
    assert "\x1b[" in out  # colour is on: this is the terminal case
    assert "\x07" not in out and "\x1b]" not in out and "\x1b[31mred" not in out
    assert "\u202e" not in out and "\r" not in out and "\u2028" not in out


def test_terminal_wrapping_never_starts_a_line_with_a_command(runs) -> None:
    """A narrow terminal wraps a note that quotes the input: a wrapped line that would
    start with `::` is escaped too."""
    result = _invoke(["analyze", *_args(runs, "mlflow"), "--verbose"], env={"COLUMNS": "37"})
    assert result.exit_code in (0, 1), result.output
    _check_lines(result.stdout, "terminal")


def test_ranks(runs) -> None:
    # the metric's own name, as `--metric NAME=LOGKEY` gives it, is what ranks prints
    metric = "my loss" + EVIL.replace("=", "~") + "=" + LOSS_KEY
    for fmt in ("terminal", "json"):
        result = _invoke(["ranks", str(runs["ranks"]), "--metric", metric, "-f", fmt])
        assert result.exit_code == 1, result.output  # rank 3 is a level outlier
        _check(result.stdout, fmt)


def test_compare(runs) -> None:
    args = [*_args(runs, "jsonl"), *_args(runs, "jsonl2")[:1]]
    for fmt in ("terminal", "json"):
        result = _invoke(
            ["compare", *args, "--expect", "loss@300<9", "--format", fmt, "--metric", "loss"]
        )
        assert result.exit_code in (0, 1), result.output
        _check(result.stdout, fmt)


@pytest.mark.parametrize("name", ["jsonl", "mlflow", "lightning"])
def test_postmortem(runs, name: str, tmp_path: Path) -> None:
    result = _invoke(["postmortem", *_args(runs, name), "-o", "-"])
    assert result.exit_code == 0, result.output
    _check(result.stdout, "markdown")
    written = tmp_path / "pm.md"
    result = _invoke(["postmortem", *_args(runs, name), "-o", str(written)])
    assert result.exit_code == 0, result.output
    _check(written.read_text(encoding="utf-8"), "markdown")
    if name in ("lightning", "mlflow"):
        # the dtype was read from the hostile setting, whose raw value is quoted as text
        assert "dtype regime: bf16" in result.stdout or "bf16" in written.read_text()


def test_html_report(runs, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    for name in ("jsonl", "mlflow"):
        page = tmp_path / f"{name}.html"
        result = _invoke(["report", *_args(runs, name), "-o", str(page)])
        assert result.exit_code == 0, result.output
        text = page.read_text(encoding="utf-8")
        body = text.split('<script type="application/json"', 1)[0]
        _check_lines(body, "html")
        assert "<img" not in body


def test_json_is_exact(runs) -> None:
    """The JSON document is the input, exactly: JSON's own escaping is the escaping.

    A guard that the escaping of the other media never reaches the JSON (it held before)."""
    result = _invoke(["analyze", *_args(runs, "mlflow"), "--format", "json"])
    _check_lines(result.stdout, "json")
    doc = json.loads(result.stdout)
    assert doc["source"]["run"].endswith("(mlrun" + EVIL + ")")
    assert doc["source"]["path"] == str(runs["mlflow"])
    assert "'mixed_precision'='<img src=x onerror=alert(1)>" in doc["source"]["dtype_origin"]
    result = _invoke(["analyze", *_args(runs, "jsonl"), "--format", "json"])
    assert json.loads(result.stdout)["source"]["metrics"]["loss"] == LOSS_KEY


# ---------------------------------------------------------------- the functions themselves


def test_terminal_escape_shows_controls_and_markup_is_text() -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    from stabilitycli.report import escape
    from stabilitycli.report.terminal import build
    from tests.report.test_ci_formats import _analysis

    assert escape.visible("a\nb\rc\td\x1be\x07\x9b\u202e\u2028\ud800") == (
        "a\\nb\\rc\\td\\x1be\\x07\\x9b\\u202e\\u2028\\ud800"
    )
    markup = "[bold red]x[/] [/] [link=http://x]y[/link] :smile:"
    console = Console(width=200, record=True, color_system=None)
    console.print(Panel(Text("body"), title=Text(escape.terminal(markup))))
    # a console that does parse markup (rich's default): the renderer hands it only Text
    console.print(build(_analysis(path="runs/a.jsonl", run=markup + "\n::error::x")))
    out = console.export_text()
    assert out.count(markup) == 2 and "\\n::error::x" in out


def test_a_printable_string_holds_no_control_visible_shows() -> None:
    """`visible` returns a printable string as it is, without its pattern (#40): no
    character the pattern shows may be one Python prints."""
    from stabilitycli.report import escape

    printable = "".join(chr(c) for c in range(0x110000) if chr(c).isprintable())
    assert re.search(escape._CONTROLS, printable) is None
    assert escape.visible("loss ← 'grad/norm' – 1.2×") == "loss ← 'grad/norm' – 1.2×"
    assert escape.visible("a\u00a0b\u2066c") == "a\u00a0b\\u2066c"


def test_github_escape() -> None:
    from stabilitycli.report import escape

    assert escape.github_data("50% a\r\nb: c, d %0A \x1b") == "50%25 a%0D%0Ab: c, d %250A \\x1b"
    assert escape.github_property("a:b,c\n%") == "a%3Ab%2Cc%0A%25"


def test_markdown_code_span_cannot_be_closed() -> None:
    from markdown_it import MarkdownIt

    from stabilitycli.report import escape

    for body in ("a`b", "``x``", "`", "a ``` <img src=x> b"):
        html = MarkdownIt("commonmark").render(escape.markdown_code(body))
        assert "<img" not in html and html.count("<code>") == 1, (body, html)


def test_a_wrapped_terminal_line_never_starts_with_a_command() -> None:
    """rich wraps a note at the console width; where the wrap puts input text holding `::`
    first on a line, that line's first colon is escaped, at every width."""
    from rich.console import Console

    from stabilitycli.report.terminal import build
    from tests.report.test_ci_formats import _analysis

    analysis = _analysis(path="runs/a.jsonl", run="r")
    analysis.source.warnings.append("key 'x' word word word ::error::pwned and more words")
    escaped = 0
    for width in range(30, 90):
        console = Console(width=width, record=True, color_system=None)
        console.print(build(analysis))
        lines = console.export_text().split("\n")
        assert not [line for line in lines if line.lstrip().startswith("::")], width
        escaped += sum(line.lstrip().startswith("\\::error") for line in lines)
    assert escaped  # some width did wrap right before the `::`
