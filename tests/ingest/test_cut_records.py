"""A record cut mid-line keeps its whole fields (issue 39, item 4), in every line family.

Each case is a real public log read in place from ../shared, copied into tmp_path up to a
point inside one of its records, as a paste that stops there (or a job that died there)
leaves it. The fields before the cut that something closes (Megatron's `|`, a blank, a
comma) are whole and kept; the one the cut runs into may be a prefix (`3.2` of `3.2813`)
and is dropped. The warning says so, and that the cut may come from where the text was
copied, not only from a dying job.

The Megatron case is the one the issue means: in the tr8-104B chronicle (bigscience, its
PROVENANCE.md) iteration 9027 prints no `lm loss`, which is how Megatron hides a NaN
mean ("later it went into NaN"); cut after `loss scale: 8192.0 | gr`, the record still
shows the loss missing before the cut, and the NaN at 9027 is found.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze, read
from stabilitycli.cli import app
from tests.conftest import REAL_LOGS

SHARED = REAL_LOGS.parent
TR8 = REAL_LOGS / "bigscience-chronicles-excerpts" / "tr8-104B-wide__L939-L944.log"
KEPT = "cut off mid-line after its field"
COPIED = "may come from where the text was copied"

pytestmark = pytest.mark.skipif(not TR8.is_file(), reason="no shared logs beside the checkout")


def _cut(tmp_path: Path, source: Path, after: str, name: str = "cut.log", lines=None) -> Path:
    """`source` up to the end of the first `after` (from line `lines[0]` to `lines[1]`)."""
    text = source.read_text()
    if lines is not None:
        text = "".join(text.splitlines(keepends=True)[lines[0] : lines[1]])
    path = tmp_path / name
    path.write_text(text[: text.index(after) + len(after)])
    return path


def _stdin(path: Path) -> dict:
    result = CliRunner().invoke(app, ["analyze", "-", "-f", "json"], input=path.read_bytes())
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.output)


def test_megatron_cut_after_the_loss_scale_still_shows_the_hidden_nan(tmp_path: Path) -> None:
    path = _cut(tmp_path, TR8, "loss scale: 8192.0 | gr")
    run = read(path)
    at = run.frame.filter(run.frame["step"] == 9027).row(0, named=True)
    assert math.isnan(at["loss"]) and at["loss_scale"] == 8192.0
    assert any(KEPT in w and "`loss scale`" in w and COPIED in w for w in run.source.warnings)
    assert any("omitted before the cut" in n for n in run.source.notes)
    assert not run.source.rejections
    result = analyze(path)
    assert result.verdict.code == "nan"
    assert [f.step for f in result.findings if f.code == "nan"] == [9027]
    out = _stdin(path)
    assert out["verdict"]["code"] == "nan"
    assert [f["step"] for f in out["findings"] if f["code"] == "nan"] == [9027]


def test_megatron_cut_before_where_the_loss_is_printed_is_no_nan(tmp_path: Path) -> None:
    # iteration 9027 cut inside `global batch size:   192 | lo`: where Megatron prints the
    # loss comes after the cut, so its absence is the cut's, not Megatron's NaN
    path = _cut(
        tmp_path,
        TR8,
        "540656 | elapsed time per iteration (ms): 63274.6 | learning "
        "rate: 6.000E-05 | global batch size:   192 | lo",
    )
    run = read(path)
    at = run.frame.filter(run.frame["step"] == 9027).row(0, named=True)
    assert at["loss"] is None and at["lr"] == pytest.approx(6e-5)
    assert any("unknown (left empty, not NaN)" in n for n in run.source.notes)
    assert analyze(path).verdict.code != "nan"


def test_llmc_cut_inside_the_grad_norm_keeps_the_loss_and_lr(tmp_path: Path) -> None:
    log = REAL_LOGS / "llmc-gpt2-124m-a100" / "main.log"
    path = _cut(tmp_path, log, "s:199 trl:6.3122 lr:0.000171 norm:0.", "main.log", (0, 201))
    run = read(path)
    last = run.frame.filter(run.frame["step"] == 199).row(0, named=True)
    assert last["loss"] == 6.3122 and last["lr"] == 0.000171 and last["grad_norm"] is None
    assert any(KEPT in w and "`lr`" in w for w in run.source.warnings)
    assert any(KEPT in w for w in _stdin(path)["source"]["warnings"])


def test_kvlog_cut_inside_the_train_time_keeps_the_spike(tmp_path: Path) -> None:
    # modded-nanogpt's `step:2068/20344 train_loss:5.0213 train_time:3551154ms ...`: the
    # first of the run's one-step spikes, on the cut line
    log = next((SHARED / "pasted-logs" / "mnano-scaleup1b-1p5b").glob("*.txt"))
    path = _cut(tmp_path, log, "train_loss:5.0213 train_time:355", "log.txt", (0, 2137))
    run = read(path)
    assert run.source.format == "kvlog"
    last = run.frame.filter(run.frame["step"] == 2068).row(0, named=True)
    assert last["loss"] == 5.0213
    assert any(KEPT in w and "`train_loss`" in w for w in run.source.warnings)
    assert _stdin(path)["source"]["last_step"] == 2068


def test_kvlog_cut_and_hard_wrapped_keeps_the_spike(tmp_path: Path) -> None:
    # the same paste copied out of a 64-column terminal: each record wrapped over two lines,
    # and the copy cut inside step 2068's train_time, on its second line
    log = next((SHARED / "pasted-logs" / "mnano-scaleup1b-1p5b").glob("*.txt"))
    whole = _cut(tmp_path, log, "train_loss:5.0213 train_time:355", "whole.txt", (0, 2137))
    lines = whole.read_text().split("\n")
    path = tmp_path / "wrapped.txt"
    path.write_text("\n".join(p for line in lines for p in _wrap(line, 64)))
    run = read(path)
    assert run.source.format == "kvlog" and run.source.rejections == []
    assert any("hard-wrapped" in n for n in run.source.notes)
    last = run.frame.filter(run.frame["step"] == 2068).row(0, named=True)
    assert last["loss"] == 5.0213
    assert any(KEPT in w and "`train_loss`" in w for w in run.source.warnings)
    assert run.frame.equals(read(whole).frame)
    assert _stdin(path)["source"]["last_step"] == 2068


def _wrap(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)] or [""]


def test_dictlog_cut_inside_a_trainer_dict_keeps_its_whole_pairs(tmp_path: Path) -> None:
    log = SHARED / "pasted-logs" / "chinese-llama-issue534-scale-halving" / "issue_excerpt.log"
    path = _cut(tmp_path, log, "{'loss': 2.0491, 'learning_rate': 0.00019")
    run = read(path)
    assert run.source.format == "dictlog"
    row = run.frame.filter(run.frame["loss"].is_not_null()).row(0, named=True)
    assert (row["step"], row["loss"], row.get("lr")) == (380, 2.0491, None)  # the bar's step
    assert any(KEPT in w and "`loss`" in w for w in run.source.warnings)
    assert _stdin(path)["source"]["format"] == "dictlog"


def test_deepspeed_chat_ppo_line_cut_keeps_the_actor_loss(tmp_path: Path) -> None:
    log = (
        REAL_LOGS
        / "deepspeed-chat-opt"
        / "step3_rlhf_finetuning__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    )
    path = _cut(tmp_path, log, "step: 476|ppo_ep: 1|act_loss: -0.03875732421875|cri_loss: -0")
    run = read(path)
    last = run.frame.filter(run.frame["step"] == 476).row(0, named=True)
    assert last["loss"] == -0.03875732421875 and last["cri_loss"] is None
    assert any(KEPT in w and "`act_loss`" in w for w in run.source.warnings)
    assert _stdin(path)["verdict"]["code"] == analyze(path).verdict.code
