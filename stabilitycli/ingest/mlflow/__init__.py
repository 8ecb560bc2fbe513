"""MLflow runs: a file store (mlruns/), its sqlite database, or a tracking server.

The three readers share run selection and the building of a run from metric
points (`_common`). This module declares each reader for `ingest` without
importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

FILE_STORE = ReaderEntry(
    "mlflow_file",
    "stabilitycli.ingest.mlflow.file_store",
    Takes(folders=True),
    "MLflow file store (mlruns/, an experiment or run folder)",
)
DATABASE = ReaderEntry(
    "mlflow_db",
    "stabilitycli.ingest.mlflow.database",
    Takes(magic=(b"SQLite format 3\x00",)),
    "MLflow sqlite (mlflow.db, sqlite:///path)",
)
SERVER = ReaderEntry(
    "mlflow_server",
    "stabilitycli.ingest.mlflow.server",
    Takes(),  # a tracking URI only (`sniff_uri`), never a path
    "MLflow tracking server (http(s)://host:port)",
)
