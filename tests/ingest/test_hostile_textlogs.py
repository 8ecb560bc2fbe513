"""Trainer stdout dict lines and Lightning hparams.yaml on damaged input (issue #12)."""

from __future__ import annotations

import pytest

from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions
from tests.ingest.test_hostile_json import check_exact, loss_at, same

# --- trainer stdout dict lines (dictlog) ------------------------------------------------


def _hf_stdout(n: int = 40) -> list[bytes]:
    lines = []
    for s in range(1, n + 1):
        lines.append(b"%d/%d [00:01<00:10, 1.00it/s]" % (s, n))
        value = {1.5: b"1.5", 2.0: b"2.0"}.get(loss_at(s), repr(loss_at(s)).encode())
        lines.append(b"{'loss': %s, 'grad_norm': 1.0, 'epoch': %.2f}" % (value, s / n))
    return lines


@pytest.mark.parametrize(
    "bad",
    [
        b"{'loss': 2.0\xff, 'grad_norm': 1.0, 'epoch': 0.5}",
        b"{'loss': 2.0, 'grad\x00_norm': 1.0, 'epoch': 0.5}",
        b"{'loss': 2.0, 'grad_norm': 1.0, 'epoch': 0.5, 'x': '" + b"a" * 5000 + b"'}",
    ],
    ids=["non-UTF-8", "NUL", "giant"],
)
def test_dictlog_damaged_dict_line_is_rejected(tmp_path, monkeypatch, bad) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_LINE_BYTES", "4096")
    lines = _hf_stdout()
    lines[21] = bad  # the dict after bar 11
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path, ReadOptions(format_in="dictlog"))
    src = run.source
    assert src.rows_rejected == 1 and src.rejections[0].line == 22
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten
    steps = run.frame["step"].to_list()
    assert 11 not in steps and len(steps) == 39
    for step, value in zip(steps, run.frame["loss"].to_list(), strict=True):
        assert same(value, loss_at(step))


# --- Lightning hparams.yaml ------------------------------------------------------------------


def test_lightning_giant_hparams_is_read_only_as_far_as_a_line_may_go(tmp_path, monkeypatch):
    monkeypatch.setenv("STAB_LIMIT_MAX_LINE_BYTES", "4096")
    version = tmp_path / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    rows = ["step,train_loss_step"] + [f"{s},{loss_at(s)}".replace("nan", "nan") for s in range(60)]
    (version / "metrics.csv").write_text("\n".join(rows) + "\n")
    (version / "hparams.yaml").write_bytes(
        b"precision: bf16-mixed\nnotes: "
        + b"[" * 100_000
        + b"\xff\x00" * 10_000
        + b"\nbf16: false\n"
    )
    run = read(version)
    assert run.source.dtype == "bf16"  # from the first line; the rest is never read
    check_exact(run, set())


def test_dictlog_file_over_max_input_bytes_is_refused(tmp_path, monkeypatch) -> None:
    from stabilitycli.core.errors import StabInputError

    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", "1000")
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(_hf_stdout()) + b"\n")
    with pytest.raises(StabInputError, match="max_input_bytes"):
        read(path, ReadOptions(format_in="dictlog"))


def test_dictlog_progress_count_past_int64_is_no_error(tmp_path) -> None:
    lines = _hf_stdout()
    lines[20] = b"9223372036854775808/40 [00:01<00:10, 1.00it/s]"  # a damaged digit run
    lines[21] = b"{'loss': 2.0, 'grad_norm': 1.0, 'step': 99999999999999999999999}"
    path = tmp_path / "train.log"
    path.write_bytes(b"\n".join(lines) + b"\n")
    src = read(path, ReadOptions(format_in="dictlog")).source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten
    assert src.rows_rejected == 1 and src.rejections[0].line == 22


@pytest.mark.parametrize("count", ["1" * 400, "٣"])
def test_a_lightning_bar_with_a_damaged_count_is_no_step_not_a_crash(tmp_path, count):
    """A fuzzed Lightning progress bar whose batch count was 400 digits long made a step
    polars cannot hold (OverflowError: the whole log rejected); `\\d` also took other
    scripts' digits. Such a draw is not read as a bar; the other draws are."""
    draws = [
        f"Epoch 0:  50%|#####     | {done}/30 [00:00<00:00, 300.00it/s, v_num=0, "
        f"train_loss={2.0 + done / 100:.3f}]"
        for done in range(1, 31)
    ]
    draws[10] = draws[10].replace("11/30", f"{count}/30")
    path = tmp_path / "lightning.log"
    path.write_text("\r".join(draws) + "\n")
    run = read(str(path), ReadOptions(format_in="kvlog"))
    steps = run.frame["step"].to_list()
    assert 10 not in steps and len(steps) >= 28
    assert max(steps) == 29


def test_a_launcher_rank_tag_of_thousands_of_digits_is_no_rank(tmp_path):
    """`[default<digits>]:` in front of a line names its rank; a damaged tag of 5,000 digits
    made int() raise (or polars fail on the value) and rejected the whole log."""
    lines = [f"[default0]: step {s} loss {2.0 + s / 100:.3f}" for s in range(1, 41)]
    lines[5] = lines[5].replace("[default0]", "[default" + "7" * 5000 + "]")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    run = read(str(path), ReadOptions(format_in="kvlog"))
    assert run.frame.height >= 39
    assert run.frame["loss"].drop_nulls().len() >= 39
