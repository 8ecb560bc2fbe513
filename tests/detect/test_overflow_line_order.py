"""DeepSpeed overflow messages print no step: between two step lines they take the step line
that follows, but before the first step line or after the last they are numbered by their
order among the log's lines. A loss-scale finding that names such a number says that it is
one, not an optimizer step, in its sentence and in its evidence (#36).

The logs are DeepSpeed-Chat stdout as its step-3 script prints it (PPO step lines, the
loss scaler's `OVERFLOW!` lines with a logger timestamp), written into tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app

PPO_STEPS = 40
ORDER_WORDS = "not optimizer steps"


def _overflow(second: int, attempted: float) -> str:
    return (
        f"[2024-05-02 08:{second // 60:02d}:{second % 60:02d},000] [INFO] "
        "[loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
        f"Attempted loss scale: {attempted:g}, reducing to {attempted / 2:g}"
    )


def _ppo(step: int) -> str:
    loss = 0.3 - 0.002 * step
    return f"epoch: 0|step: {step}|ppo_ep: 1|act_loss: {loss:.4f}|cri_loss: 0.12|unsuper_loss: 0.0"


def _log(path: Path, *, collapse_after_last: bool) -> Path:
    """PPO steps 0-39 with one overflow between steps 9 and 10 (placed at step 10); with
    `collapse_after_last`, the run then prints 18 overflows and no more step lines, the
    scale halving from 32768 to 0.125 (numbered on from step 39 by their order)."""
    lines = ["***** Running training *****"]
    for step in range(PPO_STEPS):
        if step == 10:
            lines.append(_overflow(10, 65536))
        lines.append(_ppo(step))
    if collapse_after_last:
        scale = 32768.0
        for k in range(18):
            lines.append(_overflow(100 + k, scale))
            scale /= 2
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_collapse_after_the_last_step_line_says_its_steps_are_line_order(tmp_path):
    result = analyze(str(_log(tmp_path / "collapse.log", collapse_after_last=True)))
    (finding,) = [f for f in result.findings if f.code == "loss-scale-collapsed"]
    numbered = finding.evidence["line_order_steps"]
    assert finding.step in numbered and finding.step > PPO_STEPS - 1
    assert 10 not in numbered  # placed by the step line after it: a step the log printed
    assert all(s > PPO_STEPS - 1 for s in numbered)
    assert "after the last step line" in finding.evidence["step_numbering"]
    assert ORDER_WORDS in finding.message
    said = finding.message.split("; step(s) ")[-1]
    assert said.startswith(f"{numbered[0]}-{numbered[-1]} here number"), said


def test_the_overflow_count_says_its_span_counts_line_order_numbers(tmp_path):
    collapse = analyze(str(_log(tmp_path / "collapse.log", collapse_after_last=True)))
    q31 = next(p for p in collapse.verdict.path if p.question == "Q3.1")
    numbered = sorted(collapse.source.line_order_steps)
    assert len(numbered) == 18 and numbered[0] > PPO_STEPS - 1  # after the last step line
    said = f"; step(s) {numbered[0]}-{numbered[-1]} in that span number loss-scale messages"
    assert said in q31.evidence, q31.evidence
    assert q31.evidence.endswith(ORDER_WORDS), q31.evidence
    between = analyze(str(_log(tmp_path / "between.log", collapse_after_last=False)))
    q31 = next(p for p in between.verdict.path if p.question == "Q3.1")
    assert ORDER_WORDS not in q31.evidence, q31.evidence


def test_overflows_placed_by_step_lines_are_not_called_line_order(tmp_path):
    result = analyze(str(_log(tmp_path / "between.log", collapse_after_last=False)))
    scale = [f for f in result.findings if f.code.startswith("loss-scale")]
    assert scale, [f.message for f in result.findings]
    for finding in scale:
        assert "line_order_steps" not in finding.evidence
        assert ORDER_WORDS not in finding.message


def test_every_renderer_says_the_steps_are_line_order(tmp_path):
    log = _log(tmp_path / "collapse.log", collapse_after_last=True)
    runner = CliRunner()
    outputs = {}
    commands = {
        fmt: ["analyze", str(log), "--format", fmt] for fmt in ("terminal", "json", "markdown")
    }
    commands["html"] = ["report", str(log), "-o", "-"]
    for fmt, args in commands.items():
        result = runner.invoke(app, args, env={"COLUMNS": "400"})
        # exit 1: the collapse is an error; no crash (a crash is exit 1 with its exception)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), fmt
        outputs[fmt] = result.output
    (finding,) = [
        f for f in json.loads(outputs["json"])["findings"] if f["code"] == "loss-scale-collapsed"
    ]
    assert finding["evidence"]["line_order_steps"]
    assert "after the last step line" in finding["evidence"]["step_numbering"]
    for fmt, text in outputs.items():
        assert ORDER_WORDS in text, fmt


def test_the_source_line_says_when_its_last_step_is_a_line_order_number(tmp_path):
    collapse = analyze(str(_log(tmp_path / "collapse.log", collapse_after_last=True)))
    last = collapse.source.last_step
    assert last in collapse.source.line_order_steps  # the 18th overflow, not a PPO step
    assert collapse.source.steps_text() == (
        f"steps 0–{last} (step(s) {last} number loss-scale messages by their order among the "
        "log's lines, not optimizer steps)"
    )
    between = analyze(str(_log(tmp_path / "between.log", collapse_after_last=False)))
    assert between.source.steps_text() == f"steps 0–{PPO_STEPS - 1}"
    runner = CliRunner()
    for fmt in ("terminal", "markdown"):
        result = runner.invoke(
            app, ["analyze", str(tmp_path / "collapse.log"), "-f", fmt], env={"COLUMNS": "400"}
        )
        assert isinstance(result.exception, SystemExit), fmt
        assert collapse.source.steps_text() in result.output, fmt
