"""Regenerate fixtures/mlflow and fixtures/tensorboard with the real writers.

    /tmp/venv/bin/python tests/ingest/make_mlflow_tb_fixtures.py

Needs mlflow (client + sqlite store) and tensorboardX. The tests read the
committed output without either package and compare it with
`_synthetic_run.training_run(...)`, so the arguments below are the contract:

* MLflow (file store `mlruns/` and sqlite `mlflow.db`, same content):
  - experiment "stab-fixtures": run "spike" (spike_at=30, param precision=bf16-mixed)
    and run "nan" (spike_at=None, nonfinite_at=40, params fp16=True, bf16=False);
  - experiment "stab-ranks": four runs, one per rank, rank 2 with nonfinite_at=20
    (file store: named rank-0..rank-3; sqlite: named w0..w3 with a `rank` tag);
  - experiment "stab-empty": run "empty" with a param and no metric.
* TensorBoard (tensorboardX unless said otherwise):
  spike/ (spike_at=30, hparams precision=fp16), nan/ (nonfinite_at=40),
  ranks/rank_0..rank_3/ (rank 2 nonfinite_at=20), tf2/ (own writer, TF2
  tensor_content encoding, spike_at=30), empty/ (only the file_version event).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic_run import (  # noqa: E402 (importable only after the sys.path line above)
    log_mlflow,
    training_run,
    write_events,
    write_tensorboardx,
)

ROOT = HERE.parent.parent / "fixtures"


def make_mlflow() -> None:
    out = ROOT / "mlflow"
    shutil.rmtree(out / "mlruns", ignore_errors=True)
    (out / "mlflow.db").unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    stores = {"file": f"file://{out / 'mlruns'}", "sqlite": f"sqlite:///{out / 'mlflow.db'}"}
    # a sqlite store puts artifact folders under ./mlruns of the working directory: keep
    # them out of the repository
    os.chdir(tempfile.mkdtemp(prefix="stab-fixture-artifacts-"))
    for kind, uri in stores.items():
        log_mlflow(
            training_run(spike_at=30),
            uri,
            experiment="stab-fixtures",
            run_name="spike",
            params={"precision": "bf16-mixed"},
        )
        log_mlflow(
            training_run(spike_at=None, nonfinite_at=40),
            uri,
            experiment="stab-fixtures",
            run_name="nan",
            params={"fp16": "True", "bf16": "False"},
        )
        for rank in range(4):
            run = training_run(spike_at=None, nonfinite_at=20 if rank == 2 else None, seed=rank)
            if kind == "file":
                log_mlflow(run, uri, experiment="stab-ranks", run_name=f"rank-{rank}")
            else:
                log_mlflow(
                    run, uri, experiment="stab-ranks", run_name=f"w{rank}", tags={"rank": str(rank)}
                )
        log_mlflow(
            {"step": []}, uri, experiment="stab-empty", run_name="empty", params={"precision": "32"}
        )
    _trim_sqlite(out / "mlflow.db")


# tables the reader uses, plus alembic_version (the schema revision) and latest_metrics
KEEP_TABLES = {
    "alembic_version",
    "experiments",
    "runs",
    "metrics",
    "latest_metrics",
    "params",
    "tags",
}


def _trim_sqlite(path: Path) -> None:
    """Drop the ~60 tables the reader never touches (traces, models, prompts...): 1.2 MB -> small.

    The kept tables, their DDL and their rows are exactly what the client wrote.
    """
    conn = sqlite3.connect(path)
    try:
        names = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for kind, name in names:
            if kind in ("view", "trigger"):
                conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        for kind, name in names:
            if kind == "table" and name not in KEEP_TABLES:
                conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        conn.commit()
        conn.execute("PRAGMA page_size = 1024")  # small pages: a small fixture
        conn.execute("VACUUM")
    finally:
        conn.close()


def make_tensorboard() -> None:
    out = ROOT / "tensorboard"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    write_tensorboardx(training_run(spike_at=30), out / "spike", hparams={"precision": "fp16"})
    write_tensorboardx(training_run(spike_at=None, nonfinite_at=40), out / "nan")
    for rank in range(4):
        run = training_run(spike_at=None, nonfinite_at=20 if rank == 2 else None, seed=rank)
        write_tensorboardx(run, out / "ranks" / f"rank_{rank}")
    write_events(
        out / "tf2" / "events.out.tfevents.1700000000.fixture.1.v2", training_run(spike_at=30)
    )
    write_events(out / "empty" / "events.out.tfevents.1700000000.fixture", None)


if __name__ == "__main__":
    make_mlflow()
    make_tensorboard()
    print(f"wrote {ROOT / 'mlflow'} and {ROOT / 'tensorboard'}")
