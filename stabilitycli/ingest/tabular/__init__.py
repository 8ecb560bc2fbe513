"""Tables: CSV / TSV / Parquet / Arrow IPC (`tables`) and Lightning's CSVLogger
folders built on them (`lightning`).

This module declares each reader for `ingest` without importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

LIGHTNING = ReaderEntry(
    "lightning",
    "stabilitycli.ingest.tabular.lightning",
    Takes(folders=True, suffixes=(".csv",)),
    "Lightning CSVLogger metrics.csv (or lightning_logs/ with version_N: a version that "
    "resumes an earlier one is read with it)",
)
TABLES = ReaderEntry(
    "tabular",
    "stabilitycli.ingest.tabular.tables",
    Takes(
        suffixes=(".csv", ".tsv", ".parquet", ".pq", ".arrow", ".feather", ".ipc", ".arrows"),
        magic=(b"PAR1", b"ARROW1"),
    ),
    "CSV / TSV / Parquet / Arrow IPC tables",
)
