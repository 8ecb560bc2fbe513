"""The floors and format clients `benchmarks/run.py` times stab against, one per process.

    python benchmarks/_perf_floors.py KIND PATH [ARG...]

Each kind does only the reading a tool cannot avoid (or what a format's own
client does), then prints one JSON line: the rows it got and, for polars
frames, their Arrow size (`estimated_size()`), which the memory target is
measured against.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path


def read_ndjson(path: str) -> dict:
    import polars as pl

    frame = pl.read_ndjson(path)
    return {"rows": frame.height, "arrow_bytes": frame.estimated_size()}


def scan_ndjson(path: str, *columns: str) -> dict:
    """The projection floor: only the columns stab's rules read."""
    import polars as pl

    frame = pl.scan_ndjson(path).select(list(columns)).collect()
    return {"rows": frame.height, "arrow_bytes": frame.estimated_size()}


def read_parquet(path: str) -> dict:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {"rows": table.num_rows, "arrow_bytes": table.nbytes}


def tb_walk(folder: str) -> dict:
    """TFRecord framing plus one protobuf parse per event (stab's own Event message), no CRC
    check: the least a reader of the event file can do."""
    from stabilitycli.ingest.tensorboard._proto import messages

    event_cls = messages()["Event"]
    points = 0
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        data = memoryview(path.read_bytes())
        at, end = 0, len(data)
        while at + 12 <= end:  # the format is a chain of length-prefixed records
            (length,) = struct.unpack_from("<Q", data, at)
            event = event_cls.FromString(data[at + 12 : at + 12 + length])
            points += len(event.summary.value)
            at += 12 + length + 4
    return {"rows": points}


def tbparse_scalars(folder: str) -> dict:
    from tbparse import SummaryReader

    return {"rows": len(SummaryReader(folder).scalars)}


def mlflow_files(root: str) -> dict:
    """Every metric file of every run parsed by polars' CSV reader: `<ms> <value> <step>` lines."""
    import polars as pl

    files = sorted(p for p in Path(root).glob("*/*/metrics/**/*") if p.is_file())
    rows = sum(
        pl.read_csv(p, separator=" ", has_header=False, new_columns=["ms", "value", "step"]).height
        for p in files
    )
    return {"rows": rows}


def mlflow_client(root: str, run_id: str, *keys: str) -> dict:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file://{root}")
    return {"rows": sum(len(client.get_metric_history(run_id, key)) for key in keys)}


KINDS = {
    "read_ndjson": read_ndjson,
    "scan_ndjson": scan_ndjson,
    "read_parquet": read_parquet,
    "tb_walk": tb_walk,
    "tbparse": tbparse_scalars,
    "mlflow_files": mlflow_files,
    "mlflow_client": mlflow_client,
}


if __name__ == "__main__":
    print(json.dumps(KINDS[sys.argv[1]](*sys.argv[2:])))
