"""Issue 16 item 1: every threshold a text states is the one in force, and every number the
headline states is the evidence number it names.

Every fixture of `fixtures/runs/` and `fixtures/torch-runs/` is analysed once with the defaults
and once with the thresholds of `OVERRIDES`, and rendered by every renderer (terminal at a
fixed width, JSON, GitHub, JUnit, Markdown, concise, post-mortem). `PHRASES` lists, per
overridden threshold, the phrases that state it. A phrase with the default value must not
appear once the threshold is overridden. So that the check cannot pass by matching nothing,
the same phrase must appear with the default value in the default outputs and with the
overridden value in the overridden ones.
"""

from __future__ import annotations

import functools
import html
import io
import json
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

OVERRIDES = {
    "spike_sigma": "4",
    "spike_window_steps": "150",
    "recovery_window_steps": "120",
    "recovery_sigma": "0.7",
    "grad_norm_spike_ratio": "25",
    "grad_norm_outlier_ratio": "12",
    "divergence_window_steps": "300",
    "weight_norm_ratio": "2.5",
    "noise_band_sigmas": "3.5",
    "min_loss_scale": "0.5",
    "duplicate_batch_window_steps": "90",
    "restart_spike_steps": "12",
    # the numbers the remedies advise
    "remedy_clip_percentile": "95",
    "remedy_clip_value": "50",
}


@dataclass(frozen=True)
class Phrase:
    """A phrase that states a threshold: `{v}` stands for the value, as the texts format it.

    `default` and `new` are the phrase with the default and the overridden value; the
    value is never followed by another digit or a decimal point (3 is not 3.5)."""

    threshold: str
    pattern: str

    def regex(self, value: str) -> re.Pattern[str]:
        return re.compile(self.pattern.replace("{v}", re.escape(value) + r"(?![\d.]\d)"))


PHRASES = [
    # the spike bar: "> ... + 3*sigma 0.0785", "above mu + 3 sigma", "pre-spike mu + 3 sigma"
    Phrase("spike_sigma", r"\+ {v}\*(?:sigma )?\d"),
    Phrase("spike_sigma", r"mu \+ {v} sigma"),
    Phrase("spike_window_steps", r"\b{v}-step window"),
    Phrase("spike_window_steps", r"trailing {v} steps"),
    Phrase("spike_window_steps", r"the {v}- and \d+-step windows"),
    Phrase("recovery_window_steps", r"did not recover within {v} steps"),
    Phrase("recovery_window_steps", r"not within {v} steps"),
    Phrase("recovery_window_steps", r"back to baseline within {v} steps"),
    Phrase("recovery_window_steps", r"loss {v} steps after the peak"),
    Phrase("recovery_sigma", r"baseline mean \+ {v}\*sigma"),
    Phrase("grad_norm_spike_ratio", r"needs >= {v}x"),
    Phrase("grad_norm_outlier_ratio", r"outlier\(s\) >= {v}x"),
    Phrase("grad_norm_outlier_ratio", r"\({v}x its pre-spike mean"),
    Phrase("divergence_window_steps", r"\b{v}-step windows?\b"),
    Phrase("divergence_window_steps", r"within {v} steps \("),
    Phrase("weight_norm_ratio", r"changed more than {v}x"),
    Phrase("noise_band_sigmas", r"= {v}·√2·σ"),
    Phrase("min_loss_scale", r"collapsed below {v} at step"),
    Phrase("min_loss_scale", r"with the scale below {v}"),
    Phrase("min_loss_scale", r"\(below {v} from step"),
    Phrase("duplicate_batch_window_steps", r"batch id seen within {v} steps"),
    Phrase("restart_spike_steps", r"no restart within the {v} steps before"),
    Phrase("remedy_clip_percentile", r"the {v}th percentile of the grad norm"),
    Phrase("remedy_clip_value", r"clip gradients by value \(\+-{v}\)"),
]


def _fixture_logs() -> list[Path]:
    logs = []
    for group in ("runs", "torch-runs"):
        for folder in sorted(p for p in (FIXTURES / group).iterdir() if p.is_dir()):
            logs.append(sorted(folder.glob("run.jsonl*"))[0])
    return logs


def _strings(value) -> list[str]:
    """Every string in a JSON document (the JSON escapes √ and σ; its strings do not)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _render_all(sets: dict[str, str]) -> dict[str, dict]:
    """fixture -> {"outputs": {renderer: text}, "analysis": Analysis, "thresholds": ...}."""
    from rich.console import Console

    from stabilitycli.commands._common import with_settings
    from stabilitycli.core.model import Severity
    from stabilitycli.core.settings import load_settings
    from stabilitycli.pipeline import run as pipeline
    from stabilitycli.postmortem.data import build
    from stabilitycli.report.formats import Format
    from stabilitycli.report.postmortem import render as render_postmortem

    runs = {}
    for log in _fixture_logs():
        thresholds, settings = load_settings(log, sets)
        data = pipeline.load_run(log)
        analysis = with_settings(pipeline.analyze(data, thresholds), settings.to_dict())
        outputs = {}
        for fmt in Format:
            rendered = fmt.render(analysis, Severity.ERROR, "verbose")
            if not isinstance(rendered, str):
                # wide enough that no table cell wraps a phrase across lines
                console = Console(width=400, record=True, file=io.StringIO())
                console.print(rendered)
                rendered = console.export_text()
            if fmt is Format.json:
                rendered = "\n".join(_strings(json.loads(rendered)))
            outputs[fmt.value] = html.unescape(rendered)
        outputs["postmortem"] = render_postmortem(
            build(analysis, data, thresholds), date="2026-01-01"
        )
        name = f"{log.parent.parent.name}/{log.parent.name}"
        runs[name] = {"outputs": outputs, "analysis": analysis, "thresholds": thresholds}
    return runs


@functools.cache
def _rendered(overridden: bool) -> dict[str, dict]:
    """Every fixture rendered once a process: test_numbers_traced and test_quantities take
    these fixtures too, and a module-scoped fixture would render them again in each module.
    The tests only read what it returns."""
    return _render_all(OVERRIDES if overridden else {})


@pytest.fixture(scope="module")
def default_runs() -> dict[str, dict]:
    return _rendered(overridden=False)


@pytest.fixture(scope="module")
def overridden_runs() -> dict[str, dict]:
    return _rendered(overridden=True)


def _value_text(name: str, value: str | None = None) -> str:
    from stabilitycli.core.config import Thresholds

    return f"{float(value if value is not None else getattr(Thresholds(), name)):g}"


def _hits(runs: dict[str, dict], regex: re.Pattern[str]) -> list[str]:
    out = []
    for name, run in runs.items():
        for renderer, text in run["outputs"].items():
            for m in regex.finditer(text):
                context = text[max(0, m.start() - 60) : m.end() + 30].replace("\n", " ")
                out.append(f"{name} [{renderer}]: ...{context}...")
    return out


def test_every_phrase_names_an_overridden_threshold() -> None:
    from stabilitycli.core.config import Thresholds

    names = {f.name for f in fields(Thresholds)}
    assert {p.threshold for p in PHRASES} <= set(OVERRIDES) <= names
    for name, value in OVERRIDES.items():
        assert _value_text(name) != _value_text(name, value), name


@pytest.mark.parametrize("phrase", PHRASES, ids=lambda p: f"{p.threshold}:{p.pattern}")
def test_phrase_states_the_threshold_in_force(phrase, default_runs, overridden_runs) -> None:
    default = _value_text(phrase.threshold)
    new = _value_text(phrase.threshold, OVERRIDES[phrase.threshold])
    # the phrase is really printed: with the default value under the defaults...
    assert _hits(default_runs, phrase.regex(default)), f"never printed: {phrase.pattern}"
    stale = _hits(overridden_runs, phrase.regex(default))
    assert not stale, (
        f"{phrase.threshold} = {new} is in force, yet {len(stale)} output(s) state the default "
        f"{default}:\n" + "\n".join(stale[:10])
    )
    # ...and with the value in force once overridden
    assert _hits(overridden_runs, phrase.regex(new)), (
        f"{phrase.threshold} = {new} is never stated as {phrase.pattern}"
    )


# ---------------------------------------------------------------- headline numbers


def _same(printed: str, value: float) -> bool:
    """Whether a number printed with `printed`'s precision is `value` (as %.4g or %.3g)."""
    number = float(printed)
    if math.isclose(number, value, rel_tol=1e-12):
        return True
    return any(float(f"{value:.{digits}g}") == number for digits in (3, 4))


SPIKE_LEVELS = re.compile(
    r"(?i:l)oss spike at step (?P<onset>\d+) \(baseline mean (?P<mu>\S+) over steps "
    r"(?P<first>\d+)-(?P<last>\d+) -> peak (?P<peak>\S+) at step (?P<peak_step>\d+)[;)]"
)
NOT_RECOVERED = re.compile(r"did not recover within (?P<steps>\d+) steps")
RECOVERED = re.compile(r"recovered in (?P<steps>\d+) steps")
Q21 = re.compile(
    r"first at step (?P<onset>\d+): peak (?P<peak>\S+) at step (?P<peak_step>\d+) > baseline "
    r"mean (?P<mu>\S+) over steps (?P<first>\d+)-(?P<last>\d+) \+ (?P<k>\S+)\*sigma "
    r"(?P<sigma>\S+) \(z = (?P<z>\S+)\)"
)
Q22 = re.compile(r"back to <= (?P<level>\S+) \(baseline mean \+ (?P<k>\S+)\*sigma\)")
NAN = re.compile(
    r"(?i:l)oss went non-finite at step (?P<first>\d+) \((?P<count>\d+) non-finite points\)"
)


def _spike_checks(run: dict, name: str) -> int:
    """Check the spike numbers of the headline and of Q2.1; return how many were checked."""
    analysis = run["analysis"]
    verdict = analysis.verdict
    spikes = {f.step: f.evidence for f in analysis.findings if f.code == "spike"}
    checked = 0
    m = SPIKE_LEVELS.search(verdict.summary)
    if m:
        ev = spikes[int(m["onset"])]
        assert _same(m["mu"], ev["mu"]), (name, m["mu"], ev["mu"])
        assert _same(m["peak"], ev["peak"]), (name, m["peak"], ev["peak"])
        assert int(m["peak_step"]) == ev["peak_step"], name
        assert (int(m["first"]), int(m["last"])) == (
            ev["baseline_first_step"],
            ev["baseline_last_step"],
        ), name
        assert ev["baseline_last_step"] < ev["onset_step"], name
        if verdict.code == "spike-persistent":
            assert not ev["recovered"], name
            steps = NOT_RECOVERED.search(verdict.summary)
            assert steps and int(steps["steps"]) == ev["recovery_horizon_steps"], name
        else:
            steps = RECOVERED.search(verdict.summary)
            assert steps and int(steps["steps"]) == ev["recovery_steps"], name
        checked += 1
    q22 = next((p.evidence for p in verdict.path if p.question == "Q2.2"), "")
    m = Q22.search(q22)
    if m:
        # the spike Q2.2 speaks of: the first persistent one, else the first recovered one
        ordered = sorted(spikes.values(), key=lambda ev: ev["onset_step"])
        lead = next((ev for ev in ordered if not ev["recovered"]), None) or ordered[0]
        assert _same(m["level"], lead["recovery_level"]), (name, m["level"], lead)
        assert float(m["k"]) == run["thresholds"].recovery_sigma, name
        assert math.isclose(
            lead["mu"] + float(m["k"]) * lead["sigma"], lead["recovery_level"], rel_tol=1e-9
        ), name
        checked += 1
    q21 = next((p.evidence for p in verdict.path if p.question == "Q2.1"), "")
    m = Q21.search(q21)
    if m:
        ev = spikes.get(int(m["onset"]))
        if ev is None:  # the first spike of a recurring group has no finding of its own
            return checked
        for key in ("mu", "peak", "sigma", "z"):
            assert _same(m[key], ev[key]) or key == "z", (name, key, m[key], ev[key])
        assert float(m["z"]) == round(ev["z"], 1), name
        assert int(m["peak_step"]) == ev["peak_step"], name
        assert float(m["k"]) == run["thresholds"].spike_sigma, name
        assert math.isclose(
            ev["mu"] + float(m["k"]) * ev["sigma"], ev["threshold"], rel_tol=1e-9
        ), name
        checked += 1
    return checked


def _check_headlines(runs: dict[str, dict]) -> None:
    checked = 0
    for name, run in runs.items():
        verdict = run["analysis"].verdict
        checked += _spike_checks(run, name)
        m = NAN.search(verdict.summary)
        if m:
            ev = next(f.evidence for f in run["analysis"].findings if f.code == "nan")
            assert (int(m["first"]), int(m["count"])) == (ev["first_step"], ev["count"]), name
            checked += 1
        if verdict.code.startswith("spike-"):
            assert SPIKE_LEVELS.search(verdict.summary) or "one-point loss spikes" in (
                verdict.summary
            ), (name, verdict.summary)
    # the fixtures hold spike and NaN verdicts: the checks above must have run
    assert checked >= 10, checked


def test_headline_numbers_are_the_evidence_they_name(default_runs) -> None:
    _check_headlines(default_runs)


def test_headline_numbers_with_thresholds_overridden(overridden_runs) -> None:
    _check_headlines(overridden_runs)


def test_explain_states_the_thresholds_in_force_here(cli, tmp_path, monkeypatch) -> None:
    (tmp_path / "stab.toml").write_text("spike_sigma = 4\nrecovery_window_steps = 120\n")
    monkeypatch.chdir(tmp_path)
    assert "mu + 4 sigma of the trailing 100 steps" in cli("explain", "Q2.1").stdout
    assert "within 120 steps?" in cli("explain", "Q2.2").stdout
    verdict = cli("explain", "spike-persistent").stdout
    assert "within 120 steps" in verdict and "within 50 steps" not in verdict


# words a user cannot act on: the spec's spike types by number, section signs, the design
# documents' seed numbers, private names from the source
JARGON = re.compile(
    r"\btype [123]\b|§|strictly monotone|\bseed \d{3}\b|(?<![\w/.-])_[a-z]+_[a-z_]+\b"
)


def test_no_output_speaks_jargon(default_runs) -> None:
    from stabilitycli import analyze

    assert not _hits(default_runs, JARGON)
    # a spike of the mean that one rank explains is told in its own words too
    ranked = analyze(FIXTURES / "ranks" / "seed_64")
    texts = [f.message for f in ranked.findings] + [ranked.verdict.summary]
    assert not [t for t in texts if JARGON.search(t)]
