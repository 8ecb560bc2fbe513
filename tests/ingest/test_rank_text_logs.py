"""Per-rank stdout captures of any text family, sniffed and read as each file alone would be (#39).

`torchrun --tee` or a launcher that redirects each process leaves `rank_0.log ... rank_N.log`;
what each holds is whatever the training script prints. Each rank's file must go through the same
sniffing (and the same fallback when the family that claimed it finds no loss) as
`stab analyze rank_0.log` does, or the folder is refused as "4 logs in this folder".
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from stabilitycli import ingest
from stabilitycli import ranks as rank_report


def _loss(step: int, rank: int, bad_rank: int | None, from_step: int) -> float:
    loss = 2.0 + 2.0 * math.exp(-step / 500) + 0.01 * math.sin(step * 0.7 + rank)
    if rank == bad_rank and step >= from_step:
        loss += 1.5
    return loss


def _nanogpt_folder(folder: Path, bad_rank: int | None = 2) -> Path:
    """nanoGPT's train.py prints `iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms,
    mfu {running_mfu*100:.2f}%` every log_interval; one file per rank."""
    folder.mkdir()
    for rank in range(4):
        lines = [
            f"iter {i}: loss {_loss(i, rank, bad_rank, 1500):.4f}, time 101.25ms, mfu 10.42%\n"
            for i in range(0, 2000, 10)
        ]
        (folder / f"rank_{rank}.log").write_text("".join(lines))
    return folder


def test_per_rank_nanogpt_stdout_is_a_per_rank_run_and_the_bad_rank_is_found(tmp_path: Path):
    folder = _nanogpt_folder(tmp_path / "nano")
    run = ingest.read(folder)
    assert run.source.format == "rank_dir" and run.source.ranks == 4
    assert run.frame.height == 800 and run.source.rows_rejected == 0
    assert any("4 per-rank kvlog file(s)" in note for note in run.source.notes)
    one = ingest.read(folder / "rank_2.log")  # the same file read alone
    alone = one.frame["loss"].to_list()
    assert run.frame.filter(pl.col("rank") == 2)["loss"].to_list() == alone
    report = rank_report(str(folder))
    outliers = {(o.rank, o.onset_step) for o in report.outliers}
    assert outliers == {(2, 1500)}


def test_per_rank_trainer_dicts_are_read_by_the_dict_family(tmp_path: Path):
    """`grep "{'loss'" train.log` per rank: the HF Trainer's printed log dicts."""
    folder = tmp_path / "hf"
    folder.mkdir()
    for rank in range(2):
        lines = [
            str(
                {
                    "loss": round(_loss(i, rank, None, 0), 4),
                    "grad_norm": 0.81,
                    "learning_rate": 1e-4,
                    "epoch": round(i / 100, 2),
                }
            )
            + "\n"
            for i in range(1, 120)
        ]
        (folder / f"rank_{rank}.log").write_text("".join(lines))
    run = ingest.read(folder)
    assert run.source.ranks == 2 and run.frame.height == 238
    assert "grad_norm" in run.frame.columns
    assert any("per-rank dictlog file(s)" in note for note in run.source.notes)


def test_a_rank_file_its_claimer_cannot_read_falls_back_as_the_file_alone_does(tmp_path: Path):
    """A nanoGPT-style loop under a DeepSpeed engine: the engine's `step=N, skipped=K` lines
    make deepspeed claim each file, and it finds no loss; kvlog finds it, per rank as alone."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    engine = (
        "[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={i}, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]\n"
    )
    for rank in range(3):
        text = ""
        for i in range(1, 200):
            if i % 10 == 0:
                text += engine.format(i=i)
            text += f"step {i} | loss {_loss(i, rank, None, 0):.4f} | lr 1.0e-04\n"
        (folder / f"rank_{rank}.log").write_text(text)
    alone = ingest.read(folder / "rank_1.log")
    assert alone.source.format == "kvlog"
    run = ingest.read(folder)
    assert run.source.ranks == 3 and "loss" in run.frame.columns
    assert run.frame.filter(pl.col("rank") == 1)["loss"].to_list() == alone.frame["loss"].to_list()
    assert any("deepspeed claimed the log first" in note for note in run.source.notes)
    assert any("per-rank kvlog file(s)" in note for note in run.source.notes)


def test_nan_in_one_rank_stdout_is_kept_exactly(tmp_path: Path):
    folder = _nanogpt_folder(tmp_path / "nan", bad_rank=None)
    path = folder / "rank_3.log"
    lines = path.read_text().splitlines(keepends=True)
    lines[50] = "iter 500: loss nan, time 101.25ms, mfu 10.42%\n"
    lines[51] = "iter 510: loss inf, time 101.25ms, mfu 10.42%\n"
    path.write_text("".join(lines))
    rank3 = ingest.read(folder).frame.filter(pl.col("rank") == 3)
    at = dict(zip(rank3["step"].to_list(), rank3["loss"].to_list(), strict=True))
    assert math.isnan(at[500]) and at[510] == math.inf


def test_a_side_text_file_beside_rank_logs_is_not_a_rank(tmp_path: Path):
    folder = _nanogpt_folder(tmp_path / "side", bad_rank=None)
    (folder / "notes.log").write_text("launched with 4 GPUs\nall good\n")
    run = ingest.read(folder)
    assert run.source.ranks == 4
