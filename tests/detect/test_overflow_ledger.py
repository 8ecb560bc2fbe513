"""The overflow ledger on real logs read in place (issue 35), and every output agreeing with it.

Each number is checked twice: against the ledger (what every output must say) and against an
independent regex count over the raw log text (what the ledger must say).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli import analyze
from stabilitycli.cli import app
from stabilitycli.detect.overflow_ledger import ledger_of
from stabilitycli.detect.series import build_view
from stabilitycli.pipeline.run import load_run
from tests.conftest import REAL_LOGS, ROOT

PASTED = ROOT.parent / "shared" / "pasted-logs"
CHINESE = PASTED / "chinese-llama-issue534-scale-halving" / "issue_excerpt.log"
CHAT = REAL_LOGS / "deepspeed-chat-opt"
REWARD = next(iter(sorted(CHAT.glob("step2_reward_model_*.log"))), CHAT / "missing")
N8 = next(iter(sorted((REAL_LOGS / "bigscience-perf-runs").glob("meg_gpt2_base_n8_*"))), CHAT)
EXCERPTS = REAL_LOGS / "bigscience-chronicles-excerpts"
TR1 = EXCERPTS / "tr1-13B-base__L161-L177.log"
TR8B = EXCERPTS / "tr8b-104B__L445-L461.log"
pytestmark = pytest.mark.skipif(
    not (REAL_LOGS.is_dir() and PASTED.is_dir()), reason="shared logs not present"
)
HEALTHY_WORDS = ("doing its job", "nothing abnormal")


def ledger(path: Path):
    return ledger_of(build_view(load_run(path)))


def outputs(path: Path) -> dict[str, str]:
    """What `stab analyze` prints in each format, as text."""
    runner = CliRunner()
    out = {}
    for fmt in ("json", "markdown", "terminal"):
        result = runner.invoke(app, ["analyze", str(path), "--format", fmt], env={"COLUMNS": "400"})
        assert result.exception is None or isinstance(result.exception, SystemExit)
        out[fmt] = "" if result.exit_code == 2 else result.output
    post = runner.invoke(app, ["postmortem", str(path), "-o", "-"], env={"COLUMNS": "400"})
    assert post.exception is None or isinstance(post.exception, SystemExit)
    out["postmortem"] = "" if post.exit_code == 2 else post.output
    # the HTML report: its overflow markers are labelled with the ledger's count
    html = runner.invoke(app, ["report", str(path), "-o", "-", "--js", "cdn"])
    assert html.exception is None or isinstance(html.exception, SystemExit)
    out["html"] = "" if html.exit_code == 2 else html.output
    return out


def test_chinese_llama_paste_is_a_failing_scaler_with_max_64_and_5_drops() -> None:
    book = ledger(CHINESE)
    assert (book.total, book.exact, book.by_source()) == (5, True, {"message": 5})
    assert book.scale is not None
    assert (book.scale.max, book.scale.min, book.scale.drops, book.scale.halvings) == (64, 2, 5, 5)
    assert book.scale.rises == 0
    result = analyze(CHINESE)
    assert result.verdict.code == "fp16-overflow"
    finding = next(f for f in result.findings if f.code == "fp16-overflow")
    assert finding.evidence["reason"] == "failing"
    assert "overflow on 5 of the 5 steps 378-382" in finding.message
    assert "from 64 to 2" in finding.message and "never regrowing" in finding.message
    for text in outputs(CHINESE).values():
        assert not any(words in text for words in HEALTHY_WORDS)


def test_reward_model_says_20_overflows_everywhere() -> None:
    book = ledger(REWARD)
    assert (book.total, book.exact) == (20, True)
    assert book.scale is not None and (book.scale.max, book.scale.drops) == (65536, 20)
    result = analyze(REWARD)
    q31 = next(p for p in result.verdict.path if p.question == "Q3.1")
    assert q31.evidence.startswith("20 overflow(s) in 1841 steps")
    assert any(n.startswith("20 fp16 overflow") for n in result.source.notes)
    data = json.loads(outputs(REWARD)["json"])
    assert data["overflow_ledger"]["overflows"] == 20
    assert data["overflow_ledger"]["scale"]["max"] == 65536


def test_megatron_n8_counters_are_at_least_19_and_the_fall_at_least_8_halvings() -> None:
    book = ledger(N8)
    assert (book.total, book.exact) == (19, False)
    assert book.counts.tolist() == [10, 8, 1]
    assert book.scale is not None and not book.scale.halvings_exact
    # 8388608 -> 32768 is 2^8: at least 8 halvings, then one more to 16384
    assert book.scale.fall_to.tolist() == [32768, 16384] and book.scale.halvings == 9
    q31 = next(p for p in analyze(N8).verdict.path if p.question == "Q3.1")
    assert q31.evidence.startswith("at least 19 overflow(s)")


def test_tr1_13b_16x_fall_is_at_least_4_halvings_hidden_by_its_counters() -> None:
    book = ledger(TR1)
    assert book.scale is not None
    assert (book.scale.halvings, book.scale.halvings_exact) == (4, False)
    assert (book.total, book.exact) == (4, False) and book.hidden_intervals == 2
    q31 = next(p for p in analyze(TR1).verdict.path if p.question == "Q3.1")
    assert q31.evidence.startswith("at least 4 overflow(s)")
    assert "read 0" in q31.evidence and "hides" in q31.evidence


def test_tr8b_six_overflows_in_seven_steps_is_a_failing_scaler() -> None:
    book = ledger(TR8B)
    assert (book.total, book.by_source()) == (6, {"message": 6})
    assert book.scale is not None
    assert (book.scale.max, book.scale.final, book.scale.rises) == (1048576, 32768, 0)
    result = analyze(TR8B)
    assert result.verdict.code == "fp16-overflow"
    assert "overflow on 6 of the 7 steps 17062-17068" in result.verdict.summary
    for text in outputs(TR8B).values():
        assert not any(words in text for words in HEALTHY_WORDS)


DS_ZERO = (
    "[2023-06-07 22:16:0{n},018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: 0, reducing to 0\n"
)


def test_scale_zero_without_a_loss_is_a_verdict_with_the_loss_not_read(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(DS_ZERO.format(n=0) + DS_ZERO.format(n=1))
    result = CliRunner().invoke(app, ["analyze", str(log), "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["verdict"]["code"] == "loss-scale-collapsed"
    not_checked = {c["check"]: c["reason"] for c in data["coverage"]["not_checked"]}
    assert "loss not read" in not_checked["nan"]
    assert data["overflow_ledger"]["overflows"] == 2
    # without scale evidence a log with no loss is still refused
    (tmp_path / "plain.log").write_text("step 1 lr 0.1\nstep 2 lr 0.1\n")
    refused = CliRunner().invoke(app, ["analyze", str(tmp_path / "plain.log")])
    assert refused.exit_code == 2


def test_a_scaler_that_regrows_or_searches_its_first_scale_is_not_failing() -> None:
    # the reward model's scale halves 20 times and regrows 15: the scaler doing its job
    reward = analyze(REWARD)
    assert "fp16-overflow" not in [f.code for f in reward.findings]
    assert "loss-scale-halving" in [f.code for f in reward.findings]
    # n8's 19 skips are at steps 1-30, the scaler finding its first scale
    n8 = analyze(N8)
    assert n8.verdict.code == "insufficient-data"
    assert "fp16-overflow" not in [f.code for f in n8.findings]


AT_MINIMUM = (
    "[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
    "Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1\n"
    "[2023-06-07 22:16:01,018] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=1, "
    "lr=[5e-05], mom=[(0.9, 0.95)]\n"
    "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore."
    " Exiting run.\n"
)


def test_already_at_minimum_is_a_collapsed_scale(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(AT_MINIMUM)
    result = analyze(log)
    assert result.verdict.code == "loss-scale-collapsed"
    assert "already at its minimum" in result.verdict.summary
    assert ledger(log).at_minimum_steps.tolist() == [11]
    assert any("already at its minimum" in n for n in result.source.notes)


# ---------------------------------------------------------------- agreement

_NUM = r"([0-9.]+(?:e[+-]?\d+)?)"


def independent(text: str) -> dict:
    """Overflows and scale values counted with plain regexes over the raw log."""
    iterations = set(re.findall(r"Grad overflow on iteration:?\s*(\d+)", text))
    rank0 = re.findall(r"(?:OVERFLOW! Rank 0|\[Rank 0\] Overflow detected)", text)
    counters = [float(v) for v in re.findall(r"number of skipped iterations:\s*(\d+)", text)]
    scales = [float(v) for v in re.findall(r"loss scale:\s*" + _NUM, text)]
    scales += [float(v) for v in re.findall(r"reducing to\s*" + _NUM, text)]
    return {
        "messages": len(iterations) or len(rank0),
        "counted": sum(counters),
        "max": max(scales, default=None),
        "min": min(scales, default=None),
    }


def agreement_inputs() -> list[Path]:
    shared = [*sorted(REAL_LOGS.glob("*/*.log")), *sorted(REAL_LOGS.glob("*/*.out"))]
    shared += sorted(PASTED.glob("*/*.log"))
    with_scale = [p for p in shared if re.search(r"loss scale|OVERFLOW", p.read_text())]
    fixtures = [
        p
        for p in sorted((ROOT / "fixtures").glob("*/*/run.jsonl"))
        + sorted((ROOT / "fixtures").glob("rules/*/*/run.jsonl"))
        if re.search(r"loss_scale|overflow", p.read_text())
    ]
    return with_scale + fixtures


_COUNT_SAYINGS = (
    r"(at least )?\b(\d+) overflow\(s\)",
    r"overflowed (at least )?(\d+) time\(s\)",
    r"- overflows: (at least )?(\d+)",
)


@pytest.mark.parametrize(
    "path", agreement_inputs(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}"
)
def test_every_output_agrees_with_the_ledger_and_the_ledger_with_the_log(path: Path) -> None:
    book = ledger(path)
    raw = independent(path.read_text())
    # the ledger against the log
    if raw["messages"]:
        assert book.by_source().get("message", 0) == raw["messages"]
    if raw["counted"] and not raw["messages"]:
        assert book.total >= raw["counted"]
    if book.scale is not None and raw["max"] is not None:
        assert math.isclose(book.scale.max, raw["max"]) and math.isclose(book.scale.min, raw["min"])
    # every output against the ledger
    texts = outputs(path)
    if not texts["json"].strip():
        return  # no loss read and nothing decisive in the scaler's evidence: refused (exit 2)
    data = json.loads(texts["json"])
    json_book = data.get("overflow_ledger")
    if json_book is None:
        return  # not an fp16 run: §3 did not count overflows
    assert json_book["overflows"] == book.total
    assert json_book["overflows_exact"] == book.exact
    words = "" if book.exact else "at least "
    for fmt, text in texts.items():
        if fmt == "json":
            continue  # its numbers are the ledger's own fields, checked above
        flat = re.sub(r"\s*[│|]\s*", " ", text)
        flat = re.sub(r"\s+", " ", flat)
        for saying in _COUNT_SAYINGS:
            for at_least, n in re.findall(saying, flat):
                assert (at_least, int(n)) == (words, book.total), (fmt, saying, n)
        if book.scale is None:
            continue
        halvings = book.scale.halvings
        for n in re.findall(r"taking (?:at least )?(\d+) halving\(s\)", flat):
            assert int(n) == halvings, fmt
        for n in re.findall(r"backed off (?:at least )?(\d+) time\(s\)", flat):
            assert int(n) == halvings, fmt
        for top in re.findall(r"scale max (\S+) ->", flat):
            assert float(top) == book.scale.max, fmt
    for note in data["source"]["notes"]:
        if m := re.match(r"(\d+) fp16 overflow \(skipped-step\) events", note):
            assert int(m[1]) == book.by_source().get("message", 0)
