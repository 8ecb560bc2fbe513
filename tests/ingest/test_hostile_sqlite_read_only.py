"""An MLflow sqlite store is read without creating any file beside it (issue 33, item 5),
whatever its header says: a file whose format-version bytes say WAL in only one of the two
places was opened by sqlite as WAL, read-only or not, and got `-wal` and `-shm` beside it.
The folder is fingerprinted before and after every command."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from tests.conftest import FIXTURES


def _fingerprint(folder: Path) -> dict[str, tuple]:
    """Each entry below `folder` (and the folder): its kind, size, mtime and content hash;
    a folder's mtime moves when a file is made in it, even one removed again."""
    seen: dict[str, tuple] = {}
    for root, dirs, files in os.walk(folder):
        for name in [".", *dirs, *files]:
            full = Path(root) / name
            stat = full.lstat()
            content = "" if full.is_dir() else hashlib.sha256(full.read_bytes()).hexdigest()
            seen[full.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns, content)
    return seen


def _with_header(path: Path, read_version: int, write_version: int) -> None:
    data = bytearray(path.read_bytes())
    data[18], data[19] = read_version, write_version
    path.write_bytes(bytes(data))


def _wal(path: Path) -> None:
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()


STORES = {
    "wal": _wal,
    "write-version-says-wal": lambda p: _with_header(p, 1, 2),
    "read-version-3": lambda p: _with_header(p, 3, 2),
    "read-version-says-wal": lambda p: _with_header(p, 2, 1),
}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_no_command_creates_a_file_beside_a_sqlite_store(kind, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "mlflow.db"
    shutil.copy(FIXTURES / "mlflow" / "mlflow.db", path)
    STORES[kind](path)
    monkeypatch.chdir(tmp_path)
    commands = [
        ["analyze", path, "--run", "spike", "--format", "json"],
        ["analyze", folder, "--run", "spike"],
        ["analyze", "-r", folder, "--jobs", "1", "-q"],
        ["postmortem", path, "--run", "spike", "-o", "-"],
        ["compare", f"{path}", f"{path}", "--run", "spike"],
    ]
    before = _fingerprint(folder)
    read = 0
    for args in commands:
        result = CliRunner().invoke(app, [str(a) for a in args])
        assert result.exception is None or isinstance(result.exception, SystemExit), args
        read += result.exit_code in (0, 1)
        after = _fingerprint(folder)
        assert after == before, f"stab {' '.join(map(str, args))}: {sorted(after)}"
    assert read, "no command read the store, so the test saw no read"
