"""Megatron-DeepSpeed logs without `lm loss`, and the dtype that a log does (and does not) fix.

The iteration lines copy the layout of the bigscience logs in shared/real-logs
(tr8-104B's `... | lm loss: 7.024580E+00 | loss scale: 16384.0 | grad norm: ...`,
each followed by a `time (ms)` timer line). Megatron prints `lm loss` only when
the interval mean is > 0, so a NaN mean leaves the field out, and it prints
`loss scale: 1.0` for bf16 and fp32 runs as well as for fp16.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stabilitycli import analyze
from stabilitycli.classify.remedies import ENABLE_DYNAMIC_SCALING, MOVE_TO_BF16
from stabilitycli.core.errors import StabUsageError
from stabilitycli.ingest.dtype import dtype_from, dtype_option
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import megatron

TOTAL = 159576


def iteration(
    it: int,
    *,
    loss: float | None,
    grad: str = "0.876",
    scale: float = 1.0,
    skipped: int = 0,
    nan_iters: int = 0,
) -> str:
    lm = f" lm loss: {loss:E} |" if loss is not None else ""
    return (
        f" iteration {it:8d}/{TOTAL:8d} | consumed samples: {it * 192:12d} |"
        f" elapsed time per iteration (ms): 62075.5 | learning rate: 6.000E-05 |"
        f" global batch size:   192 |{lm} loss scale: {scale:.1f} | grad norm: {grad} |"
        f" num zeros: 0.0 | number of skipped iterations: {skipped:3d} |"
        f" number of nan iterations: {nan_iters:3d} |\n"
        "time (ms)\n"
    )


def argument_dump(**values: object) -> str:
    lines = ["------------------------ arguments ------------------------\n"]
    for name, value in sorted(values.items()):
        lines.append(f"  {name} {'.' * (48 - len(name))} {value}\n")
    lines.append("-------------------- end of arguments ---------------------\n")
    return "".join(lines)


def healthy_loss(it: int) -> float:
    return 2.5 + 8.0 / math.sqrt(it) + 0.01 * math.sin(it)


def write(tmp_path: Path, text: str, name: str = "train.out") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def remedy_says(result, text: str) -> bool:
    return any(text in r for r in result.verdict.remediation)


def answer(result, question: str) -> str:
    return next(p.answer for p in result.verdict.path if p.question == question)


# --- (a) and (b): a missing `lm loss` with a NaN grad norm is a NaN run ---------------------


def test_no_line_carries_lm_loss_is_nan_at_the_first_iteration(tmp_path: Path) -> None:
    """The reported case: every line without `lm loss`, `grad norm: nan`, `loss scale: 1.0`."""
    text = "".join(iteration(it, loss=None, grad="nan") for it in range(1, 41))
    result = analyze(write(tmp_path, text))
    assert result.verdict.code == "nan"
    nan = next(f for f in result.findings if f.code == "nan")
    assert nan.step == 1 and nan.evidence["count"] == 40
    assert result.source.dtype is None  # `loss scale: 1.0` fixes nothing
    assert not [f for f in result.findings if f.code.startswith("loss-scale")]
    assert not [f for f in result.findings if f.code == "fp16-overflow"]
    assert any("no `lm loss` field" in n for n in result.source.notes)


def test_no_lm_loss_at_all_and_nothing_non_finite_is_not_read_as_nan(tmp_path: Path) -> None:
    """Without a sign of NaN, a log that never names its loss is not guessed to be NaN."""
    text = "".join(iteration(it, loss=None) for it in range(1, 41))
    run = megatron.read(write(tmp_path, text), ReadOptions())
    assert "loss" not in run.frame.columns


def test_nan_starting_mid_log_is_found_where_it_starts(tmp_path: Path) -> None:
    healthy = "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 151))
    broken = "".join(iteration(it, loss=None, grad="nan") for it in range(151, 181))
    result = analyze(write(tmp_path, healthy + broken))
    assert result.verdict.code == "nan"
    nan = next(f for f in result.findings if f.code == "nan")
    assert nan.step == 151 and nan.evidence["count"] == 30
    assert result.source.dtype is None
    assert answer(result, "Q1.2") == "unknown"
    assert result.verdict.cause is None  # not an fp16 activation overflow: nothing says fp16


# --- (c) and (d): what fixes the dtype ----------------------------------------------------------


@pytest.mark.parametrize(
    "head, origin",
    [
        (argument_dump(bf16=True, fp16=False, seq_length=2048), "argument dump"),
        ("using torch.bfloat16 for parameters ...\n", "using torch.bfloat16"),
        (
            "+ python pretrain_gpt.py --num-layers 24 --seq-length 2048 --bf16"
            " --log-interval 1 --data-impl mmap\n",
            "--bf16",
        ),
    ],
)
def test_bf16_run_with_loss_scale_one_is_bf16_never_fp16(
    tmp_path: Path, head: str, origin: str
) -> None:
    text = head + "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 301))
    result = analyze(write(tmp_path, text))
    assert result.source.dtype == "bf16"
    assert origin in result.source.dtype_origin
    section3 = [f for f in result.findings if f.code.startswith(("loss-scale", "fp16"))]
    assert section3 == []
    assert answer(result, "Q3.1") == "not applicable"


def test_bf16_nan_is_read_as_bf16_with_no_fp16_remedy(tmp_path: Path) -> None:
    healthy = "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 101))
    broken = "".join(iteration(it, loss=None, grad="nan") for it in range(101, 121))
    text = argument_dump(bf16=True, fp16=False) + healthy + broken
    result = analyze(write(tmp_path, text))
    assert result.verdict.code == "nan" and result.verdict.cause is None
    assert answer(result, "Q1.2") == "bf16"
    assert not remedy_says(result, "bf16") and not remedy_says(result, "dynamic loss scal")


def test_fp16_scale_that_moves_is_fp16(tmp_path: Path) -> None:
    scales = [65536.0] * 20 + [32768.0] * 20 + [16384.0] * 20 + [32768.0] * 20
    text = "".join(
        iteration(it, loss=healthy_loss(it), scale=scale, skipped=int(it in (21, 41)))
        for it, scale in enumerate(scales, start=1)
    )
    run = megatron.read(write(tmp_path, text), ReadOptions())
    assert run.source.dtype == "fp16"
    assert "loss scale" in run.source.dtype_origin


def test_fp16_and_bf16_both_false_in_the_argument_dump_is_fp32(tmp_path: Path) -> None:
    text = argument_dump(bf16=False, fp16=False) + "".join(
        iteration(it, loss=healthy_loss(it)) for it in range(1, 41)
    )
    run = megatron.read(write(tmp_path, text), ReadOptions())
    assert run.source.dtype == "fp32" and "argument dump" in run.source.dtype_origin


def test_deepspeed_config_dump_in_the_same_log_fixes_bf16(tmp_path: Path) -> None:
    head = (
        "[2022-03-11 20:40:32,155] [INFO] [config.py:944:print]   bfloat16_enabled"
        " ............. True\n"
        "[2022-03-11 20:40:32,155] [INFO] [config.py:944:print]   fp16_enabled"
        " ................. False\n"
    )
    text = head + "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 41))
    run = megatron.read(write(tmp_path, text), ReadOptions())
    assert run.source.dtype == "bf16" and "DeepSpeed" in run.source.dtype_origin


# --- (e): a constant `loss scale: 1.0` alone -----------------------------------------------------


def test_constant_scale_of_one_alone_leaves_the_dtype_unknown_and_says_so(tmp_path: Path) -> None:
    text = "".join(iteration(it, loss=None, grad="nan") for it in range(1, 41))
    result = analyze(write(tmp_path, text))
    assert result.source.dtype is None
    assert answer(result, "Q1.2") == "unknown"
    q31 = next(p for p in result.verdict.path if p.question == "Q3.1")
    assert q31.answer == "unknown" and "dtype unknown" in q31.evidence
    assert "constant at 1" in q31.evidence
    assert not remedy_says(result, "bf16")
    assert ENABLE_DYNAMIC_SCALING not in result.verdict.remediation


def test_constant_scale_of_one_with_healthy_loss_is_not_a_static_scaler(tmp_path: Path) -> None:
    text = "".join(
        iteration(it, loss=healthy_loss(it), grad="nan" if it % 50 == 0 else "0.9")
        for it in range(1, 301)
    )
    result = analyze(write(tmp_path, text))
    assert result.verdict.code != "loss-scale-static"
    assert result.source.dtype is None


# --- (f): --dtype wins over inference ----------------------------------------------------------


def test_dtype_flag_bf16_gives_no_fp16_remedy(tmp_path: Path) -> None:
    text = "".join(iteration(it, loss=None, grad="nan") for it in range(1, 41))
    result = analyze(write(tmp_path, text), options=ReadOptions(dtype="bf16"))
    assert result.source.dtype == "bf16" and result.source.dtype_origin == "--dtype flag"
    assert result.verdict.code == "nan" and result.verdict.cause is None
    assert MOVE_TO_BF16 not in result.verdict.remediation
    assert not remedy_says(result, "bf16") and not remedy_says(result, "dynamic loss scal")


def test_dtype_flag_wins_over_a_moving_scale_and_the_clash_is_said(tmp_path: Path) -> None:
    scales = [65536.0] * 20 + [32768.0] * 20
    text = "".join(
        iteration(it, loss=healthy_loss(it), scale=s) for it, s in enumerate(scales, start=1)
    )
    result = analyze(write(tmp_path, text), options=ReadOptions(dtype="bf16"))
    assert result.source.dtype == "bf16"
    skip = next(s for s in result.skipped if s.code == "loss-scale")
    assert "changed 1 time(s)" in skip.reason


def test_fp16_nan_with_a_working_scaler_is_not_told_to_enable_one(tmp_path: Path) -> None:
    scales = [65536.0] * 60 + [32768.0] * 40
    text = argument_dump(fp16=True, bf16=False) + "".join(
        iteration(it, loss=healthy_loss(it) if it <= 90 else None, scale=s)
        for it, s in enumerate(scales, start=1)
    )
    result = analyze(write(tmp_path, text))
    assert result.verdict.code == "nan" and result.verdict.cause == "activation-overflow"
    assert ENABLE_DYNAMIC_SCALING not in result.verdict.remediation  # the scale moved
    assert MOVE_TO_BF16 in result.verdict.remediation  # fp16 by the argument dump


def test_misspelt_dtype_is_a_one_line_usage_error(cli, tmp_path: Path) -> None:
    path = write(tmp_path, "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 41)))
    result = cli("analyze", path, "--dtype", "fp61")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "fp61" in lines[0]
    assert all(name in lines[0] for name in ("fp32", "fp16", "bf16"))


# --- the one dtype key list --------------------------------------------------------------------


def test_dtype_option_accepts_the_regimes_and_their_spellings() -> None:
    assert dtype_option("bf16") == "bf16"
    assert dtype_option("torch.bfloat16") == "bf16"
    assert dtype_option("16-mixed") == "fp16"
    assert dtype_option("FP32") == "fp32"
    assert dtype_option(None) is None
    with pytest.raises(StabUsageError, match="fp32, fp16, bf16"):
        dtype_option("fp61")


def test_dtype_from_prefers_a_named_setting_and_ignores_what_names_no_regime() -> None:
    found = dtype_from(("cfg", {"torch_dtype": "auto", "bf16": True, "precision": "16-mixed"}))
    assert found == ("fp16", "cfg 'precision'='16-mixed'")
    assert dtype_from(("cfg", {"torch_dtype": "auto"})) is None
    assert dtype_from(("cfg", {"trainer/mixed_precision": {"value": "bf16"}}))[0] == "bf16"
    assert dtype_from(("a", {"fp16": "False"}), ("b", {"bf16": "False"}))[0] == "fp32"
    # for the same name the first table wins
    assert dtype_from(("param", {"dtype": "bf16"}), ("tag", {"dtype": "fp16"}))[0] == "bf16"


def test_manifest_beside_the_log_reads_the_same_key_list(tmp_path: Path) -> None:
    import json

    from stabilitycli.ingest import read

    log = write(tmp_path, "".join(iteration(it, loss=healthy_loss(it)) for it in range(1, 41)))
    manifest = {"torch_dtype": "float32", "precision": "bf16-mixed", "vocab_size": 50257}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    run = read(log)
    assert run.source.dtype == "bf16"  # the mixed-precision setting outranks the weights' dtype
    assert run.source.dtype_origin == "manifest.json 'precision'='bf16-mixed'"
    assert run.source.vocab_size == 50257
