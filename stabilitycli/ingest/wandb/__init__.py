"""Weights & Biases: an offline run (`.wandb`) and a chart's CSV export.

This module declares each reader for `ingest` without importing it.
"""

from __future__ import annotations

from stabilitycli.ingest.base import ReaderEntry, Takes

OFFLINE = ReaderEntry(
    "wandb_offline",
    "stabilitycli.ingest.wandb.offline",
    Takes(folders=True, suffixes=(".wandb",), magic=(b":W&B\xe1\xbe",)),
    "W&B offline run (.wandb, its run dir, or wandb/)",
)
CSV_EXPORT = ReaderEntry(
    "wandb_csv",
    "stabilitycli.ingest.wandb.csv_export",
    Takes(suffixes=(".csv",)),
    "W&B chart CSV export",
)
