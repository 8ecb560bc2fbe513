"""One training run written in every format gives the same verdict, cause and key steps.

The run is a committed synthetic fixture (a long-tail spike at step 900, its
grad norm x60 one step before). Each writer below produces the layout the real
tool writes (field names, number formatting); the verdict must not depend on
which one the run came through.
"""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from stabilitycli import analyze, read
from tests.conftest import run_fixture
from tests.ingest._synthetic_run import write_events

SPIKE = "spike-long-tail"


@pytest.fixture(scope="module")
def truth() -> pl.DataFrame:
    return read(run_fixture(SPIKE)).frame.select("step", "loss", "grad_norm", "lr")


def write_csv(frame, folder):
    path = folder / "metrics.csv"
    frame.write_csv(path)
    return path


def write_parquet(frame, folder):
    path = folder / "metrics.parquet"
    frame.write_parquet(path)
    return path


def write_arrow(frame, folder):
    path = folder / "metrics.arrow"
    frame.write_ipc(path)
    return path


def write_llmc(frame, folder):
    path = folder / "main.log"
    lines = [
        f"s:{s} trl:{loss:.6f} lr:{lr:.6e} norm:{g:.4f}" for s, loss, g, lr in frame.iter_rows()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_megatron(frame, folder):
    path = folder / "slurm-1234.out"
    total = frame["step"].max()
    lines = [
        "using world size: 8, data-parallel size: 8",
        "  fp16 ............................................ False",
    ]
    for s, loss, g, lr in frame.iter_rows():
        lines.append(
            f"[default0]: iteration {s:8d}/{total:8d} | consumed samples: {s * 512:12d} | "
            f"elapsed time per iteration (ms): 1234.5 | learning rate: {lr:.6E} | "
            "global batch size:   512 | "
            f"lm loss: {loss:.6E} | grad norm: {g:.3f} | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_hf(frame, folder):
    history = [
        {"epoch": s / 1000, "grad_norm": g, "learning_rate": lr, "loss": loss, "step": s}
        for s, loss, g, lr in frame.iter_rows()
    ]
    state = {"global_step": int(frame["step"].max()), "logging_steps": 1, "log_history": history}
    path = folder / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2, sort_keys=True))
    return path


def write_lightning(frame, folder):
    version = folder / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    out = frame.select(
        pl.lit(0).alias("epoch"),
        pl.col("grad_norm"),
        pl.col("lr").alias("lr-AdamW"),
        pl.col("step"),
        pl.col("loss").alias("train_loss_step"),
    )
    out.write_csv(version / "metrics.csv")
    return folder / "lightning_logs"


def write_tensorboard(frame, folder):
    run = {
        "step": frame["step"].to_list(),
        "train/loss": frame["loss"].to_list(),
        "train/grad_norm": frame["grad_norm"].to_list(),
        "train/lr": frame["lr"].to_list(),
    }
    write_events(folder / "tb" / "events.out.tfevents.1700000000.host", run, "tf2")
    return folder / "tb"


def write_torchtitan(frame, folder):
    # torchtitan's colour-coded `step: N  loss: X  grad_norm: G ...` line (no lr in it)
    path = folder / "torchtitan.log"
    lines = [
        f"[rank0]:[titan] 2025-01-10 12:00:00,123 - root - INFO - \033[31mstep: {s:2}  "
        f"\033[32mloss: {loss:7.4f}  \033[33mgrad_norm: {g:7.4f}  \033[36mmemory: 61.32GiB(64.56%)"
        f"  \033[34mtps: 7,023  \033[35mmfu: 38.51%\033[39m"
        for s, loss, g, _lr in frame.iter_rows()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_kv(frame, folder):
    # a hand-rolled `print(f"step={step} loss={loss} ...")`, with a banner before it
    path = folder / "train.out"
    lines = ["starting training on 8 GPUs"] + [
        f"step={s} loss={loss:.6f} grad_norm={g:.4f} lr={lr:.6e}"
        for s, loss, g, lr in frame.iter_rows()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_hf_stdout(frame, folder):
    # Hugging Face Trainer stdout: tqdm bars, `str(logs)` dict lines (loss rounded to 4 places)
    path = folder / "hf_stdout.log"
    total = frame["step"].max()
    lines = []
    for s, loss, g, lr in frame.iter_rows():
        lines.append(f" 10%|#         | {s}/{total} [00:10<01:30,  1.02s/it]")
        lines.append(
            str({"loss": round(loss, 4), "grad_norm": g, "learning_rate": lr, "epoch": 0.1})
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def write_fairseq_json(frame, folder):
    # fairseq --log-format json: numbers as "{:g}" strings, the step in num_updates
    path = folder / "fairseq.log"
    lines = [
        "2021-03-01 10:00:00 | INFO | train_inner | "
        + json.dumps(
            {
                "epoch": 1,
                "loss": f"{loss:g}",
                "gnorm": f"{g:g}",
                "lr": f"{lr:g}",
                "num_updates": str(s),
            }
        )
        for s, loss, g, lr in frame.iter_rows()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


WRITERS = [
    write_csv,
    write_parquet,
    write_arrow,
    write_llmc,
    write_megatron,
    write_hf,
    write_lightning,
    write_tensorboard,
    write_torchtitan,
    write_kv,
    write_hf_stdout,
    write_fairseq_json,
]
# the loss as the writer prints it: HF rounds it to 4 places, torchtitan prints 4 decimals
LOSS_TOLERANCE = {"write_hf_stdout": 1e-4, "write_torchtitan": 1e-4}


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__name__.removeprefix("write_"))
def test_same_verdict_in_every_format(writer, truth, tmp_path) -> None:
    reference = analyze(run_fixture(SPIKE))
    path = writer(truth, tmp_path)
    result = analyze(path)
    assert result.source.format != "jsonl"
    assert result.verdict.code == reference.verdict.code == "spike-recoverable"
    assert result.verdict.cause == reference.verdict.cause == "long-tail-token"
    spikes = [f.step for f in result.findings if f.code == "spike"]
    assert spikes == [f.step for f in reference.findings if f.code == "spike"] == [900]
    frame = read(path).frame
    assert frame.height == truth.height
    assert math.isclose(
        frame.filter(pl.col("step") == 900)["loss"][0],
        truth["loss"][900],
        rel_tol=LOSS_TOLERANCE.get(writer.__name__, 1e-5),
    )
