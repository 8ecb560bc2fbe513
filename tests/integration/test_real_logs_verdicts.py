"""What `stab analyze` says about real public training logs, held to what their authors said.

Expectations come from each folder's PROVENANCE.md (shared/real-logs/). The
excerpts are too short for the 100- and 200-step windows: there `stab` must
say so (insufficient-data) and still report what the lines show.
"""

from __future__ import annotations

import pytest

from stabilitycli import analyze
from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import Severity
from tests.conftest import REAL_LOGS

pytestmark = pytest.mark.skipif(
    not REAL_LOGS.is_dir(), reason=f"real logs not present at {REAL_LOGS}"
)
EXCERPTS = REAL_LOGS / "bigscience-chronicles-excerpts"


def steps_of(result, code: str) -> list[int]:
    return [f.step for f in result.findings if f.code == code]


def test_tr1_13b_spike_with_loss_scale_backoff_is_seen_not_invented() -> None:
    result = analyze(EXCERPTS / "tr1-13B-base__L161-L177.log")
    assert result.verdict.code == "insufficient-data"
    assert steps_of(result, "loss-jump") == [29050]
    halving = next(f for f in result.findings if f.code == "loss-scale-halving")
    assert halving.evidence["scale_min"] == 4096.0
    assert "29050" in result.verdict.summary


def test_tr8_104b_grad_norm_leads_the_loss_by_one_step() -> None:
    result = analyze(EXCERPTS / "tr8-104B-wide__L637-L644.log")
    assert steps_of(result, "grad-norm-jump") == [11447]
    assert steps_of(result, "loss-jump") == [11448]
    assert not [f for f in result.findings if f.code.startswith("loss-scale")]  # scale unchanged


def test_tr8_104b_missing_lm_loss_is_the_nan_at_9027() -> None:
    result = analyze(EXCERPTS / "tr8-104B-wide__L939-L944.log")
    assert result.verdict.code == "nan"
    assert result.verdict.cause == "activation-overflow"  # fp16 run
    nan = next(f for f in result.findings if f.code == "nan")
    assert nan.evidence["first_step"] == 9027
    assert any("9027" in note for note in result.source.notes)


@pytest.mark.parametrize(
    "name, jump_step",
    [
        ("tr8-104B-wide__L23-L32.log", 7010),
        ("tr8-104B-wide__L922-L935.log", 8741),
        ("tr8b-104B__L445-L461.log", 17062),
        ("tr11-176B-ml__L201-L214.log", 31219),
    ],
)
def test_documented_spikes_in_short_excerpts(name: str, jump_step: int) -> None:
    result = analyze(EXCERPTS / name)
    # tr8b: six overflows in seven steps, the scale halving with no regrowth (it then
    # "diverged into NaN loss"): a failing scaler, not a log too short to judge
    want = "fp16-overflow" if name.startswith("tr8b") else "insufficient-data"
    assert result.verdict.code == want
    assert jump_step in steps_of(result, "loss-jump")


def test_bloom_throughput_drop() -> None:
    result = analyze(EXCERPTS / "tr11-176B-ml__L256-L272.log")
    drop = next(f for f in result.findings if f.code == "throughput-drop")
    assert 0.05 <= drop.evidence["drop_frac"] <= 0.06  # 149.1 -> 141.1 TFLOPs
    assert not [f for f in result.findings if f.severity >= Severity.ERROR]


def test_perf_run_n16_is_silent_divergence_after_its_early_spike() -> None:
    result = analyze(REAL_LOGS / "bigscience-perf-runs" / "meg_ds_3d_gpt2_perf_n16-ds-off.out")
    assert result.verdict.code == "divergence"
    divergence = next(f for f in result.findings if f.code == "divergence")
    assert 28 <= divergence.step <= 34  # the climb starts from 11.65 at iteration 31
    assert divergence.evidence["window_shortened"] is True  # 62 iterations cannot hold 200 steps
    assert steps_of(result, "loss-jump") == [3]  # 12.4 -> 44.2, before any baseline exists
    assert not [f for f in result.findings if f.code in ("nan", "fp16-overflow")]


def test_perf_run_n8_fp16_warmup_skips_are_the_scaler_working() -> None:
    result = analyze(
        REAL_LOGS / "bigscience-perf-runs" / "meg_gpt2_base_n8_dp1_tp4_pp8-1809562.out"
    )
    # 19 loss points every 10 iterations: too few for the trend window, so §4 is not
    # answered and the run is not called healthy; the coverage says why
    assert result.verdict.code == "insufficient-data"
    assert "divergence" in {s.code for s in result.coverage.not_checked}
    halving = next(f for f in result.findings if f.code == "loss-scale-halving")
    assert halving.evidence["scale_final"] == 16384.0
    assert 30 in steps_of(result, "loss-jump")  # the transient spike at iteration 30, seen


# the SFT log prints no training loss at all (only eval perplexity): it is refused, see below
_CHAT_WITH_A_LOSS = sorted(
    p.name for p in (REAL_LOGS / "deepspeed-chat-opt").glob("*.log") if "supervised" not in p.name
)


@pytest.mark.parametrize("name", _CHAT_WITH_A_LOSS)
def test_deepspeed_chat_overflows_are_benign(name: str) -> None:
    result = analyze(REAL_LOGS / "deepspeed-chat-opt" / name)
    assert result.verdict.code in ("healthy", "insufficient-data")
    codes = {f.code for f in result.findings}
    assert "loss-scale-halving" in codes
    assert not codes & {
        "loss-scale-collapsed",
        "loss-scale-static",
        "fp16-overflow",
        "rank-outlier",
    }
    assert (
        result.source.ranks is None
    )  # 16 ranks repeating one message are one event, no rank column


def test_llmc_gpt2_is_healthy_with_one_grad_norm_note() -> None:
    result = analyze(REAL_LOGS / "llmc-gpt2-124m-a100" / "main.log")
    assert result.verdict.code == "healthy"
    assert not [f for f in result.findings if f.severity >= Severity.WARNING]
    outlier = next(f for f in result.findings if f.code == "grad-norm-spike")
    assert outlier.evidence["steps"] == [8715]
    assert not [f for f in result.findings if f.code in ("spike", "divergence")]


def test_hf_lora_is_healthy() -> None:
    result = analyze(REAL_LOGS / "hf-trainer-state-tinyllama-lora" / "trainer_state.json")
    assert result.verdict.code == "healthy"
    assert not [f for f in result.findings if f.severity >= Severity.WARNING]


def test_a_log_without_a_training_loss_is_refused_not_passed() -> None:
    path = (
        REAL_LOGS
        / "deepspeed-chat-opt"
        / "step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log"
    )
    with pytest.raises(StabInputError, match=r"no loss series found \(numeric keys: .*'eval_ppl'"):
        analyze(path)


def test_every_real_log_has_its_loss_read_or_is_refused() -> None:
    read, refused = [], []
    for path in sorted(REAL_LOGS.rglob("*")):
        if not path.is_file() or path.suffix == ".md":
            continue
        try:
            result = analyze(path)
        except StabInputError as err:
            assert "no loss series found" in str(err) and "--metric loss=KEY" in str(err), err
            refused.append(path.name)
            continue
        src = result.source
        assert "loss" in src.metrics, path.name
        assert result.verdict.code != "healthy" or {"nan", "spike", "divergence"} <= set(
            result.coverage.checked
        ), path.name
        assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten, path.name
        read.append(path.name)
    assert refused == ["step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log"]
    assert len(read) == 16


def test_rlhf_steps_are_the_ppo_steps_as_printed() -> None:
    """`epoch: 0|step: 7|...|act_loss: 0.0040283203125` then `step: 8|...|act_loss: 0.2315...`:
    the jump is reported between steps 7 and 8 as the log prints them (it was 8 and 9)."""
    result = analyze(
        REAL_LOGS
        / "deepspeed-chat-opt"
        / "step3_rlhf_finetuning__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    )
    jump = next(f for f in result.findings if f.code == "loss-jump")
    assert jump.step == 8
    assert "0.004028 (step 7) to 0.2316 (step 8)" in jump.message
    assert any("placed at N-1" in n for n in result.source.notes)
