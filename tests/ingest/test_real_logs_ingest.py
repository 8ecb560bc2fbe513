"""Every real log in shared/real-logs/ is read, and reads what its PROVENANCE.md says.

Parsing-level facts only (steps, values, events, counts, notes); what the
detectors conclude from them is tested elsewhere. Numbers come from the
PROVENANCE.md files and the README of shared/real-logs; where our count
differs from theirs, the test says why.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from stabilitycli.ingest import read

REAL = Path(__file__).parents[2].parent / "shared" / "real-logs"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"real logs not present at {REAL}")

CHRON = "bigscience-chronicles-excerpts"
PERF = "bigscience-perf-runs"
CHAT = "deepspeed-chat-opt"
EXPECTED_FORMAT = {
    f"{CHRON}/tr1-13B-base__L161-L177.log": "megatron",
    f"{CHRON}/tr11-176B-ml__L201-L214.log": "megatron",
    f"{CHRON}/tr11-176B-ml__L256-L272.log": "megatron",
    f"{CHRON}/tr8-104B-wide__L23-L32.log": "megatron",
    f"{CHRON}/tr8-104B-wide__L637-L644.log": "megatron",
    f"{CHRON}/tr8-104B-wide__L92-L98.log": "megatron",
    f"{CHRON}/tr8-104B-wide__L922-L935.log": "megatron",
    f"{CHRON}/tr8-104B-wide__L939-L944.log": "megatron",
    f"{CHRON}/tr8b-104B__L445-L461.log": "megatron",
    f"{PERF}/meg_ds_3d_gpt2_perf_n16-ds-off.out": "megatron",
    f"{PERF}/meg_gpt2_base_n8_dp1_tp4_pp8-1809562.out": "megatron",
    f"{CHAT}/step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log": "deepspeed",
    f"{CHAT}/step2_dpo_finetuning__opt-350M_globalBatchSize-32.log": "deepspeed",
    f"{CHAT}/step2_reward_model_finetuning__opt-350m_globalBatchSize-64.log": "deepspeed",
    f"{CHAT}/step3_rlhf_finetuning__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log": (
        "deepspeed"
    ),
    "hf-trainer-state-tinyllama-lora/trainer_state.json": "hf_trainer",
    "llmc-gpt2-124m-a100/main.log": "llmc",
}
_cache: dict[str, object] = {}


def run_of(name: str):
    if name not in _cache:
        _cache[name] = read(REAL / name)
    return _cache[name]


def at(name: str, step: int, column: str):
    values = run_of(name).frame.filter(pl.col("step") == step)[column].to_list()
    return values[0] if values else None


def column(name: str, col: str) -> dict[int, float]:
    frame = run_of(name).frame.filter(pl.col(col).is_not_null())
    return dict(zip(frame["step"].to_list(), frame[col].to_list(), strict=True))


def overflow_steps(name: str) -> list[int]:
    return sorted(column(name, "overflow"))


def test_every_real_file_is_covered():
    """A log added to shared/real-logs must get its expectations here."""
    present = {
        str(p.relative_to(REAL))
        for p in REAL.rglob("*")
        if p.is_file() and p.name not in ("PROVENANCE.md", "README.md")
    }
    assert present == set(EXPECTED_FORMAT)


@pytest.mark.parametrize("name", sorted(EXPECTED_FORMAT))
def test_every_file_reads_with_its_format_and_full_accounting(name: str):
    run = run_of(name)
    src = run.source
    assert src.format == EXPECTED_FORMAT[name]
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert src.rows_read > 0 and run.frame.height > 0


# --- bigscience chronicles excerpts (Megatron-DeepSpeed) ---


def test_tr1_13b_spike_and_loss_scale_drop():
    name = f"{CHRON}/tr1-13B-base__L161-L177.log"
    assert at(name, 29040, "loss") == pytest.approx(2.768131)
    assert at(name, 29050, "loss") == pytest.approx(7.343709)
    assert at(name, 29060, "loss") == pytest.approx(8.715872)
    scale = column(name, "loss_scale")
    assert [scale[s] for s in (29040, 29050, 29060)] == [65536.0, 8192.0, 4096.0]
    assert set(column(name, "grad_norm").values()) == {0.0}  # not computed in that run
    assert sorted(column(name, "loss")) == list(range(29020, 29100, 10))
    assert run_of(name).source.dtype == "fp16"
    assert run_of(name).source.rows_rejected == 0  # the `time (ms)` lines are not rows


def test_tr8_104b_grad_norm_jumps_one_iteration_before_the_loss():
    name = f"{CHRON}/tr8-104B-wide__L637-L644.log"
    grad, loss = column(name, "grad_norm"), column(name, "loss")
    assert grad[11446] == pytest.approx(12952.562)
    assert grad[11447] == pytest.approx(262623.331)  # 13k -> 263k at 11447
    assert loss[11447] == pytest.approx(3.114286)  # loss still normal at 11447
    assert loss[11448] == pytest.approx(7.71234)  # and jumps at 11448
    assert set(column(name, "loss_scale").values()) == {65536.0}
    assert set(column(name, "skipped_steps").values()) == {0.0}


def test_tr8_104b_missing_lm_loss_reads_as_nan_with_a_note():
    name = f"{CHRON}/tr8-104B-wide__L939-L944.log"
    assert at(name, 9026, "loss") == pytest.approx(7.02458)
    assert math.isnan(at(name, 9027, "loss"))
    assert at(name, 9026, "loss_scale") == 16384.0 and at(name, 9027, "loss_scale") == 8192.0
    assert any(
        n.startswith("iteration 9027: no `lm loss` field") for n in run_of(name).source.notes
    )


def test_tr8_104b_other_glitches():
    exp1 = f"{CHRON}/tr8-104B-wide__L23-L32.log"
    assert column(exp1, "loss") == pytest.approx({7000: 6.444662, 7010: 11.42026, 7220: 7.155109})
    assert column(exp1, "eval_loss") == pytest.approx({7000: 7.1742})
    exp2 = f"{CHRON}/tr8-104B-wide__L92-L98.log"
    assert column(exp2, "loss")[6900] == pytest.approx(6.365808)
    assert column(exp2, "loss")[6940] == pytest.approx(10.23865)
    assert max(column(exp2, "grad_norm").values()) == pytest.approx(283384.13)
    exp12 = f"{CHRON}/tr8-104B-wide__L922-L935.log"
    assert column(exp12, "grad_norm")[8741] == pytest.approx(3273877.676)
    assert sorted(column(exp12, "loss")) == list(range(8738, 8744))


def test_tr8b_six_overflows_walk_the_scale_down():
    name = f"{CHRON}/tr8b-104B__L445-L461.log"
    assert overflow_steps(name) == [17062, 17063, 17064, 17065, 17067, 17068]
    assert sum(column(name, "overflow").values()) == 6
    scale = column(name, "loss_scale")
    assert scale[17061] == 1048576.0 and scale[17068] == 32768.0
    assert [scale[s] for s in range(17063, 17069)] == [
        524288.0,
        262144.0,
        131072.0,
        131072.0,
        65536.0,
        32768.0,
    ]
    assert at(name, 17061, "loss") == pytest.approx(2.667121)
    assert at(name, 17062, "loss") == pytest.approx(4.374269)
    assert at(name, 17062, "tokens") == 16651845632  # `consumed tokens` is logged
    assert any(n.startswith("6 fp16 overflow") for n in run_of(name).source.notes)


def test_bloom_spike_throughput_drop_and_wrapped_lines():
    spike = f"{CHRON}/tr11-176B-ml__L201-L214.log"
    assert column(spike, "grad_norm")[31219] == pytest.approx(960.351)
    assert column(spike, "loss")[31219] == pytest.approx(5.098124)
    assert column(spike, "loss")[31250] == pytest.approx(2.215699)
    assert "loss_scale" not in run_of(spike).frame.columns  # bf16: no loss scale
    assert run_of(spike).source.dtype is None  # nothing in the excerpt says bf16
    assert at(spike, 31214, "step_time_ms") == pytest.approx(106460.0)  # `(s)` converted
    wrapped = f"{CHRON}/tr11-176B-ml__L256-L272.log"
    assert sorted(column(wrapped, "loss")) == [42780, 42781, 42782, 42783, 42784]
    tflops = column(wrapped, "tflops")
    assert tflops[42780] == pytest.approx(149.10) and tflops[42784] == pytest.approx(141.09)
    assert column(wrapped, "nan_steps") == {
        s: 0.0 for s in range(42780, 42785)
    }  # `nan`+`iterations` rejoined
    assert run_of(wrapped).source.rows_rejected == 0


# --- bigscience perf runs (complete Megatron stdout) ---


def test_perf_n16_every_iteration_and_the_explosion():
    name = f"{PERF}/meg_ds_3d_gpt2_perf_n16-ds-off.out"
    loss = column(name, "loss")
    assert sorted(loss) == list(range(1, 63))
    assert loss[3] == pytest.approx(44.24266) and loss[4] == pytest.approx(48.14127)
    assert min(loss, key=loss.get) == 31 and loss[31] == pytest.approx(11.65, abs=0.01)
    assert loss[62] == pytest.approx(20.43871)
    assert set(column(name, "skipped_steps").values()) == {0.0}
    assert set(column(name, "nan_steps").values()) == {0.0}
    assert set(column(name, "loss_scale").values()) == {12.0}  # static scale
    src = run_of(name).source
    assert src.dtype == "fp16"
    assert any(
        n.startswith("63 `[Rank N] memory (MB)`") for n in src.notes
    )  # 64 ranks, 2 on one line


def test_perf_n8_warmup_skips_and_scale_search():
    name = f"{PERF}/meg_gpt2_base_n8_dp1_tp4_pp8-1809562.out"
    skipped = column(name, "skipped_steps")
    assert sorted(skipped) == list(range(10, 210, 10))
    assert [skipped[s] for s in (10, 20, 30, 40)] == [10.0, 8.0, 1.0, 0.0]
    scale = column(name, "loss_scale")
    assert [scale[s] for s in (10, 20, 30)] == [8388608.0, 32768.0, 16384.0]
    assert at(name, 10, "loss") is None  # all 10 iterations skipped: no mean, not NaN
    assert any(
        n.startswith("iteration 10: no `lm loss` field: every iteration")
        for n in run_of(name).source.notes
    )
    assert at(name, 30, "loss") == pytest.approx(26.48119)
    assert column(name, "eval_loss") == pytest.approx({100: 8.095942, 200: 7.645013})


# --- DeepSpeed-Chat ---


def test_sft_overflow_count():
    name = f"{CHAT}/step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log"
    # 139 `OVERFLOW! Rank 0` lines = 139 events (67 of them hysteresis), and the run's
    # own counter agrees: the last progress line is `step=7360, skipped=139`
    assert sum(column(name, "overflow").values()) == 139
    assert sum(column(name, "skipped_steps").values()) == 139
    assert max(column(name, "lr")) == 7360
    assert overflow_steps(name)[:6] == [1, 2, 3, 4, 5, 6]  # warm-up, before `step=10, skipped=6`
    notes = " ".join(run_of(name).source.notes)
    assert "139 fp16 overflow" in notes and "67 of them kept the scale" in notes
    assert column(name, "eval_ppl")[0] == pytest.approx(4998.296, abs=1e-3)


def test_reward_model_rank_copies_are_one_event_each():
    name = f"{CHAT}/step2_reward_model_finetuning__opt-350m_globalBatchSize-64.log"
    iterations = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 145, 482, 485, 486, 557, 558, 565, 1541, 1614, 1724]
    # `Grad overflow on iteration N` counts from 0; `step=` from 1: iteration N is step N+1
    assert overflow_steps(name) == [i + 1 for i in iterations]
    assert any("iteration N is placed at step N+1" in n for n in run_of(name).source.notes)
    assert set(column(name, "overflow").values()) == {1.0}  # 16 ranks, 1 event
    assert "rank" not in run_of(name).frame.columns
    assert run_of(name).source.ranks is None
    notes = " ".join(run_of(name).source.notes)
    assert "20 fp16 overflow" in notes and "640 repeated copies" in notes  # 16 x 2 lines + 1, x 20
    assert sum(column(name, "skipped_steps").values()) == 20
    assert max(run_of(name).frame["step"]) == 1840


def test_dpo_overflow_count():
    name = f"{CHAT}/step2_dpo_finetuning__opt-350M_globalBatchSize-32.log"
    # The README counts 20 `[Rank 0] Overflow detected` lines; iteration 1436 has the
    # per-rank `Grad overflow` lines but no such summary line, so there are 21 events,
    # which is what the run's own counter says (`step=2350, skipped=21`).
    assert sum(column(name, "overflow").values()) == 21
    assert 1437 in overflow_steps(name)
    assert sum(column(name, "skipped_steps").values()) == 21
    # no training loss in a DPO log: its validation loss stands in, and the source says so
    assert column(name, "loss") == pytest.approx({0: 0.693359375, 2350: 0.6650807857513428})
    assert run_of(name).source.metric_origin["loss"] == "validation"


def test_rlhf_two_engines():
    name = f"{CHAT}/step3_rlhf_finetuning__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    assert sum(column(name, "overflow").values()) == 14  # actor and critic together
    assert len(column(name, "loss")) == 477  # act_loss: PPO steps 0-476, as printed
    # `epoch: 0|step: 7|...|act_loss: 0.0040283203125` is step 7, not 8
    assert at(name, 7, "loss") == pytest.approx(0.0040283203125)
    assert at(name, 8, "loss") == pytest.approx(0.2315673828125)
    assert min(column(name, "loss")) == 0 and max(column(name, "loss")) == 476
    # the engines' `step=10` (printed just before PPO step 9) is placed at 9, and the note says so
    assert at(name, 9, "lr") == pytest.approx(5.79e-07)
    assert any("placed at N-1" in n for n in run_of(name).source.notes)
    assert run_of(name).source.metrics["loss"] == "act_loss"
    assert any("2 DeepSpeed engines" in n for n in run_of(name).source.notes)
    assert "engine2/lr" in run_of(name).frame.columns


# --- llm.c and Hugging Face ---


def test_llmc_main_log():
    name = "llmc-gpt2-124m-a100/main.log"
    frame = run_of(name).frame
    assert frame["loss"].is_not_null().sum() == 19552
    assert frame["eval_loss"].is_not_null().sum() == 80
    assert frame["hellaswag_acc"].is_not_null().sum() == 79
    assert at(name, 8715, "grad_norm") == pytest.approx(4.29)
    assert at(name, 0, "loss") == pytest.approx(11.0116)
    assert at(name, 19552, "eval_loss") == pytest.approx(3.2731)
    assert run_of(name).source.rows_rejected == 0


def test_hf_trainer_state():
    name = "hf-trainer-state-tinyllama-lora/trainer_state.json"
    frame = run_of(name).frame
    assert frame["loss"].is_not_null().sum() == 186
    assert frame["eval_loss"].is_not_null().sum() == 14
    assert run_of(name).source.rows_read == 200
    assert run_of(name).source.last_step == 2800
    assert any("global_step 2800" in n for n in run_of(name).source.notes)
    assert any("logging_steps=15" in n for n in run_of(name).source.notes)
    assert at(name, 15, "loss") == pytest.approx(2.0762)
