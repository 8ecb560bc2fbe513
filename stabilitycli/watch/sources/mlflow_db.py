"""Follow a run of an MLflow sqlite store while the client logs to it.

MLflow inserts each metric point as a row of `metrics`; rows get rising rowids,
so a poll asks for the run's rows after the last rowid it saw (the run's rowid
index: the cost is the rows added, not the run's length) and the run's status
(FINISHED, FAILED or KILLED end the watch). The database is opened read-only
for each poll, as the reader opens it, and closed again: a job is never
blocked for longer than one query. `snapshot` orders each metric's rows as the
reader's query returns them and hands them to the reader's own tail, so it is
`read` on the rows committed by that poll.
"""

from __future__ import annotations

import sqlite3

from stabilitycli.core.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest.mlflow import database as db
from stabilitycli.ingest.mlflow._common import MlflowRun, build_run, select_runs
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.sources._live_files import Once, input_boundary
from stabilitycli.watch.sources._mlflow_live import ended, unloaded


class _Metric:
    """One metric's rows so far: usable ones, and rejected rowids by reason."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.bad: dict[str, list[int]] = {}


class DatabaseFollower:
    def __init__(self, target: str, options: ReadOptions) -> None:
        self.where = str(target)
        self.path = db.db_path(target)
        self.options = options
        self.display = self.where
        try:
            with db.opened(self.path, limits=options.limits) as conn:
                if not db.has_mlflow_tables(conn):
                    raise StabInputError(self.where, "not an MLflow database")
                runs = db.list_runs(conn, options, self.where)
                chosen, self.ranks = select_runs(
                    runs, options, self.where, lambda run: db.load_params_tags(conn, run)
                )
                self.runs = [self._with_meta(conn, run) for run in chosen]
        except sqlite3.Error as err:
            raise StabInputError(self.where, db.sqlite_reason(err)) from None
        self.metrics: dict[str, dict[str, _Metric]] = {run.run_id: {} for run in self.runs}
        self.last_rowid = dict.fromkeys(self.metrics, 0)
        self.rows_fetched = 0  # every row a poll took from the database: what polls cost
        self.once = Once()

    @staticmethod
    def _with_meta(conn: sqlite3.Connection, run: MlflowRun) -> MlflowRun:
        fresh = unloaded(run)
        db.load_params_tags(conn, fresh)
        fresh.name = run.name  # as selected: the reader names the run before reading its tags
        return fresh

    def poll(self) -> Poll:
        result = Poll()
        if not self.path.is_file():
            self.once.tell(result.problems, "file", f"{self.where}: gone (deleted or moved)")
            return result
        self.once.clear("file")
        try:
            with db.opened(self.path, limits=self.options.limits) as conn:
                over = [self._poll_run(conn, index, result) for index in range(len(self.runs))]
        except sqlite3.Error as err:
            self.once.tell(result.problems, "sql", f"{self.where}: {db.sqlite_reason(err)}")
            return result
        except (OSError, StabInputError) as err:
            why = err.reason if isinstance(err, StabInputError) else (err.strerror or str(err))
            self.once.tell(result.problems, "sql", f"{self.where}: cannot read it ({why})")
            return result
        self.once.clear("sql")
        if all(over):
            result.ended = "; ".join(o for o in over if o)
        return result

    def _poll_run(self, conn: sqlite3.Connection, index: int, result: Poll) -> str | None:
        run = self.runs[index]
        metrics = self.metrics[run.run_id]
        last = self.last_rowid[run.run_id]
        for key, good, problem, rowid in db.rows_after(conn, run.run_id, last):
            metric = metrics.get(key) or metrics.setdefault(key, _Metric())
            if good is None:
                metric.bad.setdefault(problem, []).append(rowid)
            else:
                metric.rows.append(good)
            last = rowid
            result.records_read += 1
            self.rows_fetched += 1
        self.last_rowid[run.run_id] = last
        self.runs[index] = self._with_meta(conn, run)  # params logged late count too
        return ended(db.run_status(conn, run.run_id), run.label)

    def _points(self, run: MlflowRun, source):
        import numpy as np
        import polars as pl

        metrics = self.metrics[run.run_id]
        if not metrics:
            return None
        parts = []
        for index, key in enumerate(sorted(metrics)):
            metric = metrics[key]
            db.reject_rows(source, key, metric.bad)
            array = np.array(metric.rows, dtype=np.dtype(list(db.ROW_DTYPE)))
            # the reader's query walks the primary key (key, timestamp, step, run, value,
            # is_nan): each metric's rows in that order, whatever order they were logged in
            frame = db.key_frame(array).sort(["timestamp", "step", "value", "is_nan"])
            parts.append(
                frame.with_columns(
                    pl.lit(key).alias("key"), pl.lit(index, dtype=pl.Int64).alias("_key_index")
                )
            )
        return db.finish_points(parts, source)

    def snapshot(self) -> RunData:
        with input_boundary(self.where, db.NAME):
            return self._snapshot()

    def _snapshot(self) -> RunData:
        return build_run(
            self.where,
            db.NAME,
            [unloaded(run) if not (run.params or run.tags) else run for run in self.runs],
            self.ranks,
            self.options,
            load_meta=lambda run: None,
            load_points=self._points,
        )

    def close(self) -> None:
        """The database is opened for each poll only."""


def follow(target: str, options: ReadOptions) -> DatabaseFollower:
    return DatabaseFollower(target, options)
