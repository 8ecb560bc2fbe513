"""MLflow sqlite backend (`mlflow.db`, the default store since MLflow 3.7), read with plain SQL.

The database is opened read-only, so a training job that is still logging is
never blocked and nothing is ever written, not even beside the file: SQLite's
own `mode=ro` still creates `-wal` and `-shm` for a WAL-mode database, so how
it is opened depends on what lies beside it (see `opened`). The tables used are
`experiments`, `runs`, `metrics`, `params` and `tags`; mlflow is not imported
(its client pages through the ORM: about a minute for 1M points).

Two quirks of how MLflow stores floats in SQL:

* NaN is stored as `value = 0.0, is_nan = 1`: rebuilt exactly.
* +/-Inf is clamped to +/-1.7976931348623157e308 (the largest double) on the way
  in, and MLflow's own client hands back that clamped number. We map exactly
  that value back to +/-Inf. It is a heuristic: a metric that truly equals the
  largest double would be read as Inf, which no training metric does.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.request import pathname2url

from stabilitycli.core.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest.limits import InputLimits, limit_hit, limits_in_force
from stabilitycli.ingest.mlflow._common import (
    MlflowRun,
    build_run,
    filter_experiments,
    order_points,
    select_runs,
)
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import reject_many

NAME = "mlflow_db"
SQLITE_MAGIC = b"SQLite format 3\x00"
URI_PREFIX = "sqlite:///"
INF_NOTE = (
    "sqlite store: MLflow clamps +/-Inf to +/-1.7976931348623157e308 when it saves a metric; "
    "values exactly at that bound were read back as +/-Inf (a heuristic)"
)


def sniff_uri(text: str) -> bool:
    return text.startswith(URI_PREFIX)


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir() or not head.startswith(SQLITE_MAGIC):
        return False
    try:
        with opened(path, sniffing=True) as conn:
            return has_mlflow_tables(conn)
    except (sqlite3.Error, OSError):
        return False


def db_path(target: str | Path) -> Path:
    """The file behind `sqlite:///relative.db`, `sqlite:////abs/mlflow.db` or a plain path."""
    text = str(target)
    if text.startswith(URI_PREFIX):
        text = text[len(URI_PREFIX) :].split("?", 1)[0]
    return Path(text)


# How long a read waits for a writer's lock before saying the database is locked.
# MLflow's own writes hold it for milliseconds; a longer lock is a job mid-transaction.
BUSY_TIMEOUT_S = 5.0


def _uri(path: Path, *flags: str) -> str:
    return "file:" + pathname2url(str(path.resolve())) + "?" + "&".join(("mode=ro", *flags))


def _is_wal(path: Path) -> bool:
    # header bytes 18-19 are the read/write format versions: 2 means WAL. Either byte at 2
    # (or damaged) gets the WAL handling: sqlite opens a file whose write version alone
    # says WAL as one, creating `-wal` and `-shm` beside it even read-only
    with open(path, "rb") as handle:
        return handle.read(20)[18:20] != b"\x01\x01"


@contextlib.contextmanager
def opened(
    path: Path, *, sniffing: bool = False, limits: InputLimits | None = None
) -> Iterator[sqlite3.Connection]:
    """A read-only connection that creates and modifies nothing beside the file.

    * rollback journal: `mode=ro` takes a shared lock and writes nothing, so a job
      that is still logging is read consistently;
    * WAL with no `-wal` beside it: no connection has it open, nothing is being
      written, so `immutable=1` reads the file alone (plain `mode=ro` would create
      `-wal` and `-shm`);
    * WAL with `-wal` and `-shm`: a live writer (or one that died); `readonly_shm`
      reads its wal-index without creating anything;
    * WAL with a `-wal` but no `-shm` (a copy of a live database): the points not
      yet checkpointed live only in the `-wal`, so both files are read from a
      private copy; sniffing looks at the main file alone.
    """
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    timeout = 0.0 if sniffing else BUSY_TIMEOUT_S
    if not _is_wal(path) or not wal.exists():
        flags = ("immutable=1",) if _is_wal(path) else ()
        conn = sqlite3.connect(_uri(path, *flags), uri=True, timeout=timeout)
        if sniffing and not flags:
            try:
                has_mlflow_tables(conn)
            except sqlite3.OperationalError:
                # locked by a writer: the tables can still be named from the file alone
                conn.close()
                conn = sqlite3.connect(_uri(path, "immutable=1"), uri=True, timeout=0.0)
        yield from _closing(conn)
        return
    if sniffing:
        yield from _closing(sqlite3.connect(_uri(path, "immutable=1"), uri=True, timeout=0.0))
        return
    if shm.exists():
        conn = sqlite3.connect(_uri(path, "readonly_shm=1"), uri=True, timeout=timeout)
        try:
            has_mlflow_tables(conn)
        except sqlite3.Error:
            conn.close()  # a -shm left by a writer that died: read a private copy
        else:
            yield from _closing(conn)
            return
    size = path.stat().st_size + wal.stat().st_size
    limit = (limits or limits_in_force()).max_input_bytes
    if size > limit:
        raise limit_hit(
            str(path), "a -wal without its -shm is read from a copy", "max_input_bytes", limit
        )
    with tempfile.TemporaryDirectory(prefix="stab-sqlite-") as private:
        copy = Path(private) / "mlflow.db"
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        yield from _closing(sqlite3.connect(_uri(copy), uri=True, timeout=timeout))


def _closing(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    try:
        conn.execute("PRAGMA query_only = 1")
        yield conn
    finally:
        conn.close()


def has_mlflow_tables(conn: sqlite3.Connection) -> bool:
    # as bytes: a damaged name of some other table is no reason to refuse the store
    names = {
        bytes(row[0] or b"")
        for row in conn.execute("SELECT CAST(name AS BLOB) FROM sqlite_master WHERE type = 'table'")
    }
    return {b"metrics", b"runs"} <= names


def list_runs(conn: sqlite3.Connection, options: ReadOptions, where: str) -> list[MlflowRun]:
    experiments = {
        _text(eid): (_text(name), _text(stage))
        for eid, name, stage in conn.execute(
            "SELECT experiment_id, name, lifecycle_stage FROM experiments"
        )
    }
    keep = filter_experiments({k: v[0] for k, v in experiments.items()}, options, where)
    runs = []
    rows = conn.execute(
        "SELECT run_uuid, name, experiment_id, lifecycle_stage FROM runs "
        "ORDER BY start_time, run_uuid"
    )
    for run_id, name, eid, stage in rows:
        eid = _text(eid)
        if eid not in keep:
            continue
        exp_name, exp_stage = experiments.get(eid, ("", "active"))
        runs.append(
            MlflowRun(
                run_id=_text(run_id),
                name=_text(name),
                experiment_id=eid,
                experiment_name=exp_name,
                deleted="deleted" in (_text(stage), exp_stage),
            )
        )
    return runs


def load_params_tags(conn: sqlite3.Connection, run: MlflowRun) -> None:
    run.params = _text_pairs(conn, "params", run.run_id)
    run.tags = _text_pairs(conn, "tags", run.run_id)
    if not run.name:
        run.name = run.tags.get("mlflow.runName", "")


def _text_pairs(conn: sqlite3.Connection, table: str, run_id: str) -> dict[str, str]:
    # a hand-edited store may hold a number, a blob or NULL where MLflow writes text
    rows = conn.execute(f"SELECT key, value FROM {table} WHERE run_uuid = ?", (run_id,))
    return {_text(key): _text(value) for key, value in rows}


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


# SQLite keeps whatever a column is given, whatever MLflow's schema says: a row is used
# only when its value is a number, its step and timestamp are 64-bit integers (an
# integral REAL such as 60.0 included) and is_nan is 0 or 1. Anything else is the
# reason the row is rejected: a step of 60.5 taken as 0 would invent a restart.
_INTEGRAL = (
    "(typeof({c}) = 'integer' OR (typeof({c}) = 'real' AND {c} = CAST({c} AS INTEGER) "
    "AND abs({c}) < 9.2e18))"
)
_PROBLEM = (
    "CASE"
    " WHEN typeof(value) NOT IN ('integer', 'real')"
    " THEN 'a value that is not a number (' || typeof(value) || ')'"
    " WHEN NOT " + _INTEGRAL.format(c="step") + " THEN 'a step that is not a 64-bit integer"
    " (' || typeof(step) || ' ' || substr(quote(step), 1, 40) || ')'"
    " WHEN NOT " + _INTEGRAL.format(c="timestamp") + " THEN 'a timestamp that is not a 64-bit"
    " integer (' || typeof(timestamp) || ' ' || substr(quote(timestamp), 1, 40) || ')'"
    " WHEN NOT (typeof(is_nan) = 'integer' AND is_nan IN (0, 1))"
    " THEN 'an is_nan flag that is not 0 or 1 (' || substr(quote(is_nan), 1, 40) || ')'"
    " END"
)


def run_points(conn: sqlite3.Connection, run: MlflowRun, source):
    """All metric points of one run, NaN rebuilt from `is_nan` and the Inf clamp undone."""
    keys = [
        _text(k)
        for (k,) in conn.execute(
            "SELECT DISTINCT key FROM metrics WHERE run_uuid = ? ORDER BY key", (run.run_id,)
        )
    ]
    if not keys:
        return None
    return finish_points(
        [_key_points(conn, run.run_id, key, index, source) for index, key in enumerate(keys)],
        source,
    )


def finish_points(parts: list, source):
    """Each key's rows (`key_frame`, tagged with the key) as one run's points in time order."""
    import polars as pl

    points = pl.concat(parts, how="vertical")
    bound = sys.float_info.max
    clamped = points.filter(pl.col("value").abs() == bound).height
    if clamped:
        source.notes.append(INF_NOTE + f" ({clamped} point(s))")
    value = (
        pl.when(pl.col("is_nan") == 1)
        .then(float("nan"))
        .when(pl.col("value") == bound)
        .then(float("inf"))
        .when(pl.col("value") == -bound)
        .then(float("-inf"))
        .otherwise(pl.col("value"))
    )
    return order_points(points.with_columns(value.alias("value")))


ROW_DTYPE = (
    ("value", "f8"),
    ("timestamp", "i8"),
    ("step", "i8"),
    ("is_nan", "i8"),
    ("_line", "i8"),
)
_GOOD = "CAST(value AS REAL), CAST(timestamp AS INTEGER), CAST(step AS INTEGER), is_nan, rowid"


def _key_points(conn: sqlite3.Connection, run_id: str, key: str, index: int, source):
    """One metric's usable rows, streamed into numpy; the others rejected by rowid."""
    import numpy as np
    import polars as pl

    where = "FROM metrics WHERE run_uuid = ? AND key = ?"
    bad: dict[str, list[int]] = {}
    for rowid, problem in conn.execute(
        f"SELECT rowid, {_PROBLEM} AS problem {where} AND problem IS NOT NULL ORDER BY rowid",
        (run_id, key),
    ):
        bad.setdefault(problem, []).append(rowid)
    reject_rows(source, key, bad)
    query = f"SELECT {_GOOD} {where} AND ({_PROBLEM}) IS NULL"
    array = np.fromiter(conn.execute(query, (run_id, key)), dtype=np.dtype(list(ROW_DTYPE)))
    return key_frame(array).with_columns(
        pl.lit(key).alias("key"), pl.lit(index, dtype=pl.Int64).alias("_key_index")
    )


def reject_rows(source, key: str, bad: dict[str, list[int]]) -> None:
    for problem, rowids in bad.items():
        reject_many(source, rowids, f"metric {key!r}: {problem} (line = sqlite rowid)")


def key_frame(array):
    """Rows of `ROW_DTYPE` as a polars frame."""
    import polars as pl

    schema = {name: pl.Float64 if kind == "f8" else pl.Int64 for name, kind in ROW_DTYPE}
    return pl.DataFrame({name: array[name] for name, _ in ROW_DTYPE}, schema=schema)


def rows_after(conn: sqlite3.Connection, run_id: str, rowid: int):
    """A run's metric rows added after `rowid`, in rowid order: (key, good row or None,
    problem or None, rowid) each; a live follower's poll, over the run's rowid index."""
    query = (
        f"SELECT key, {_GOOD}, {_PROBLEM} AS problem FROM metrics "
        "WHERE run_uuid = ? AND rowid > ? ORDER BY rowid"
    )
    for key, value, timestamp, step, is_nan, row, problem in conn.execute(query, (run_id, rowid)):
        good = None if problem is not None else (value, timestamp, step, is_nan, row)
        yield _text(key), good, problem, row


def run_status(conn: sqlite3.Connection, run_id: str) -> str:
    found = conn.execute("SELECT status FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
    return _text(found[0]) if found else ""


def read(target, options: ReadOptions) -> RunData:
    """Read the selected run(s) of an MLflow sqlite database into the canonical frame."""
    path = db_path(target)
    where = str(target)
    if not path.is_file():
        raise StabInputError(where, "no such sqlite file")
    try:
        with opened(path, limits=options.limits) as conn:
            if not has_mlflow_tables(conn):
                raise StabInputError(
                    where, "not an MLflow database (no 'metrics' and 'runs' tables)"
                )
            runs = list_runs(conn, options, where)
            chosen, ranks = select_runs(
                runs, options, where, fetch_rank_info=lambda run: load_params_tags(conn, run)
            )
            return build_run(
                where,
                NAME,
                chosen,
                ranks,
                options,
                load_meta=lambda run: load_params_tags(conn, run),
                load_points=lambda run, source: run_points(conn, run, source),
            )
    except sqlite3.Error as err:
        raise StabInputError(where, sqlite_reason(err)) from None
    except OSError as err:
        raise StabInputError(where, f"cannot read the sqlite file: {err.strerror or err}") from None


def sqlite_reason(err: sqlite3.Error) -> str:
    text = str(err)
    if "locked" in text or "busy" in text:
        return (
            f"the database is locked by another process (waited {BUSY_TIMEOUT_S:g} s): "
            "a job is writing it; read it again when the write is done"
        )
    return f"cannot read the MLflow tables read-only: {text}"
