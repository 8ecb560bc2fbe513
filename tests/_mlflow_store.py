"""A new, empty MLflow sqlite store in a moment, instead of the client's schema migrations.

MLflow creates a sqlite store by running its whole Alembic history (68 migrations in MLflow 3.17,
each committed to disk): 1-2 CPU-seconds and 3-10 s of wall on a loaded two-core machine,
for every test, job or server that starts from a new database. Here the first store of a
process is created by MLflow itself, once, and every later one is a copy of it with the
`Default` experiment's row rewritten as MLflow writes it for the new store: the same
tables, schema revision and rows as a store the client or `mlflow server` would create.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path


@functools.cache
def _template() -> Path:
    """A store MLflow created and migrated, kept for this process."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(tempfile.mkdtemp(prefix="stab-tests-mlflow-"))
    atexit.register(shutil.rmtree, folder, True)
    db = folder / "empty.db"
    store = SqlAlchemyStore(f"sqlite:///{db}", str(folder / "artifacts"))
    store.engine.dispose()  # no connection left open on the file that is copied
    return db


def new_sqlite_store(db: Path, artifact_root: Path | None = None) -> str:
    """Create `db` as MLflow would for a store whose artifacts go under `artifact_root`
    (MLflow's default: ./mlruns of the working directory); returns its tracking URI."""
    root = (artifact_root or Path.cwd() / "mlruns").resolve()
    shutil.copyfile(_template(), db)
    now_ms = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE experiments SET artifact_location = ?, creation_time = ?,"
            " last_update_time = ? WHERE experiment_id = 0",
            (str(root / "0"), now_ms, now_ms),
        )
    conn.close()
    return f"sqlite:///{db}"
