"""`detect_format` imports a reader only when the path could be its, and picks what
asking every reader in turn would pick.

The cheap tests in each reader's `Takes` (a folder, a file name, magic bytes, a text log)
only skip readers; the check here is that on every path under fixtures/ (and on a
few made-up ones) they never skip the reader that would have taken it. That an
analysis imports no other reader is checked on the real `stab` in test_cli_help.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stabilitycli.ingest import READERS, SUPPORTED, detect_format, reader
from stabilitycli.ingest.formats import BY_NAME, ENTRIES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _every_reader_asked(path: Path) -> str:
    """What detection gave before it had cheap tests: each reader's sniff, in order."""
    head = b""
    if path.is_file():
        with open(path, "rb") as handle:
            head = handle.read(8192)
    for name in READERS:
        if reader(name).sniff(path, head):
            return name
    return "none"


def _detected(path: Path) -> str:
    try:
        return detect_format(path)
    except Exception as err:  # the same refusal (or the same failure) either way
        return "none" if "not a log stab reads" in str(err) else type(err).__name__


def _both(paths: list[Path]) -> tuple[dict[str, str], dict[str, str]]:
    def rel(p: Path) -> str:
        return str(p.relative_to(p.anchor))

    return (
        {rel(p): _detected(p) for p in paths},
        {rel(p): _every_reader_asked(p) for p in paths},
    )


_TAKES = {entry.name: entry.takes for entry in ENTRIES}


def test_every_reader_is_declared_once_with_its_phrase_in_the_help() -> None:
    assert len(BY_NAME) == len(ENTRIES) == len(READERS)
    for entry in ENTRIES:
        assert entry.supported in SUPPORTED, entry.name


def test_the_magic_bytes_are_the_readers_own() -> None:
    from stabilitycli.ingest.mlflow import database as mlflow_db
    from stabilitycli.ingest.tabular import tables as tabular
    from stabilitycli.ingest.wandb import offline as wandb_offline

    assert _TAKES["mlflow_db"].magic == (mlflow_db.SQLITE_MAGIC,)
    assert _TAKES["wandb_offline"].magic == (wandb_offline.MAGIC,)
    assert set(_TAKES["tabular"].magic) == {tabular.PARQUET_MAGIC, tabular.ARROW_MAGIC}
    suffixes = tabular.CSV_SUFFIXES + tabular.PARQUET_SUFFIXES + tabular.ARROW_SUFFIXES
    assert set(_TAKES["tabular"].suffixes) == set(suffixes)


def test_every_fixture_is_detected_as_every_reader_would() -> None:
    paths = sorted([FIXTURES, *FIXTURES.rglob("*")])
    fast, full = _both(paths)
    assert fast == full
    # the fixtures reach most readers, so the comparison above means something
    assert len(set(full.values()) & set(READERS)) >= 12


def test_a_format_told_by_its_bytes_alone_is_detected(tmp_path: Path) -> None:
    import polars as pl

    table = pl.DataFrame({"step": [0, 1, 2], "loss": [2.0, 1.9, 1.8]})
    table.write_parquet(tmp_path / "parquet_no_suffix")
    table.write_ipc(tmp_path / "arrow_no_suffix")
    record = json.dumps({"step": 0, "loss": 2.0})
    (tmp_path / "jsonl.gz.bin").write_bytes(gzip.compress(f"{record}\n{record}\n".encode()))
    (tmp_path / "metrics.CSV").write_text("step,loss\n0,2.0\n1,1.9\n")
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "binary").write_bytes(bytes(range(256)) * 8)
    fast, full = _both(sorted(tmp_path.iterdir()))
    assert fast == full
    assert fast[str((tmp_path / "parquet_no_suffix").relative_to("/"))] == "tabular"


@pytest.mark.parametrize("name", ["train.log", "trainer_state.json", "run.wandb", "m.parquet"])
def test_a_missing_file_is_refused_as_before(tmp_path: Path, name: str) -> None:
    fast, full = _both([tmp_path / name])
    assert fast == full
