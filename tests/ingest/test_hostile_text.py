"""Damaged and hostile text logs (issue #12): every damaged line counted, never a crash."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import deepspeed, kvlog, llmc, megatron

LOSSES = [2.5, math.nan, math.inf, -math.inf, 2.0, 1.9]


def _megatron_line(iteration: int, loss: float) -> str:
    return (
        f" iteration {iteration:8d}/    1000 | consumed samples: {iteration * 32:12d} | "
        f"elapsed time per iteration (ms): 1234.5 | learning rate: 1.500E-04 | "
        f"global batch size:    32 | lm loss: {loss:.6E} | loss scale: 1.0 | "
        "grad norm: 0.876 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |"
    )


def _megatron(n: int = 6) -> list[str]:
    return [_megatron_line(10 * (i + 1), LOSSES[i % len(LOSSES)]) for i in range(n)]


def _deepspeed(n: int = 6) -> list[str]:
    return [
        f"epoch: 0|step: {i}|ppo_ep: 1|act_loss: {LOSSES[i % len(LOSSES)]}|cri_loss: 0.25|"
        "unsuper_loss: 0.0"
        for i in range(n)
    ]


def _llmc(n: int = 6) -> list[str]:
    return [f"s:{i} trl:{LOSSES[i % len(LOSSES)]} lr:0.0006 norm:1.25" for i in range(n)]


def _kvlog(n: int = 6) -> list[str]:
    return [
        f"iter {10 * i}: loss {LOSSES[i % len(LOSSES)]:.4f}, time 100.00ms, mfu 10.00%"
        for i in range(n)
    ]


READERS = {
    "megatron": (megatron, _megatron, "loss", lambda i: 10 * (i + 1)),
    "deepspeed": (deepspeed, _deepspeed, "loss", lambda i: i),  # PPO `step:` as printed
    "llmc": (llmc, _llmc, "loss", lambda i: i),
    "kvlog": (kvlog, _kvlog, "loss", lambda i: 10 * i),
}


def _write(tmp_path: Path, lines: list[str], name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _accounted(run) -> None:
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten


def _same(actual: float, expected: float) -> bool:
    return (math.isnan(actual) and math.isnan(expected)) or actual == expected


def _check_values(run, column: str, step_of, kept: list[int]) -> None:
    by_step = dict(zip(run.frame["step"].to_list(), run.frame[column].to_list(), strict=True))
    assert sorted(by_step) == sorted(step_of(i) for i in kept)
    for i in kept:
        assert _same(by_step[step_of(i)], LOSSES[i % len(LOSSES)]), i


# --- Megatron: a damaged record line is counted, never dropped as text --------------------


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: line.replace("iteration", "iteraXion", 1),
        lambda line: line.replace("      30/", "    3?0/", 1),
        lambda line: line.replace("|", "#", 1),
    ],
)
def test_a_damaged_megatron_record_is_rejected_with_its_line(tmp_path: Path, damage):
    lines = _megatron()
    lines[2] = damage(lines[2])
    run = megatron.read(_write(tmp_path, ["banner", *lines]), ReadOptions())
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [4]
    assert "iteration N/ T" in run.source.rejections[0].reason
    assert run.source.lines_skipped == 1  # the banner only
    _check_values(run, "loss", lambda i: 10 * (i + 1), [0, 1, 3, 4, 5])


# --- DeepSpeed-Chat: a field given twice on a PPO line --------------------------------------


@pytest.mark.parametrize("field", ["step: 7", "act_loss: 9.0", "_row: 3"])
def test_a_ppo_line_with_a_repeated_field_is_rejected_with_its_reason(tmp_path: Path, field):
    lines = _deepspeed()
    lines[1] = lines[1] + f"|{field}"
    run = deepspeed.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [2]
    assert "given twice" in run.source.rejections[0].reason
    _check_values(run, "loss", lambda i: i, [0, 2, 3, 4, 5])


# --- llm.c: a log of one cut line ------------------------------------------------------------


def test_an_llmc_log_of_one_cut_line_is_an_input_error(tmp_path: Path):
    path = tmp_path / "main.log"
    path.write_bytes(b"s:0 trl:11.01")
    with pytest.raises(StabInputError, match="cut off mid-write"):
        llmc.read(path, ReadOptions())


def test_an_llmc_step_past_int64_is_a_rejected_row(tmp_path: Path):
    lines = _llmc()
    lines[2] = "s:99999999999999999999 trl:2.0"
    run = llmc.read(_write(tmp_path, lines, "main.log"), ReadOptions())
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [3]
    _check_values(run, "loss", lambda i: i, [0, 1, 3, 4, 5])


# --- every text reader: a line over max_line_bytes, non-UTF-8 bytes, NUL ----------------------


@pytest.mark.parametrize("name", list(READERS))
def test_a_line_over_max_line_bytes_is_rejected_and_reading_goes_on(tmp_path: Path, name):
    module, make, column, step_of = READERS[name]
    lines = make()
    lines.insert(3, "x" * 5000)
    run = module.read(_write(tmp_path, lines), ReadOptions(limits=InputLimits(max_line_bytes=1000)))
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [4]
    assert "max_line_bytes" in run.source.rejections[0].reason
    _check_values(run, column, step_of, list(range(6)))


@pytest.mark.parametrize("name", list(READERS))
def test_a_long_last_line_is_one_rejection_not_also_a_cut(tmp_path: Path, name):
    module, make, column, step_of = READERS[name]
    path = tmp_path / "train.log"
    path.write_text("\n".join(make()) + "\n" + "y" * 5000)
    run = module.read(path, ReadOptions(limits=InputLimits(max_line_bytes=1000)))
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [7]
    _check_values(run, column, step_of, list(range(6)))


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("junk", [b"\xff\xfe", b"\x00", b"\xc3"])
def test_bad_bytes_in_a_record_never_crash_and_are_counted(tmp_path: Path, name, junk):
    module, make, column, step_of = READERS[name]
    lines = [line.encode() for line in make()]
    # into the middle of record 3's loss: that record is rejected or read, never lost
    at = lines[2].rfind(b"loss") + 6
    lines[2] = lines[2][:at] + junk + lines[2][at:]
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = module.read(path, ReadOptions())
    _accounted(run)
    by_step = dict(zip(run.frame["step"].to_list(), run.frame[column].to_list(), strict=True))
    rejected = {r.line for r in run.source.rejections}
    # the damaged record: rejected by its line, or kept with its loss unread (a note says so)
    assert rejected <= {3}
    if rejected:
        assert step_of(2) not in by_step
    else:
        damaged = by_step[step_of(2)]
        assert damaged is None or _same(damaged, LOSSES[2])
    for i in (0, 1, 3, 4, 5):
        assert _same(by_step[step_of(i)], LOSSES[i]), i


def test_a_log_over_max_input_bytes_is_refused_with_the_setting(tmp_path: Path):
    path = _write(tmp_path, _llmc(50), "main.log")
    with pytest.raises(StabInputError, match="max_input_bytes"):
        llmc.read(path, ReadOptions(limits=InputLimits(max_input_bytes=100)))


HUGE = "1" * 400  # a damaged line's run of digits: past Int64, i128 and float's exact range


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("megatron", _megatron_line(30, 2.0).replace("      30/", f"{HUGE}/")),
        ("deepspeed", f"[Rank 0] step={HUGE}, skipped=0, lr=[0.0001]"),
        ("deepspeed", f"[Rank 0] step=3, skipped={HUGE}, lr=[0.0001]"),
        ("deepspeed", f"epoch: 0|step: {HUGE}|ppo_ep: 1|act_loss: 1.0|cri_loss: 0.2"),
        ("kvlog", f"iter {HUGE}: loss 2.0000, time 100.00ms, mfu 10.00%"),
    ],
)
def test_a_step_of_hundreds_of_digits_is_a_counted_line_not_an_error(tmp_path, name, line):
    module, make, column, step_of = READERS[name]
    lines = make()
    lines[2] = line
    run = module.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert run.source.rows_rejected >= 1 or run.source.lines_skipped >= 1
    for i in (0, 1, 3, 4, 5):
        by_step = dict(zip(run.frame["step"].to_list(), run.frame[column].to_list(), strict=True))
        assert _same(by_step[step_of(i)], LOSSES[i]), i


def test_a_deepspeed_overflow_message_with_hundreds_of_digits_reads_on(tmp_path: Path):
    lines = [
        "[Rank 0] step=10, skipped=0, lr=[0.0001]",
        f"[deepscale] OVERFLOW! Rank {HUGE} Skipping step. Attempted loss scale: 65536, "
        "reducing to 32768",
        f"Grad overflow on iteration {HUGE}",
        "[Rank 0] step=20, skipped=1, lr=[0.0001]",
    ]
    run = deepspeed.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert run.frame["step"].to_list() == [10, 20]


def test_a_megatron_record_with_a_step_field_is_rejected_not_a_duplicate_column(tmp_path):
    lines = _megatron()
    lines[2] = lines[2].replace("| loss scale:", "| step: 3| loss scale:")
    run = megatron.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [3]
    _check_values(run, "loss", lambda i: 10 * (i + 1), [0, 1, 3, 4, 5])


@pytest.mark.parametrize("key", ["_kind", "_line", "_seg", "_epoch", "_rank"])
def test_a_kvlog_key_named_like_a_reader_column_cannot_hide_its_record(tmp_path, key):
    lines = _kvlog()
    lines[2] += f", {key} 5"
    run = kvlog.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert run.source.lines_skipped == 0
    _check_values(run, "loss", lambda i: 10 * i, list(range(6)))


def test_a_key_named_like_the_familys_name_for_another_key_is_kept(tmp_path: Path):
    # MLX-LM's `Train loss` is read as `loss`; a damaged line's own `loss` key must not clash
    lines = [
        f"Iter {i}: Train loss {2.5 - i / 10:.3f}, Learning Rate 1.000e-05, It/sec 0.512"
        for i in range(1, 7)
    ]
    lines[2] = "Iter 3: Train \ufffdloss 2.428, Learning Rate 1.000e-05, It/sec 0.5"
    run = kvlog.read(_write(tmp_path, lines), ReadOptions())
    _accounted(run)
    assert run.frame["step"].to_list() == [1, 2, 3, 4, 5, 6]
    assert run.frame["loss"].to_list()[:2] == [2.4, 2.3]


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("junk", [b"\x00", b"\x00\x00\x00\x00", b"\xff\xfe"])
def test_a_few_bad_bytes_near_the_top_leave_the_log_recognised(tmp_path: Path, name, junk):
    # one NUL in the first 4 KiB made any text log 'not a log stab reads'
    from stabilitycli.ingest import detect_format, read

    _module, make, _column, step_of = READERS[name]
    lines = [line.encode() for line in make()]
    lines[1] = lines[1][:3] + junk + lines[1][3:]
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert detect_format(path) == name
    run = read(path)
    _accounted(run)
    steps = set(run.frame["step"].to_list())
    assert {step_of(i) for i in (0, 2, 3, 4, 5)} <= steps


def test_a_binary_head_is_still_no_text_log(tmp_path: Path):
    from stabilitycli.ingest.text.textlog import looks_textual

    path = tmp_path / "train.log"
    noise = bytes(range(256)) * 16  # 16 NULs and 2,048 bytes that are not UTF-8
    assert not looks_textual(path, noise)
    assert not looks_textual(path, b"\x1f\x8b\x08\x00" + bytes(200))
