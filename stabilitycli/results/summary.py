"""What a results store says about the latest sweep: `stab summary`'s `stab.summary/1`.

Queries only; the store is opened read-only. "Worst first": unreadable runs (they
fail a sweep with exit 2), then error verdicts, warnings, insufficient data, and
healthy last; within each, the earliest first bad step first (the run that went
wrong soonest), then the location.
"""

from __future__ import annotations

import sqlite3
from typing import Any

SCHEMA = "stab.summary/1"

_HEALTHY_RANK = 5


def _rank(row: str = "") -> str:
    """Worst first, as an SQL expression over a sweep_runs row (`row`: a table alias)."""
    p = f"{row}." if row else ""
    return (
        f"CASE WHEN {p}error IS NOT NULL THEN 0 WHEN {p}severity = 'error' THEN 1"
        f" WHEN {p}severity = 'warning' THEN 2 WHEN {p}verdict = 'insufficient-data' THEN 3"
        f" WHEN {p}verdict = 'healthy' THEN {_HEALTHY_RANK} ELSE 4 END"
    )


_RANK = _rank()
_RUN_COLUMNS = ("location", "run", "verdict", "cause", "severity", "first_bad_step", "error")


def summarise(conn: sqlite3.Connection, every_run: bool, changed: bool) -> dict[str, Any]:
    """The `stab.summary/1` document of the latest sweep in the store: its counts, its
    runs that are not healthy (every run with `every_run`), worst first, and with
    `changed` what differs from the sweep before it."""
    sweeps = conn.execute(
        "SELECT id, started_at, finished_at, runs, analysed, reused, failed"
        " FROM sweeps ORDER BY id DESC LIMIT 2"
    ).fetchall()
    keys = ("id", "started_at", "finished_at", "runs", "analysed", "reused", "failed")
    latest = dict(zip(keys, sweeps[0], strict=True)) if sweeps else None
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "sweep": latest,
        "not_healthy": 0,
        "runs": [],
    }
    if latest is None:
        if changed:
            doc["changed"] = None
        return doc
    doc["not_healthy"] = conn.execute(
        f"SELECT count(*) FROM sweep_runs WHERE sweep_id = ? AND {_RANK} < ?",
        (latest["id"], _HEALTHY_RANK),
    ).fetchone()[0]
    doc["runs"] = _records(
        conn.execute(
            f"SELECT {', '.join(_RUN_COLUMNS)} FROM sweep_runs"
            f" WHERE sweep_id = ? AND ({_RANK} < ? OR ?)"
            f" ORDER BY {_RANK}, first_bad_step IS NULL, first_bad_step, location",
            (latest["id"], _HEALTHY_RANK, every_run),
        )
    )
    if changed:
        doc["changed"] = _changed(conn, latest["id"], sweeps[1][0] if len(sweeps) > 1 else None)
    return doc


def _changed(conn: sqlite3.Connection, latest: int, previous: int | None) -> dict[str, Any]:
    """Runs new in the latest sweep, gone from it, and whose verdict changed (from, to)."""
    if previous is None:
        return {"previous_sweep": None, "new": [], "gone": [], "verdict_changed": []}
    columns = ", ".join(f"now.{c}" for c in _RUN_COLUMNS)
    new = conn.execute(
        f"SELECT {columns} FROM sweep_runs now WHERE now.sweep_id = ? AND NOT EXISTS"
        " (SELECT 1 FROM sweep_runs was WHERE was.sweep_id = ? AND was.location = now.location)"
        " ORDER BY now.location",
        (latest, previous),
    )
    gone = conn.execute(
        "SELECT was.location, was.verdict FROM sweep_runs was WHERE was.sweep_id = ?"
        " AND NOT EXISTS (SELECT 1 FROM sweep_runs now"
        " WHERE now.sweep_id = ? AND now.location = was.location) ORDER BY was.location",
        (previous, latest),
    )
    differ = conn.execute(
        f"SELECT {columns}, was.verdict FROM sweep_runs now JOIN sweep_runs was"
        " ON was.location = now.location AND was.sweep_id = ?"
        " WHERE now.sweep_id = ? AND was.verdict != now.verdict"
        f" ORDER BY {_rank('now')}, now.first_bad_step IS NULL, now.first_bad_step,"
        " now.location",
        (previous, latest),
    )
    return {
        "previous_sweep": previous,
        "new": _records(new),
        "gone": [{"location": loc, "verdict": verdict} for loc, verdict in gone],
        "verdict_changed": [
            {**dict(zip(_RUN_COLUMNS, row[:-1], strict=True)), "previous_verdict": row[-1]}
            for row in differ
        ],
    }


def _records(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    return [dict(zip(_RUN_COLUMNS, row, strict=True)) for row in cursor]
