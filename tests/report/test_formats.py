"""Every member of `report.formats.Format` has renderers, and they render a real Analysis."""

from __future__ import annotations

import io
import json
import pickle
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from stabilitycli.core.model import Severity
from stabilitycli.pipeline.batch import BatchSettings, RunResult, analyze_one
from stabilitycli.report.formats import _RENDERERS, Format
from tests.conftest import run_fixture
from tests.report.helpers import analysed


def _text(rendered) -> str:
    """What a user sees: text as it is, a rich renderable printed on a plain console."""
    if isinstance(rendered, str):
        return rendered
    out = io.StringIO()
    # as wide as the CLI makes a piped console (the widest line): at a fixed 120 columns a
    # long temporary path was folded over two lines, and the test depended on its length
    width = Console(width=10_000).measure(rendered).maximum
    Console(file=out, width=max(80, width), color_system=None).print(rendered)
    return out.getvalue()


def test_every_format_has_renderers() -> None:
    assert set(_RENDERERS) == set(Format)


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_renders_a_real_analysis(fmt: Format) -> None:
    _, analysis = analysed("spike-long-tail")
    text = _text(fmt.render(analysis, Severity.WARNING))
    assert text.strip()
    assert text.endswith("\n")  # a shell prompt after the output starts on its own line
    if fmt is Format.json:
        assert json.loads(text)["verdict"]["code"] == analysis.verdict.code
    elif fmt is Format.junit:
        assert ET.fromstring(text).tag == "testsuites"
    else:
        assert analysis.verdict.code in text


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_renders_many_runs(fmt: Format, tmp_path) -> None:
    fragment = fmt.fragment_renderer(Severity.ERROR)
    if fragment is not None:
        pickle.dumps(fragment)  # it travels to the batch workers
    settings = BatchSettings(render_fragment=fragment)
    results = [
        analyze_one(str(run_fixture("spike-long-tail")), settings),
        analyze_one(str(run_fixture("plateau")), settings),
        analyze_one(str(tmp_path / "missing.jsonl"), settings),
    ]
    assert [r.ok for r in results] == [True, True, False]
    assert all(isinstance(r, RunResult) for r in results)
    text = _text(fmt.render_many(results))
    assert text.endswith("\n")
    if fmt is Format.json:
        docs = [json.loads(line) for line in text.splitlines()]
        assert [d["schema"] for d in docs] == ["stab.analysis/1"] * 2 + ["stab.error/1"]
    elif fmt is Format.junit:
        assert len(ET.fromstring(text).findall("testsuite")) == 3
    else:
        assert "missing.jsonl" in text
