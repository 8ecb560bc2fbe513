"""`stab report` tells the verdict's story: the divergence marked, every cited series drawn,
axes that read (a constant LR where it is, log ticks labelled as numbers)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from stabilitycli.report import html as html_report
from stabilitycli.report.plotdata import build
from tests.report.helpers import analyse_path, analysed, write_jsonl

SI = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _figures(page: str) -> dict[str, dict]:
    """Figures by panel key, with shared x arrays put back in each trace."""
    raw = re.search(r'id="stab-data">(.*?)</script>', page, re.DOTALL).group(1)
    doc = json.loads(raw)
    keys = re.findall(r'<div class="plot" id="plot-\d+" data-panel="([^"]*)"', page)
    for fig in doc["figures"]:
        for trace in fig["data"]:
            if "xs" in trace:
                trace["x"] = doc["xs"][trace.pop("xs")]
    return dict(zip(keys, doc["figures"], strict=True))


def _page_of(data, analysis) -> str:
    return html_report.render(analysis, build(analysis, data), js="/* plotly stub */")


def _cited(analysis) -> set[str]:
    """Series the findings name, read here from the evidence as the JSON output carries it."""
    names = set()
    for f in analysis.findings:
        ev = f.evidence
        names |= {f.metric, ev.get("series"), (ev.get("earliest_nonfinite") or {}).get("series")}
        names |= {c.get("series") for c in ev.get("causes") or []}
    return {n for n in names if n}


def _rows(lr, steps: int = 1500) -> list[dict]:
    rng = np.random.default_rng(3)
    loss = 2 + 3 * np.exp(-np.arange(steps) / 500) + 0.02 * rng.standard_normal(steps)
    grad = np.abs(0.5 + 0.1 * rng.standard_normal(steps))
    lr = np.broadcast_to(np.asarray(lr, dtype=float), (steps,))
    return [
        {"step": i, "loss": float(loss[i]), "lr": float(lr[i]), "grad_norm": float(grad[i])}
        for i in range(steps)
    ]


def test_divergence_onset_and_window_are_marked_on_the_loss() -> None:
    data, analysis = analysed("divergence-weight-norm")
    div = next(f for f in analysis.findings if f.code == "divergence")
    onset, a, b = (div.evidence[k] for k in ("start_step", "window_start_step", "end_step"))
    loss = _figures(_page_of(data, analysis))["loss"]
    lines = [s for s in loss["layout"]["shapes"] if s["type"] == "line"]
    assert any(s["x0"] == onset for s in lines)
    notes = [n["text"] for n in loss["layout"]["annotations"]]
    assert f"divergence onset: step {onset}" in notes
    rects = {
        (s["x0"], s["x1"]): s["label"]["text"]
        for s in loss["layout"]["shapes"]
        if s["type"] == "rect"
    }
    assert rects[(a, b)].startswith(f"trend window: steps {a}-{b}")
    assert (onset, div.end_step) in rects
    marker = next(t for t in loss["data"] if t.get("name") == "divergence onset")
    assert marker["x"] == [onset] and marker["y"][0] is not None


@pytest.mark.parametrize(
    "name",
    ["divergence-weight-norm", "divergence-grad-norm", "nan-fp32-origin", "loss-scale-collapsed"],
)
def test_every_series_the_findings_cite_is_plotted(name) -> None:
    data, analysis = analysed(name)
    figures = _figures(_page_of(data, analysis))
    drawn = {t.get("name", "").split("  (")[0] for f in figures.values() for t in f["data"]}
    logged = set(data.metric_columns) | {"loss", "grad_norm", "lr", "loss_scale"}
    cited = {n for n in _cited(analysis) if n in logged}
    assert cited <= drawn, cited - drawn
    if name == "divergence-weight-norm":
        assert "param_norm" in drawn  # the norm the verdict blames


def test_a_constant_lr_is_drawn_where_it_is(tmp_path) -> None:
    data, analysis = analyse_path(write_jsonl(tmp_path / "c" / "run.jsonl", _rows(0.001)))
    axis = _figures(_page_of(data, analysis))["lr"]["layout"]["yaxis"]
    assert axis.get("type") == "linear"
    low, high = axis["range"]
    assert low == 0 and 0.001 < high <= 0.0025  # 0.001 in the upper half, not read as 0


def test_lr_is_linear_unless_it_spans_decades(tmp_path) -> None:
    steps = 1500
    cosine = 3e-4 * 0.5 * (1 + np.cos(np.pi * np.arange(steps) / steps))  # decays to ~0
    decades = 10.0 ** -(1 + np.arange(steps) // 375)  # 1e-1, 1e-2, 1e-3, 1e-4
    axes = {}
    for label, lr in (("cosine", cosine), ("decades", decades)):
        path = write_jsonl(tmp_path / label / "run.jsonl", _rows(lr, steps))
        axes[label] = _figures(_page_of(*analyse_path(path)))["lr"]["layout"]["yaxis"]
    assert axes["cosine"].get("type") == "linear" and axes["cosine"]["range"][0] == 0
    assert axes["decades"]["type"] == "log"
    assert axes["decades"]["ticktext"] == ["1e-4", "0.001", "0.01", "0.1"]


def _read(label: str) -> float:
    return float(label[:-1]) * SI[label[-1]] if label[-1] in SI else float(label)


@pytest.mark.parametrize("name", ["spike-long-tail", "fp16-healthy-scaler", "nan-fp32-origin"])
def test_log_axis_ticks_read_as_the_numbers_they_mark(name) -> None:
    data, analysis = analysed(name)
    logs = [
        f
        for f in _figures(_page_of(data, analysis)).values()
        if f["layout"]["yaxis"].get("type") == "log"
    ]
    assert logs
    for fig in logs:
        axis = fig["layout"]["yaxis"]
        assert axis["tickmode"] == "array" and len(axis["tickvals"]) >= 2
        for value, label in zip(axis["tickvals"], axis["ticktext"], strict=True):
            # each label is the whole value ("0.5", "20k", "1e-5"), not a bare minor digit
            assert _read(label) == pytest.approx(value, rel=1e-9), (label, value)
        mantissas = {round(v / 10 ** np.floor(np.log10(v)), 6) for v in axis["tickvals"]}
        assert mantissas <= {float(m) for m in range(1, 10)}


@pytest.mark.parametrize("name", ["spike-long-tail", "spike-persistent"])
def test_the_band_is_frozen_across_a_spike_as_the_rule_freezes_it(name) -> None:
    data, analysis = analysed(name)
    spike = next(f for f in analysis.findings if f.code == "spike").evidence
    loss = _figures(_page_of(data, analysis))["loss"]
    band = next(t for t in loss["data"] if t.get("name", "").startswith("trailing mu +"))
    mean = next(t for t in loss["data"] if t.get("name") == "trailing mean mu")
    back = spike["recovery_step"]
    # the event lasts while the loss is above the frozen threshold, and until it is back
    last = max(spike["end_step"], back - 1 if back is not None else spike["onset_step"] + 100)
    inside = [i for i, x in enumerate(band["x"]) if spike["onset_step"] <= x <= last]
    assert inside
    # the threshold the rule compared with, not the window the spike's own points inflate
    assert {band["y"][i] for i in inside} == {round(spike["threshold"], 4)}
    assert {mean["y"][i] for i in inside} == {round(spike["mu"], 4)}
    after = band["x"].index(inside[-1]) + 1
    if after < len(band["x"]):
        assert band["y"][after] != band["y"][inside[-1]]  # trailing again once it is over


@pytest.mark.parametrize("name", ["restart-clean", "spike-after-restart"])
def test_the_abandoned_trajectory_of_a_resume_is_drawn_as_a_branch(name) -> None:
    data, analysis = analysed(name)
    loss = _figures(_page_of(data, analysis))["loss"]
    branch = next(t for t in loss["data"] if "abandoned" in t.get("name", ""))
    rewritten = data.abandoned.sort("step")
    assert branch["x"] == rewritten["step"].to_list()  # every rewritten step (short log: no cut)
    first = rewritten["loss"][0]
    assert branch["y"][0] == pytest.approx(first, rel=1e-4)
    assert branch["line"]["dash"] == "dash"
