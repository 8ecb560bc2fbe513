"""MLflow sqlite backend (`mlflow.db`, the default store since MLflow 3.7), read with plain SQL.

The database is opened read-only (`mode=ro`), so a training job that is still
logging is never blocked and nothing is ever written. The tables used are
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

import sqlite3
import sys
from pathlib import Path
from urllib.request import pathname2url

from stabilitycli.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest._mlflow_common import (
    MlflowRun,
    build_run,
    filter_experiments,
    order_points,
    select_runs,
)
from stabilitycli.ingest._points import reject_many
from stabilitycli.ingest.options import ReadOptions

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
        conn = _connect(path)
    except sqlite3.Error:
        return False
    try:
        return _has_mlflow_tables(conn)
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def db_path(target: str | Path) -> Path:
    """The file behind `sqlite:///relative.db`, `sqlite:////abs/mlflow.db` or a plain path."""
    text = str(target)
    if text.startswith(URI_PREFIX):
        text = text[len(URI_PREFIX) :].split("?", 1)[0]
    return Path(text)


def _connect(path: Path) -> sqlite3.Connection:
    # mode=ro: never create, never write, never take a write lock
    uri = "file:" + pathname2url(str(path.resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    conn.execute("PRAGMA query_only = 1")
    return conn


def _has_mlflow_tables(conn: sqlite3.Connection) -> bool:
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {"metrics", "runs"} <= names


def list_runs(conn: sqlite3.Connection, options: ReadOptions, where: str) -> list[MlflowRun]:
    experiments = {
        str(eid): (name, stage)
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
        eid = str(eid)
        if eid not in keep:
            continue
        exp_name, exp_stage = experiments.get(eid, ("", "active"))
        runs.append(
            MlflowRun(
                run_id=run_id,
                name=name or "",
                experiment_id=eid,
                experiment_name=exp_name,
                deleted="deleted" in (stage, exp_stage),
            )
        )
    return runs


def _load_params_tags(conn: sqlite3.Connection, run: MlflowRun) -> None:
    run.params = dict(
        conn.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run.run_id,))
    )
    run.tags = dict(conn.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run.run_id,)))
    if not run.name:
        run.name = run.tags.get("mlflow.runName", "")


def run_points(conn: sqlite3.Connection, run: MlflowRun, source):
    """All metric points of one run, NaN rebuilt from `is_nan` and the Inf clamp undone."""
    import polars as pl

    keys = [
        k
        for (k,) in conn.execute(
            "SELECT DISTINCT key FROM metrics WHERE run_uuid = ? ORDER BY key", (run.run_id,)
        )
    ]
    if not keys:
        return None
    parts = [_key_points(conn, run.run_id, key, index) for index, key in enumerate(keys)]
    points = pl.concat(parts, how="vertical")
    missing = points.filter(pl.col("value").is_null())
    reject_many(source, missing["_line"].to_list(), "metrics row with a NULL value (sqlite rowid)")
    points = points.filter(pl.col("value").is_not_null())
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
    points = points.with_columns(value.alias("value"), pl.col("step").fill_null(0))
    return order_points(points)


_COLUMNS = (("value", "f8"), ("timestamp", "i8"), ("step", "i8"), ("is_nan", "i8"), ("_line", "i8"))


def _key_points(conn: sqlite3.Connection, run_id: str, key: str, index: int):
    """One metric's rows, streamed into numpy rather than a list of Python tuples."""
    import numpy as np
    import polars as pl

    query = (
        "SELECT value, timestamp, step, is_nan, rowid FROM metrics WHERE run_uuid = ? AND key = ?"
    )
    columns: dict[str, np.ndarray | list]
    try:
        array = np.fromiter(conn.execute(query, (run_id, key)), dtype=np.dtype(list(_COLUMNS)))
        columns = {name: array[name] for name, _ in _COLUMNS}
    except TypeError:  # a NULL where MLflow's schema says NOT NULL: take the slow, tolerant path
        rows = conn.execute(query, (run_id, key)).fetchall()
        columns = {name: [row[i] for row in rows] for i, (name, _) in enumerate(_COLUMNS)}
    schema = {name: pl.Float64 if kind == "f8" else pl.Int64 for name, kind in _COLUMNS}
    frame = pl.DataFrame(columns, schema=schema)
    return frame.with_columns(
        pl.lit(key).alias("key"), pl.lit(index, dtype=pl.Int64).alias("_key_index")
    )


def read(target, options: ReadOptions) -> RunData:
    """Read the selected run(s) of an MLflow sqlite database into the canonical frame."""
    path = db_path(target)
    where = str(target)
    if not path.is_file():
        raise StabInputError(where, "no such sqlite file")
    try:
        conn = _connect(path)
    except sqlite3.Error as err:
        raise StabInputError(where, f"cannot open sqlite database read-only: {err}") from None
    try:
        if not _has_mlflow_tables(conn):
            raise StabInputError(where, "not an MLflow database (no 'metrics' and 'runs' tables)")
        runs = list_runs(conn, options, where)
        chosen, ranks = select_runs(
            runs, options, where, fetch_rank_info=lambda run: _load_params_tags(conn, run)
        )
        return build_run(
            where,
            NAME,
            chosen,
            ranks,
            options,
            load_meta=lambda run: _load_params_tags(conn, run),
            load_points=lambda run, source: run_points(conn, run, source),
        )
    except sqlite3.Error as err:
        raise StabInputError(where, f"cannot read the MLflow tables: {err}") from None
    finally:
        conn.close()
