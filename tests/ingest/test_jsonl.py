"""The JSONL reader on what training scripts really write."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions


def write(tmp_path, text: str, name: str = "run.jsonl"):
    path = tmp_path / name
    path.write_text(text)
    return path


def values(run, metric: str) -> dict[int, float]:
    frame = run.frame.drop_nulls(metric)
    return dict(zip(frame["step"].to_list(), frame[metric].to_list(), strict=True))


def test_bare_nan_and_infinity_tokens_arrive_exactly(tmp_path) -> None:
    rows = [
        {"step": 0, "loss": 1.5},
        {"step": 1, "loss": float("nan")},
        {"step": 2, "loss": float("inf")},
        {"step": 3, "loss": float("-inf")},
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"  # json.dumps writes NaN / Infinity
    assert "NaN" in text and "-Infinity" in text
    loss = values(read(write(tmp_path, text)), "loss")
    assert loss[0] == 1.5 and math.isnan(loss[1])
    assert loss[2] == math.inf and loss[3] == -math.inf


def test_framework_keys_map_through_the_alias_table(tmp_path) -> None:
    text = (
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "trainer/global_step": 10,
                    "loss_metrics/global_avg_loss": 2.5,
                    "grad_norm": 0.7,
                    "lr/AdamW": 1e-4,
                },
                {
                    "trainer/global_step": 20,
                    "loss_metrics/global_avg_loss": 2.4,
                    "grad_norm": 0.6,
                    "lr/AdamW": 2e-4,
                },
            ]
        )
        + "\n"
    )
    run = read(write(tmp_path, text))
    assert run.source.metrics == {
        "grad_norm": "grad_norm",
        "loss": "loss_metrics/global_avg_loss",
        "lr": "lr/AdamW",
    }
    assert run.frame["step"].to_list() == [10, 20]


@pytest.mark.parametrize(
    "keys",
    [
        ("iteration", "lm loss", "grad norm", "learning rate"),
        ("global_step", "train/loss", "train/grad_norm", "train/lr"),
        ("_step", "train/CE loss", "optim/total grad norm", "optim/LR (group 0)"),
        ("step", "loss/train/total", "l2_norm/grad/global", "lr-AdamW"),
        ("step", "train/CrossEntropyLoss", "optim/total_grad_norm", "optim/learning_rate_group0"),
    ],
)
def test_each_frameworks_key_set(tmp_path, keys) -> None:
    step_key, loss_key, grad_key, lr_key = keys
    text = json.dumps({step_key: 5, loss_key: 2.0, grad_key: 1.0, lr_key: 3e-4}) + "\n"
    run = read(write(tmp_path, text))
    assert run.source.metrics["loss"] == loss_key
    assert run.source.metrics["grad_norm"] == grad_key
    assert run.source.metrics["lr"] == lr_key
    assert run.frame["step"].to_list() == [5]


def test_null_strings_sparse_and_foreign_lines(tmp_path) -> None:
    text = (
        "\n".join(
            [
                json.dumps({"config": {"lr": 3e-4, "layers": 12}, "message": "starting"}),
                json.dumps({"step": 0, "loss": "2.50", "lr": None}),
                json.dumps({"event": "checkpoint saved", "path": "/ckpt/0"}),
                json.dumps({"step": 1, "loss": 2.4}),
                json.dumps({"step": 1, "eval_loss": 2.6}),
                json.dumps({"step": 2, "loss": "NaN"}),
            ]
        )
        + "\n"
    )
    run = read(write(tmp_path, text))
    loss = values(run, "loss")
    assert loss[0] == 2.5 and loss[1] == 2.4 and math.isnan(loss[2])
    assert values(run, "eval_loss") == {1: 2.6}
    assert run.source.rows_read == 6
    assert run.source.rows_rejected == 2  # the config dump and the checkpoint message
    assert run.source.rows_used == 4
    assert {r.line for r in run.source.rejections} == {1, 3}


def test_cut_off_last_line_is_a_warning_not_an_error(tmp_path) -> None:
    text = (
        "".join(json.dumps({"step": i, "loss": 2.0}) + "\n" for i in range(5)) + '{"step": 5, "lo'
    )
    run = read(write(tmp_path, text))
    assert run.frame.height == 5
    assert any("line 6" in w and "cut off" in w for w in run.source.warnings)
    assert run.source.rows_read == 6 and run.source.rows_rejected == 1


def test_malformed_lines_are_counted_with_line_numbers(tmp_path) -> None:
    lines = [json.dumps({"step": i, "loss": 2.0}) for i in range(10)]
    lines[3] = "{broken"
    lines[7] = "[1, 2, 3]"
    run = read(write(tmp_path, "\n".join(lines) + "\n"))
    assert run.frame.height == 8
    assert [r.line for r in run.source.rejections] == [4, 8]
    assert run.source.rows_read == 10 and run.source.rows_used == 8


def test_nothing_usable_is_an_input_error(tmp_path) -> None:
    with pytest.raises(StabInputError, match=r"bad\.jsonl"):
        read(write(tmp_path, "{oops\nnot json either\n", name="bad.jsonl"))
    with pytest.raises(StabInputError, match="no usable metric rows"):
        read(write(tmp_path, json.dumps({"message": "hello"}) + "\n", name="text.jsonl"))
    with pytest.raises(StabInputError, match="empty"):
        read(write(tmp_path, "", name="empty.jsonl"))


def test_gzip_and_zstd_by_magic_bytes(tmp_path) -> None:
    import pyarrow as pa

    text = "".join(
        json.dumps({"step": i, "loss": float("nan") if i == 2 else 1.0}) + "\n" for i in range(4)
    )
    gz = tmp_path / "run.log"  # no telling extension: the magic bytes decide
    with gzip.open(gz, "wt") as handle:
        handle.write(text)
    zst = tmp_path / "run.jsonl.zst"
    with pa.CompressedOutputStream(str(zst), "zstd") as handle:
        handle.write(text.encode())
    for path in (gz, zst):
        run = read(path, ReadOptions(format_in="jsonl"))
        loss = values(run, "loss")
        assert len(loss) == 4 and math.isnan(loss[2])


def test_resume_from_checkpoint_the_resumed_trajectory_wins(tmp_path) -> None:
    rows = [{"step": s, "loss": 3.0} for s in range(6)] + [
        {"step": s, "loss": 2.0} for s in range(3, 8)
    ]
    run = read(write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n"))
    loss = values(run, "loss")
    assert [loss[s] for s in range(8)] == [3.0, 3.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    (restart,) = run.source.restarts
    assert (restart.at_row, restart.resumed_from_step, restart.last_step_before) == (7, 3, 5)
    assert run.abandoned["step"].to_list() == [3, 4, 5]
    # the first attempt's steps 3-5 were rewritten by the resume: set aside, not rejected
    assert run.source.rows_rejected == 0 and run.source.rows_rewritten == 3
    assert run.source.rows_read == (
        run.source.rows_used + run.source.rows_rejected + run.source.rows_rewritten
    )


def test_rank_field_in_one_file(tmp_path) -> None:
    rows = [{"step": s, "rank": r, "loss": 2.0 + r} for s in range(3) for r in range(4)]
    run = read(write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n"))
    assert run.has_ranks and run.source.ranks == 4
    assert run.frame.filter(run.frame["rank"] == 3)["loss"].to_list() == [5.0, 5.0, 5.0]


def test_metric_override_must_exist(tmp_path) -> None:
    path = write(tmp_path, json.dumps({"step": 1, "obj": 2.0}) + "\n")
    run = read(path, ReadOptions(metric_overrides={"loss": "obj"}))
    assert run.source.metrics["loss"] == "obj"
    with pytest.raises(StabUsageError, match="nothere"):
        read(path, ReadOptions(metric_overrides={"loss": "nothere"}))


def test_a_non_utf8_byte_rejects_its_line_only(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    good = [json.dumps({"step": i, "loss": 2.0 + 0.001 * i}).encode() for i in range(200)]
    good[57] = b'{"step": 57, "loss": 2.0\xff5}'
    path.write_bytes(b"\n".join(good) + b"\n")
    run = read(path)
    src = run.source
    assert src.rows_rejected == 1 and src.rows_used == 199
    assert src.rejections[0].line == 58 and "not UTF-8" in src.rejections[0].reason
