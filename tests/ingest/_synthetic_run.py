"""One synthetic training run, and writers that log it the way real tools do.

Every value is rounded to float32 first: TensorBoard stores scalars as
float32, so only float32-exact numbers can come back identical from every
format (JSONL, MLflow file/sqlite/server, TensorBoard).

Writers that need a third-party package import it inside the function, so
this module imports without mlflow or tensorboardX.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

STEPS = 60
KEYS = ("train/loss", "train/grad_norm", "train/lr")
CANONICAL = {"train/loss": "loss", "train/grad_norm": "grad_norm", "train/lr": "lr"}


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def training_run(
    spike_at: int | None = 30,
    nonfinite_at: int | None = None,
    steps: int = STEPS,
    seed: float = 0.0,
) -> dict[str, list]:
    """`{"step": [...], key: [...]}`; a loss/grad-norm spike and NaN/+Inf/-Inf where asked.

    With `nonfinite_at=k`: loss NaN at k, loss +Inf at k+1, grad_norm -Inf at
    k+2, grad_norm NaN at k. Everything else is finite.
    """
    run: dict[str, list] = {"step": list(range(steps))}
    loss, grad, lr = [], [], []
    for step in range(steps):
        wiggle = 0.05 * math.sin(1.7 * step + seed)
        loss.append(f32(1.5 + 2.5 * math.exp(-step / 25.0) + wiggle))
        grad.append(f32(0.9 + 0.2 * math.cos(0.9 * step + seed)))
        lr.append(f32(3e-4 * min(1.0, (step + 1) / 10.0)))
    if spike_at is not None:
        loss[spike_at] = f32(9.5)
        grad[spike_at - 1] = f32(45.25)
        grad[spike_at] = f32(60.5)
    if nonfinite_at is not None:
        loss[nonfinite_at] = math.nan
        grad[nonfinite_at] = math.nan
        loss[nonfinite_at + 1] = math.inf
        grad[nonfinite_at + 2] = -math.inf
    run["train/loss"], run["train/grad_norm"], run["train/lr"] = loss, grad, lr
    return run


def rows(run: dict[str, list]):
    for i, step in enumerate(run["step"]):
        yield step, {key: run[key][i] for key in KEYS}


# --- writers -------------------------------------------------------------------------


def write_jsonl(run: dict[str, list], path: Path) -> Path:
    """json.dumps lines, as a training script writes them (bare NaN/Infinity tokens)."""
    with open(path, "w") as handle:
        for step, values in rows(run):
            record = {"step": step, **{CANONICAL[k]: v for k, v in values.items()}}
            handle.write(json.dumps(record) + "\n")
    return path


def log_mlflow(
    run: dict[str, list],
    tracking_uri: str,
    *,
    experiment: str,
    run_name: str,
    params: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
) -> str:
    """Log the run with the real MLflow client, one `log_batch` per step; returns the run id."""
    if tracking_uri.startswith(("file:", "/")):
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = (
            "true"  # MLflow >= 3.13 refuses file stores otherwise
        )
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    created = client.create_run(experiment_id, run_name=run_name, tags=tags or {})
    run_id = created.info.run_id
    if params:
        client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
    timestamp_ms = 1_700_000_000_000
    for step, values in rows(run):
        metrics = [Metric(k, v, timestamp_ms + step, step) for k, v in values.items()]
        client.log_batch(run_id, metrics=metrics)
    client.set_terminated(run_id)
    return run_id


def write_tensorboardx(run: dict[str, list], logdir: Path, hparams: dict | None = None) -> Path:
    """Log the run with tensorboardX's SummaryWriter.add_scalar (simple_value, float32)."""
    import logging

    from tensorboardX import SummaryWriter

    logging.getLogger("tensorboardX").setLevel(logging.ERROR)  # it logs each NaN it sees
    writer = SummaryWriter(str(logdir))
    if hparams:
        from tensorboardX.summary import hparams as hparams_summary

        for summary in hparams_summary(hparams, {}):
            writer.file_writer.add_summary(summary)
    for step, values in rows(run):
        for key, value in values.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return logdir


# --- a TFRecord event writer, for encodings no installed writer produces ------------


def _frame(payload: bytes) -> bytes:
    from stabilitycli.ingest.tensorboard._tfrecord import masked_crc

    header = struct.pack("<Q", len(payload))
    return (
        header
        + struct.pack("<I", masked_crc(header))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )


def event_bytes(run: dict[str, list] | None, encoding: str = "tf2") -> bytes:
    """An event file holding `run` in one scalar encoding.

    * "simple": Summary.Value.simple_value (tensorboardX, torch);
    * "float_val" / "double_val": a scalar tensor with a typed value list,
      plugin "scalars" (torch `add_scalar(new_style=True)`);
    * "tf2": TF2 `tf.summary.scalar`: DT_FLOAT, shape [], 4 raw little-endian
      bytes in `tensor_content`; the plugin metadata only on a tag's first event;
    * "tf2_double": the same with DT_DOUBLE and 8 bytes.
    `run=None` gives a file with only the `file_version` header event.
    """
    from stabilitycli.ingest.tensorboard import _proto as tbp

    event_cls = tbp.messages()["Event"]
    out = [_frame(event_cls(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())]
    if run is None:
        return b"".join(out)
    described: set[str] = set()
    for step, values in rows(run):
        for key, value in values.items():
            event = event_cls(wall_time=1.7e9 + step, step=step)
            item = event.summary.value.add(tag=key)
            if encoding == "simple":
                item.simple_value = value
            else:
                tensor = item.tensor
                if encoding == "float_val":
                    tensor.dtype, tensor.float_val[:] = tbp.DT_FLOAT, [value]
                elif encoding == "double_val":
                    tensor.dtype, tensor.double_val[:] = tbp.DT_DOUBLE, [value]
                elif encoding == "tf2":
                    tensor.dtype, tensor.tensor_content = tbp.DT_FLOAT, struct.pack("<f", value)
                elif encoding == "tf2_double":
                    tensor.dtype, tensor.tensor_content = tbp.DT_DOUBLE, struct.pack("<d", value)
                else:
                    raise ValueError(encoding)
                tensor.tensor_shape.SetInParent()  # shape [] : present, no dims
                if encoding.startswith("tf2") and key in described:
                    pass  # TF2 writes the metadata once per tag
                else:
                    item.metadata.plugin_data.plugin_name = "scalars"
                    described.add(key)
            out.append(_frame(event.SerializeToString()))
    return b"".join(out)


def write_events(path: Path, run: dict[str, list] | None, encoding: str = "tf2") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(event_bytes(run, encoding))
    return path


def assert_same_values(actual: list[float], expected: list[float]) -> None:
    """Equal point by point, NaN equal to NaN (the readers must keep it exactly)."""
    assert len(actual) == len(expected)
    for step, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if math.isnan(e):
            assert math.isnan(a), f"step {step}: {a} is not NaN"
        else:
            assert a == e, f"step {step}: {a} != {e}"
