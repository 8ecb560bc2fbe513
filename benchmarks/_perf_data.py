"""Seeded inputs for `benchmarks/run.py`, written once into a cache outside the repo.

Every file is named by the parameters and the seed that made it, and written
under a temporary name then renamed, so an interrupted run never leaves a
half-written input that a later run would take for a finished one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

# HF Trainer's key names for what stab reads, plus `epoch`, which HF logs and
# stab does not use: a reader that projects can skip it
HF_KEYS = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "lr": "learning_rate",
    "loss_scale": "loss_scale",
    "tokens_per_s": "tokens_per_second",
}
UNUSED_KEYS = ("epoch",)
CHUNK_ROWS = 1_000_000  # rows generated and written at a time: bounds the generator's memory
TB_TAGS = ("train/loss", "train/grad_norm")
MLFLOW_KEYS = ("loss", "grad_norm", "learning_rate")


def cached(path: Path, write: Callable[[Path], None]) -> Path:
    """`path`, written by `write(tmp)` first if it is missing."""
    if path.exists():
        return path
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    write(tmp)
    tmp.rename(path)
    return path


def _metric_block(steps: np.ndarray, ranks: int, total_steps: int, rng) -> dict[str, np.ndarray]:
    """Rows for `steps` x `ranks`, step-major (every rank's row for a step, then the next step),
    the order a shared log gets when the ranks append to it."""
    step = np.repeat(steps, ranks)
    rank = np.tile(np.arange(ranks, dtype=np.int64), steps.size)
    n = step.size
    t = step.astype(np.float64)
    loss = 2.2 + 8.6 * (1 + t / 4000.0) ** -0.75 + 0.03 * rng.standard_normal(n)
    spike_step = int(total_steps * 0.6)  # one material spike every rule set should see
    loss[step == spike_step] *= 2.5
    if ranks > 1:  # one rank drifts 50% away from its cohort for the last quarter
        loss[(rank == ranks // 3) & (step >= int(total_steps * 0.75))] *= 1.5
    warmup_steps = max(1, total_steps // 50)
    lr = (
        3e-4
        * np.minimum(1.0, (t + 1) / warmup_steps)
        * (0.55 + 0.45 * np.cos(np.pi * t / total_steps))
    )
    # a dynamic fp16 scaler: halved on an overflow, regrown 1,000 steps later
    loss_scale = np.where((step // 1000) % 2 == 1, 32768.0, 65536.0)
    return {
        "step": step,
        "rank": rank,
        "epoch": np.round(3.0 * t / total_steps, 4),
        "loss": np.round(loss, 5),
        "grad_norm": np.round(0.4 * rng.lognormal(0.0, 0.15, n), 5),
        "learning_rate": lr,
        "loss_scale": loss_scale,
        "tokens_per_second": np.round(12_000.0 * (1 + 0.02 * rng.standard_normal(n)), 1),
    }


def jsonl_log(
    cache: Path, rows: int, ranks: int, seed: int, columns: tuple[str, ...] | None = None
) -> tuple[Path, Path]:
    """A training log of `rows` rows as JSONL and the same rows as Parquet.

    `columns` narrows the metrics written (the `ranks` case logs loss and throughput only)."""
    import polars as pl
    import pyarrow.parquet as pq

    total_steps = rows // ranks
    keep = columns or (*UNUSED_KEYS, *HF_KEYS.values())
    tag = "-".join(k.replace("_", "") for k in keep) if columns else "hf"
    stem = cache / f"train-{rows}rows-{ranks}ranks-{tag}-seed{seed}"
    jsonl, parquet = stem.with_suffix(".jsonl"), stem.with_suffix(".parquet")

    def write_both(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        steps_per_chunk = max(1, CHUNK_ROWS // ranks)
        writer = None
        with open(tmp, "wb") as out:
            for first in range(0, total_steps, steps_per_chunk):
                steps = np.arange(first, min(total_steps, first + steps_per_chunk), dtype=np.int64)
                block = _metric_block(steps, ranks, total_steps, rng)
                names = ["step", *(["rank"] if ranks > 1 else []), *keep]
                frame = pl.DataFrame({name: block[name] for name in names})
                frame.write_ndjson(out)
                table = frame.to_arrow()
                if writer is None:
                    writer = pq.ParquetWriter(
                        parquet.with_name(parquet.name + ".part"), table.schema
                    )
                writer.write_table(table)
        if writer is not None:
            writer.close()
        parquet.with_name(parquet.name + ".part").rename(parquet)

    if not (jsonl.exists() and parquet.exists()):
        jsonl.unlink(missing_ok=True)
        cached(jsonl, write_both)
    return jsonl, parquet


def parquet_log(cache: Path, rows: int, ranks: int, seed: int) -> Path:
    """The rows `jsonl_log` writes, as Parquet only (a 100M-row log's JSONL would be 15 GB
    that no case reads): a row group per million rows, as `jsonl_log` writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    total_steps = rows // ranks
    keep = (*UNUSED_KEYS, *HF_KEYS.values())
    parquet = cache / f"train-{rows}rows-{ranks}ranks-hf-seed{seed}.parquet"

    def write(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        steps_per_chunk = max(1, CHUNK_ROWS // ranks)
        names = ["step", *(["rank"] if ranks > 1 else []), *keep]
        with pq.ParquetWriter(tmp, _schema(names)) as writer:
            for first in range(0, total_steps, steps_per_chunk):
                steps = np.arange(first, min(total_steps, first + steps_per_chunk), dtype=np.int64)
                block = _metric_block(steps, ranks, total_steps, rng)
                writer.write_table(pa.table({name: block[name] for name in names}))

    return cached(parquet, write)


def _schema(names: list[str]):
    """The Arrow schema `jsonl_log`'s frames get: whole numbers Int64, the rest Float64."""
    import pyarrow as pa

    whole = {"step", "rank"}
    return pa.schema([(n, pa.int64() if n in whole else pa.float64()) for n in names])


def _varint_width(values: np.ndarray) -> np.ndarray:
    width = np.ones(values.shape, dtype=np.int64)
    for bits in (7, 14, 21, 28, 35):
        width += values >= (1 << bits)
    return width


def _event_records(steps: np.ndarray, values: np.ndarray, tag: bytes, width: int) -> np.ndarray:
    """TFRecord-framed `Event{wall_time, step, summary{value{tag, simple_value}}}` for steps
    that all take `width` varint bytes, one record per row of the returned uint8 matrix."""
    value_bytes = 2 + len(tag) + 5  # tag (key, length, bytes) + simple_value (key, float32)
    summary_bytes = 2 + value_bytes
    data_bytes = 9 + 1 + width + 2 + summary_bytes
    n = steps.size
    out = np.zeros((n, 12 + data_bytes + 4), dtype=np.uint8)
    out[:, 0:8] = np.frombuffer(np.uint64(data_bytes).tobytes(), dtype=np.uint8)
    at = 12
    out[:, at] = 0x09  # field 1, fixed64: wall_time
    out[:, at + 1 : at + 9] = (1.7e9 + steps * 0.5).astype("<f8").view(np.uint8).reshape(n, 8)
    at += 9
    out[:, at] = 0x10  # field 2, varint: step
    for i in range(width):
        more = 0x80 if i < width - 1 else 0
        out[:, at + 1 + i] = ((steps >> (7 * i)) & 0x7F) | more
    at += 1 + width
    out[:, at : at + 2] = (0x2A, summary_bytes)  # field 5: summary
    out[:, at + 2 : at + 4] = (0x0A, value_bytes)  # Summary.value
    out[:, at + 4 : at + 6] = (0x0A, len(tag))  # Value.tag
    out[:, at + 6 : at + 6 + len(tag)] = np.frombuffer(tag, dtype=np.uint8)
    at += 6 + len(tag)
    out[:, at] = 0x15  # Value.simple_value, fixed32
    out[:, at + 1 : at + 5] = values.astype("<f4").view(np.uint8).reshape(n, 4)
    return out


def _frame_crcs(records: np.ndarray) -> None:
    """Fill each record's two masked CRC-32C fields (the format checks every record)."""
    from google_crc32c import value as crc32c

    from stabilitycli.ingest.tensorboard._tfrecord import _mask

    data_end = records.shape[1] - 4
    header_crc = _mask(crc32c(records[0, :8].tobytes()))  # equal lengths: one header CRC
    records[:, 8:12] = np.frombuffer(np.uint32(header_crc).tobytes(), dtype=np.uint8)
    crcs = np.fromiter(
        (_mask(crc32c(row)) for row in records[:, 12:data_end].copy()),
        dtype=np.uint32,
        count=records.shape[0],
    )
    records[:, data_end:] = crcs.astype("<u4").view(np.uint8).reshape(-1, 4)


def tensorboard_run(cache: Path, points: int, seed: int) -> Path:
    """A run folder with one event file: `points` steps of each tag in TB_TAGS, one event per
    scalar as `SummaryWriter.add_scalar` writes them."""
    folder = cache / f"tensorboard-{points}points-{len(TB_TAGS)}tags-seed{seed}"

    def write(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        tmp.mkdir(parents=True)
        steps = np.arange(points, dtype=np.int64)
        t = steps.astype(np.float64)
        series = {
            TB_TAGS[0]: 2.2 + 8.6 * (1 + t / 4000.0) ** -0.75 + 0.03 * rng.standard_normal(points),
            TB_TAGS[1]: 0.4 * rng.lognormal(0.0, 0.15, points),
        }
        widths = _varint_width(steps)
        with open(tmp / "events.out.tfevents.1700000000.bench", "wb") as out:
            out.write(_file_version_record())
            for width in np.unique(widths):  # steps only grow, so each width is one stretch
                at = np.flatnonzero(widths == width)
                parts = []
                for tag in TB_TAGS:
                    records = _event_records(steps[at], series[tag][at], tag.encode(), int(width))
                    _frame_crcs(records)
                    parts.append(records)
                out.write(np.hstack(parts).tobytes())  # per step: one event per tag

    return cached(folder, write)


def _file_version_record() -> bytes:
    from _series import tfrecord

    from stabilitycli.ingest.tensorboard import _proto as _tbproto

    payload = (
        _tbproto.messages()["Event"](wall_time=1.7e9, file_version="brain.Event:2")
    ).SerializeToString()
    return tfrecord(payload)


def mlflow_store(cache: Path, points: int, seed: int) -> tuple[Path, str]:
    """A file store (`mlruns/`) with one run made by the real client; its metric files then
    rewritten in bulk with `points` lines each, in the client's `"<ms> <value> <step>"` form
    (logging 1M points through the client would take minutes)."""
    root = cache / f"mlflow-{points}points-{len(MLFLOW_KEYS)}keys-seed{seed}"

    def write(tmp: Path) -> None:
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        import polars as pl
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"file://{tmp / 'mlruns'}")
        experiment = client.create_experiment("bench")
        run = client.create_run(experiment, run_name="bench").info.run_id
        client.log_param(run, "precision", "bf16-mixed")
        for key in MLFLOW_KEYS:
            client.log_metric(run, key, 1.0, step=0)
        client.set_terminated(run)
        (tmp / "run_id").write_text(run)
        block = _metric_block(
            np.arange(points, dtype=np.int64), 1, points, np.random.default_rng(seed)
        )
        for key in MLFLOW_KEYS:
            lines = pl.DataFrame(
                {
                    "ms": 1_700_000_000_000 + block["step"],
                    "value": block[key],
                    "step": block["step"],
                }
            )
            lines.write_csv(
                tmp / "mlruns" / experiment / run / "metrics" / key,
                separator=" ",
                include_header=False,
            )

    cached(root, write)
    return root / "mlruns", (root / "run_id").read_text()


def batch_runs(cache: Path, runs: int, steps: int, seed: int) -> Path:
    """`runs` small run directories of `steps` logged steps each, every 20th with a spike."""
    folder = cache / f"batch-{runs}runs-{steps}steps-seed{seed}"

    def write(tmp: Path) -> None:
        import polars as pl

        tmp.mkdir(parents=True)
        rng = np.random.default_rng(seed)
        step = np.arange(steps, dtype=np.int64)
        for i in range(runs):  # one file per run: the loop is over files, not rows
            block = _metric_block(step, 1, steps if i % 20 == 0 else 10 * steps, rng)
            run_dir = tmp / f"run-{i:05d}"
            run_dir.mkdir()
            pl.DataFrame(
                {
                    "step": step,
                    **{key: block[key] for key in ("loss", "grad_norm", "learning_rate")},
                }
            ).write_ndjson(run_dir / "run.jsonl")

    return cached(folder, write)
