"""Every reader, in the order detection asks them, and the list of inputs in `--help`.

Each reader is declared by its package (`ReaderEntry` in `text/__init__.py`,
`mlflow/__init__.py`, ...), next to the reader and without importing it; this
module only puts the declarations in order. The order matters: the first reader
whose `sniff` accepts a path wins, so specific layouts come before generic ones.
`tensorboard` accepts any folder with event files below it (HF output dirs and
lightning_logs often have some), so it comes after the specific folder layouts.
"""

from __future__ import annotations

import importlib
from typing import cast

from stabilitycli.ingest import jsonl, mlflow, tabular, tensorboard, text, wandb
from stabilitycli.ingest.base import Reader, ReaderEntry, Takes

# per-rank folders are read here at the ingest level: any file reader may read a rank
RANK_DIR = ReaderEntry(
    "rank_dir",
    "stabilitycli.ingest.rank_dir",
    Takes(folders=True),
    "A folder of per-rank logs in any of the file formats (rank_7.jsonl, rank-007.jsonl.gz, "
    "worker_7.csv, rank_7.log, rank_7/metrics.jsonl) is one per-rank run",
)

ENTRIES: tuple[ReaderEntry, ...] = (
    mlflow.FILE_STORE,
    mlflow.DATABASE,
    mlflow.SERVER,
    RANK_DIR,
    text.HF_TRAINER,
    wandb.OFFLINE,
    tabular.LIGHTNING,
    wandb.CSV_EXPORT,
    text.LLMC,
    text.MEGATRON,
    text.BLOCKLOG,
    text.DICTLOG,
    text.DEEPSPEED,
    tensorboard.EVENTS,
    tabular.TABLES,
    jsonl.JSONL,
    text.KVLOG,
)
READERS: tuple[str, ...] = tuple(entry.name for entry in ENTRIES)
BY_NAME: dict[str, ReaderEntry] = {entry.name: entry for entry in ENTRIES}

# What `read` itself takes besides the readers' formats (standard input, a folder of one log)
STDIN_PHRASE = "`-` reads standard input"
ONE_LOG_PHRASE = "a folder holding one log is that log"

# Shown once, in `stab analyze --help`; input errors point there instead of repeating it.
# Grouped for a reader of the help (text logs first), not in the order detection asks.
SUPPORTED = (
    "; ".join(
        (
            jsonl.JSONL.supported,
            text.MEGATRON.supported,
            text.DEEPSPEED.supported,
            text.LLMC.supported,
            text.BLOCKLOG.supported,
            f"{text.KVLOG.supported} or {text.DICTLOG.supported}",
            STDIN_PHRASE,
            text.HF_TRAINER.supported,
            tabular.LIGHTNING.supported,
            wandb.OFFLINE.supported,
            wandb.CSV_EXPORT.supported,
            tabular.TABLES.supported,
            mlflow.FILE_STORE.supported,
            mlflow.DATABASE.supported,
            mlflow.SERVER.supported,
            tensorboard.EVENTS.supported,
        )
    )
    + f". {RANK_DIR.supported}; {ONE_LOG_PHRASE}."
)


def reader(name: str) -> Reader:
    # a module satisfies the protocol structurally; tests/ingest check every one in READERS
    return cast(Reader, importlib.import_module(BY_NAME[name].module))
