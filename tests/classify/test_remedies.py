"""Issue 16 item 3: remedies by cause, one list for every output, and `stab explain` for all.

A run's remedies come from one table keyed by verdict and cause: the action that addresses
that cause, none that the log shows already in place, no two alike, every number the
threshold in force. The terminal, JSON, Markdown, JUnit, GitHub and post-mortem outputs show
that one list.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze
from stabilitycli.core.config import Thresholds
from stabilitycli.core.settings import load_settings
from stabilitycli.pipeline.run import load_run

STEPS = np.arange(1200)


def _collapsing_scale_run() -> pl.DataFrame:
    """An fp16 run whose loss scaler halves on three steps of every four from step 400 (one
    doubling between): 166 halvings in all, down to ~1e-29, while the loss stays healthy."""
    rng = np.random.default_rng(3)
    loss = 2.0 + 3.0 / np.sqrt(STEPS + 10) + 0.01 * rng.standard_normal(STEPS.size)
    scale = np.full(STEPS.size, 65536.0)
    halvings = 0
    for i in range(400, STEPS.size):
        if halvings < 166 and i % 4:
            scale[i:] = scale[i - 1] / 2
            halvings += 1
        elif halvings < 166:
            scale[i:] = scale[i - 1] * 2
    return pl.DataFrame({"step": STEPS, "loss": loss, "loss_scale": scale})


def _lr_jump_level_shift_run() -> pl.DataFrame:
    """The LR jumps 10x at step 800 and the loss moves up by 0.8 there and stays."""
    rng = np.random.default_rng(5)
    lr = np.where(STEPS < 800, 1e-4, 1e-3)
    loss = 2.0 + 0.01 * rng.standard_normal(STEPS.size) + np.where(STEPS >= 800, 0.8, 0.0)
    return pl.DataFrame({"step": STEPS, "loss": loss, "lr": lr})


def _every_output(frame: pl.DataFrame, thresholds: Thresholds) -> dict[str, list[str]]:
    """The remedy bullets each output shows for one run, read back from the rendered text."""
    from rich.console import Console

    from stabilitycli.postmortem.data import build
    from stabilitycli.report import github, json_report, junit, markdown, terminal
    from stabilitycli.report import postmortem as postmortem_report

    analysis = analyze(frame, thresholds)
    out: dict[str, list[str]] = {"verdict": list(analysis.verdict.remediation)}
    out["json"] = json.loads(json_report.render(analysis))["verdict"]["remediation"]
    suite = ET.fromstring(junit.render(analysis))
    failure = next(f for f in suite.iter("failure") if f.get("type") == analysis.verdict.code)
    out["junit"] = [
        line.removeprefix("remedy: ")
        for line in (failure.text or "").splitlines()
        if line.startswith("remedy: ")
    ]
    md = markdown.render(analysis)
    out["markdown"] = _bullets_after(md, "**Remedy**")
    first = github.render(analysis).splitlines()[0]
    message = first.split("::", 2)[2].replace("%0A", "\n").replace("%25", "%")
    out["github"] = [line[2:] for line in message.split("Remedy:", 1)[-1].splitlines() if line]
    console = Console(file=io.StringIO(), width=400, color_system=None)
    terminal.render(analysis, console)
    text = console.file.getvalue()
    out["terminal"] = [
        line.strip().removeprefix("• ").strip()
        for line in text.split("Remedy:", 1)[-1].splitlines()
        if line.strip().startswith("•")
    ]
    pm = build(analysis, load_run(frame), thresholds)
    lead = pm.incidents[0] if pm.incidents else None
    out["postmortem"] = list(lead.remediation) if lead else list(pm.remediation)
    rendered = postmortem_report.render(pm, date="2026-01-01")
    out["postmortem-markdown"] = _bullets_after(rendered, "### 5. Remediation")
    return out


def _bullets_after(text: str, heading: str) -> list[str]:
    """The '- ' bullets of the list that follows `heading` (Markdown escapes undone)."""
    after = text.split(heading, 1)[1].split("\n", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return [re.sub(r"\\(.)", r"\1", line[2:]) for line in after.splitlines() if line[:2] == "- "]


def _same_action_twice(remedies: list[str]) -> list[str]:
    """Actions that two bullets both give (the wording of one action, in two bullets)."""
    actions = ("halve the learning rate", "residual-stream", "bf16", "reload the last checkpoint")
    return [a for a in actions if sum(a in r.lower() for r in remedies) > 1]


# ---------------------------------------------------------------- (a) a collapsing scale


def test_a_collapsing_scale_is_never_told_to_enable_dynamic_scaling_and_says_nothing_twice():
    outputs = _every_output(_collapsing_scale_run(), Thresholds())
    verdict = outputs["verdict"]
    assert verdict  # the verdict has remedies
    for name, remedies in outputs.items():
        assert not [r for r in remedies if re.search(r"(enable|turn on) dynamic", r, re.I)], name
        assert len(set(remedies)) == len(remedies), (name, remedies)
        assert not _same_action_twice(remedies), (name, remedies)
        # one source: every output shows the verdict's list, in its order
        assert remedies == verdict, name
    # what to do about a scaler that keeps halving: the op that overflows, bf16, the LR
    text = " ".join(verdict)
    assert "find the op that overflows" in text and "bf16" in text
    assert "halve the learning rate" in text


# ---------------------------------------------------------------- (b) an LR jump


def test_a_persistent_spike_from_an_lr_jump_is_told_to_fix_the_schedule_in_every_output():
    analysis = analyze(_lr_jump_level_shift_run())
    assert (analysis.verdict.code, analysis.verdict.cause) == (
        "spike-persistent",
        "lr-discontinuity",
    )
    outputs = _every_output(_lr_jump_level_shift_run(), Thresholds())
    verdict = outputs["verdict"]
    assert any("LR schedule" in r and "jumped" in r for r in verdict), verdict
    # the remedies of a long-tail batch do not fit an LR jump
    assert not any("clip" in r or "stratified" in r for r in verdict), verdict
    assert outputs["junit"] == verdict and outputs["json"] == verdict
    for name, remedies in outputs.items():
        assert remedies == verdict, name


# ---------------------------------------------------------------- (c) stab explain


def _every_explainable_code() -> list[str]:
    from stabilitycli.classify.questions import CAUSE_TEXT, QUESTIONS, VERDICTS
    from stabilitycli.detect.registry import load_rules

    rules = load_rules()
    codes = set(VERDICTS) | set(CAUSE_TEXT) | set(QUESTIONS) | set(REMEDY_ONLY_CAUSES)
    codes |= {c for rule in rules.values() for c in rule.emits} | set(rules)
    return sorted(codes | set(SPEC_QUESTIONS))


# causes that key a remedy but are never a verdict's cause (a rise within warmup; where a NaN
# with no spec cause began); test_explain_covers_every_code_the_outputs_use checks the list
REMEDY_ONLY_CAUSES = ("lr-too-high", "nan-in-weights", "nan-before-logits")
# every question the spec numbers, including those the rule texts cite (Q1.4, Q3.3, Q3.4)
SPEC_QUESTIONS = (
    *(f"Q1.{n}" for n in range(1, 5)),
    *(f"Q2.{n}" for n in range(1, 5)),
    *(f"Q3.{n}" for n in range(1, 5)),
    *(f"Q4.{n}" for n in range(1, 5)),
    "R",
)


PRIVATE_NAME = re.compile(r"(?<![\w/.])_[A-Za-z]\w*")


@pytest.mark.parametrize("code", _every_explainable_code())
def test_explain_says_every_code_in_plain_words_with_what_to_do(cli, code: str) -> None:
    result = cli("explain", code)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not PRIVATE_NAME.findall(text), PRIVATE_NAME.findall(text)
    assert "seed 0" not in text.lower()
    assert "what to do" in text.lower(), text


def test_explain_covers_every_code_the_outputs_use() -> None:
    """Every verdict, cause and finding code a run can carry, and every question it asks."""
    from stabilitycli.classify.questions import QUESTIONS, VERDICT_ORDER
    from stabilitycli.classify.remedies import REMEDY_TABLE
    from stabilitycli.detect.registry import load_rules

    codes = set(_every_explainable_code())
    assert set(VERDICT_ORDER) | {"healthy", "insufficient-data"} <= codes
    assert {c for r in load_rules().values() for c in r.emits} <= codes
    assert {c for _, c in REMEDY_TABLE if c} <= codes
    assert {"Q2.3", "R"} <= set(QUESTIONS)


# ---------------------------------------------------------------- (d) thresholds in force


def test_remedies_state_the_thresholds_in_force_not_the_defaults() -> None:
    # as `--set recovery_window_steps=120` gives them
    thresholds, _ = load_settings(cli_values={"recovery_window_steps": "120"})
    assert thresholds.recovery_window_steps != Thresholds().recovery_window_steps
    default = analyze(_lr_jump_level_shift_run()).verdict.remediation
    changed = analyze(_lr_jump_level_shift_run(), thresholds).verdict.remediation
    assert any("within 50 steps" in r for r in default), default
    assert any("within 120 steps" in r for r in changed), changed
    assert not any("within 50 steps" in r for r in changed), changed


# ---------------------------------------------------------------- what is already in place


def _long_tail_spike_run(grad_norm_key: str) -> pl.DataFrame:
    """One batch's grad norm jumps 50x at step 799 and the loss moves up at 800 and stays."""
    rng = np.random.default_rng(7)
    loss = 2.0 + 0.01 * rng.standard_normal(STEPS.size) + np.where(STEPS >= 800, 0.8, 0.0)
    grad = 0.5 + 0.02 * rng.standard_normal(STEPS.size)
    grad[799] = 25.0
    return pl.DataFrame({"step": STEPS, "loss": loss, grad_norm_key: grad})


def test_a_run_that_logs_a_pre_clip_grad_norm_is_told_to_lower_the_clip_once() -> None:
    """A grad norm logged as the pre-clip one means the run clips: lower it, never add it."""
    clipping = analyze(_long_tail_spike_run("Grad/norm_preclip")).verdict
    plain_run = _long_tail_spike_run("grad_norm")
    plain = analyze(plain_run).verdict
    assert (clipping.code, clipping.cause) == ("spike-persistent", "long-tail-token")
    clip_remedies = [r for r in clipping.remediation if CLIP_ADVICE.search(r)]
    assert len(clip_remedies) == 1 and clip_remedies[0].startswith("lower the grad-clip")
    # where the log does not show clipping, the remedy says to clip, at the run's own 90th
    # percentile of the grad norm before the spike (issue 35: never a fixed 0.5)
    before = plain_run.filter(pl.col("step") < 800)["grad_norm"].to_numpy()
    expected = f"{np.percentile(before, 90):.3g}"
    assert [r for r in plain.remediation if CLIP_ADVICE.search(r)] == [
        f"clip the global grad norm at about {expected}, the 90th percentile of the grad norm "
        "over steps 0-799 (800 points)"
    ]


def test_the_clip_a_remedy_advises_is_the_one_in_force() -> None:
    """`--set remedy_clip_percentile=...` changes both clip remedies: add one, or lower the one
    used."""
    thresholds, _ = load_settings(cli_values={"remedy_clip_percentile": "99"})
    advised = (("grad_norm", "clip the global grad norm at"), ("Grad/norm_preclip", "lower"))
    for key, verb in advised:
        run = _long_tail_spike_run(key)
        changed = analyze(run, thresholds).verdict.remediation
        advice = [r for r in changed if CLIP_ADVICE.search(r)]
        value = np.percentile(run.filter(pl.col("step") < 800)[key].to_numpy(), 99)
        assert len(advice) == 1 and advice[0].startswith(verb), advice
        assert f"about {value:.3g}, the 99th percentile" in advice[0], advice


def test_a_run_without_a_grad_norm_is_told_how_to_choose_the_clip() -> None:
    """No grad norm series: no number, but how to choose one."""
    rng = np.random.default_rng(7)
    loss = 2.0 + 0.01 * rng.standard_normal(STEPS.size) + np.where(STEPS >= 800, 0.8, 0.0)
    verdict = analyze(pl.DataFrame({"step": STEPS, "loss": loss})).verdict
    advice = [r for r in verdict.remediation if CLIP_ADVICE.search(r)]
    assert advice == [
        "clip the global grad norm at a value near a high percentile of the run's usual grad "
        "norm (log the grad norm, then take about its 90th percentile over the healthy steps "
        "before the event)"
    ], verdict.remediation


# advice about the clip threshold ("pre-clip grad norm" in a finding's words is not advice)
CLIP_ADVICE = re.compile(r"grad-clip threshold|\bclip the\b")


def test_a_collapse_remedy_states_the_loss_scale_floor_in_force() -> None:
    thresholds, _ = load_settings(cli_values={"min_loss_scale": "0.5"})
    default = analyze(_collapsing_scale_run()).verdict.remediation
    changed = analyze(_collapsing_scale_run(), thresholds).verdict.remediation
    assert any("with the scale below 1," in r for r in default), default
    assert any("with the scale below 0.5," in r for r in changed), changed
    assert not any("below 1," in r for r in changed), changed
