"""MLflow stores as a careless or hostile world leaves them (issue 12).

Damaged values in a sqlite store or a file store are rejected with their reason and
counted (rows read = used + rejected + rewritten), never turned into another number;
a locked or WAL-mode database is read without writing anything beside it or said to
be locked in one line. The tracking-server cases run against a small misbehaving
HTTP server on loopback.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from stabilitycli import ingest
from stabilitycli.errors import StabInputError
from stabilitycli.ingest import mlflow_db, mlflow_file
from stabilitycli.ingest.options import ReadOptions
from tests.ingest._synthetic_run import training_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mlflow"
DB = FIXTURES / "mlflow.db"
MLRUNS = FIXTURES / "mlruns"
LOSS = training_run(spike_at=30)["train/loss"]


def _accounted(source) -> None:
    assert source.rows_read == source.rows_used + source.rows_rejected + source.rows_rewritten


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- sqlite -----------------------------------------------------------------------------


def _db_copy(tmp_path: Path, *, loose: bool = False) -> Path:
    """A writable copy of the fixture database; `loose` drops the NOT NULL constraints."""
    copy = tmp_path / "mlflow.db"
    shutil.copy(DB, copy)
    if loose:
        with sqlite3.connect(copy) as conn:
            conn.executescript(
                "CREATE TABLE loose AS SELECT rowid AS rid, * FROM metrics ORDER BY rowid;"
                "DROP TABLE metrics;"
                "CREATE TABLE metrics (key, value, timestamp, run_uuid, step, is_nan);"
                "INSERT INTO metrics (rowid, key, value, timestamp, run_uuid, step, is_nan) "
                "SELECT rid, key, value, timestamp, run_uuid, step, is_nan FROM loose;"
                "DROP TABLE loose;"
            )
        conn.close()
    return copy


def _set(copy: Path, column: str, value, step: int, key: str = "train/loss") -> int:
    """Overwrite one column of the spike run's point at `step`; returns its rowid."""
    conn = sqlite3.connect(copy)
    with conn:
        (rowid,) = conn.execute(
            "SELECT m.rowid FROM metrics m JOIN runs r USING (run_uuid) "
            "WHERE r.name = 'spike' AND m.key = ? AND m.step = ?",
            (key, step),
        ).fetchone()
        conn.execute(f"UPDATE metrics SET {column} = ? WHERE rowid = ?", (value, rowid))
    conn.close()
    return rowid


@pytest.mark.parametrize(
    ("column", "value", "loose", "said"),
    [
        ("value", "not a number", False, "value"),
        ("value", None, True, "value"),
        ("step", 60.5, False, "step"),
        ("step", 1e19, False, "step"),
        ("step", "ten", False, "step"),
        ("step", None, True, "step"),
        ("timestamp", 1e19, False, "timestamp"),
        ("timestamp", "noon", False, "timestamp"),
        ("timestamp", None, True, "timestamp"),
        ("is_nan", "yes", True, "is_nan"),
    ],
)
def test_sqlite_damaged_value_is_one_rejected_row(tmp_path, column, value, loose, said):
    copy = _db_copy(tmp_path, loose=loose)
    rowid = _set(copy, column, value, step=10)
    run = ingest.read(copy, ReadOptions(run="spike"))
    source = run.source
    assert source.rows_rejected == 1, source.rejections
    assert source.rejections[0].line == rowid and said in source.rejections[0].reason
    assert source.restarts == [] and source.rows_rewritten == 0  # no made-up resume
    _accounted(source)
    assert run.frame["loss"][10] is None and run.frame["grad_norm"][10] is not None
    assert run.frame["step"].to_list() == list(range(60))
    assert run.frame["loss"][30] == 9.5


def test_sqlite_huge_value_is_kept_as_it_is(tmp_path):
    copy = _db_copy(tmp_path)
    _set(copy, "value", 1e19, step=10)
    run = ingest.read(copy, ReadOptions(run="spike"))
    assert run.frame["loss"][10] == 1e19 and run.source.rows_rejected == 0
    _accounted(run.source)


def test_sqlite_locked_database_is_one_line_naming_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(mlflow_db, "BUSY_TIMEOUT_S", 0.05)
    copy = _db_copy(tmp_path)
    writer = sqlite3.connect(copy, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        assert ingest.detect_format(copy) == "mlflow_db"
        with pytest.raises(StabInputError) as err:
            ingest.read(copy, ReadOptions(run="spike"))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    message = str(err.value)
    assert "\n" not in message and str(copy) in message and "locked" in message


def _wal_copy(tmp_path: Path) -> Path:
    copy = _db_copy(tmp_path)
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    return copy


def test_sqlite_wal_database_is_read_without_creating_wal_or_shm(tmp_path):
    copy = _wal_copy(tmp_path)
    assert _listing(tmp_path) == ["mlflow.db"]
    before = copy.read_bytes()
    assert ingest.detect_format(copy) == "mlflow_db"
    run = ingest.read(copy, ReadOptions(run="spike"))
    assert run.frame["loss"][30] == 9.5
    assert _listing(tmp_path) == ["mlflow.db"] and copy.read_bytes() == before


def _wal_with_uncheckpointed_point(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    """A WAL database with a live writer whose last change sits only in the -wal."""
    copy = _wal_copy(tmp_path)
    writer = sqlite3.connect(copy)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    _set_with(writer, 4.25)
    return copy, writer


def _set_with(conn: sqlite3.Connection, value: float) -> None:
    with conn:
        conn.execute(
            "UPDATE metrics SET value = ? WHERE rowid = (SELECT m.rowid FROM metrics m "
            "JOIN runs r USING (run_uuid) WHERE r.name = 'spike' AND m.key = 'train/loss' "
            "AND m.step = 10)",
            (value,),
        )


def test_sqlite_wal_with_a_live_writer_reads_the_wal_and_creates_nothing(tmp_path):
    copy, writer = _wal_with_uncheckpointed_point(tmp_path)
    try:
        present = _listing(tmp_path)
        assert present == ["mlflow.db", "mlflow.db-shm", "mlflow.db-wal"]
        run = ingest.read(copy, ReadOptions(run="spike"))
        assert run.frame["loss"][10] == 4.25
        assert _listing(tmp_path) == present
    finally:
        writer.close()


def test_sqlite_wal_left_without_its_shm_is_read_whole_and_nothing_created(tmp_path):
    copy, writer = _wal_with_uncheckpointed_point(tmp_path)
    elsewhere = tmp_path / "copied"
    elsewhere.mkdir()
    # what a backup of a live database looks like: the file and its -wal, no -shm
    shutil.copy(copy, elsewhere / "mlflow.db")
    shutil.copy(tmp_path / "mlflow.db-wal", elsewhere / "mlflow.db-wal")
    writer.close()
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    run = ingest.read(elsewhere / "mlflow.db", ReadOptions(run="spike"))
    assert run.frame["loss"][10] == 4.25
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


# --- file store ---------------------------------------------------------------------------


def _file_run(tmp_path: Path) -> Path:
    source = next(
        meta.parent
        for meta in MLRUNS.glob("*/*/meta.yaml")
        if mlflow_file.parse_meta(meta.read_text()).get("run_name") == "spike"
    )
    experiment = tmp_path / source.parent.name
    experiment.mkdir()
    shutil.copy(source.parent / "meta.yaml", experiment / "meta.yaml")
    shutil.copytree(source, experiment / source.name)
    return experiment / source.name


def _replace_line(folder: Path, index: int, line: bytes) -> None:
    loss_file = folder / "metrics" / "train" / "loss"
    lines = loss_file.read_bytes().splitlines(keepends=True)
    lines[index] = line
    loss_file.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"1700000000010 3.5 60.5\n", "step"),
        (b"1700000000010 3.5 10000000000000000000\n", "step"),
        (b"1700000000010 3.5 1e19\n", "step"),
        (b"1700000000010 three 10\n", "value"),
        (b"1700000000010 1e400 10\n", "value"),
        (b"1700000000010 3.\xff5 10\n", "value"),
        (b"17000000\xff00010 3.5 10\n", "timestamp"),
        (b"1700000000010.5 3.5 10\n", "timestamp"),
    ],
)
def test_file_store_damaged_line_is_one_rejected_row(tmp_path, line, said):
    folder = _file_run(tmp_path)
    _replace_line(folder, 10, line)
    run = ingest.read(folder)
    source = run.source
    assert source.rows_rejected == 1, source.rejections
    assert source.rejections[0].line == 11 and said in source.rejections[0].reason
    assert source.restarts == [] and source.rows_rewritten == 0
    _accounted(source)
    assert run.frame["loss"][10] is None and run.frame["step"].to_list() == list(range(60))
    assert run.frame["loss"][11:].to_list() == LOSS[11:]


def test_file_store_huge_finite_value_and_infinities_are_kept(tmp_path):
    folder = _file_run(tmp_path)
    _replace_line(folder, 10, b"1700000000010 1e300 10\n")
    _replace_line(folder, 11, b"1700000000011 -inf 11\n")
    _replace_line(folder, 12, b"1700000000012 nan 12\n")
    run = ingest.read(folder)
    loss = run.frame["loss"]
    assert loss[10] == 1e300 and loss[11] == -math.inf and math.isnan(loss[12])
    assert run.source.rows_rejected == 0


def test_file_store_non_utf8_byte_anywhere_keeps_the_other_lines(tmp_path):
    folder = _file_run(tmp_path)
    _replace_line(folder, 20, b"\xfe\xff\n")
    run = ingest.read(folder)
    assert run.source.rows_rejected == 1 and run.source.rejections[0].line == 21
    assert run.frame["loss"][21:].to_list() == LOSS[21:]
    _accounted(run.source)


def test_file_store_old_two_field_line_is_still_step_zero(tmp_path):
    folder = _file_run(tmp_path)
    (folder / "metrics" / "old").write_text("1700000000000 2.5\n")
    run = ingest.read(folder)
    assert run.frame["old"][0] == 2.5 and run.source.rows_rejected == 0
