"""The results store: every run's `stab.analysis/1` document, in one SQLite file.

Why SQLite (the stdlib `sqlite3`) and not a Parquet dataset or DuckDB: it is no new
dependency; it is one file, which a CI job caches and restores as an artifact (the
rollback journal, not WAL, so nothing sits beside it between sweeps); a sweep's writes
are one transaction, so a sweep killed half-way leaves the previous answers whole; a
rerun looks runs up one by one by location, which is what an indexed row store does
well; and anyone can read it without stab: `sqlite3 results.db 'select * from runs'`.

Tables (schema version in `PRAGMA user_version`, stab's mark in `application_id`):

- `runs`: one row per run location, its latest result: the fingerprint parts
  (kind, size_bytes, mtime_ns, content_sha256), stab_version, thresholds_sha256,
  options_sha256, the document (JSON text) or the input error, verdict, cause,
  severity, worst (the worst finding's Severity value), first_bad_step,
  analysed_at (UTC) and the sweep that analysed it.
- `fragments`: a run's CI rendering (github, junit, markdown, concise) per format and
  --fail-on, made beside the document, so a reused run prints as a fresh one would.
- `history`: a run's previous result each time a sweep replaced it with a different one.
- `sweeps`: id, started_at, finished_at (UTC), runs, analysed, reused, failed.
- `sweep_runs`: what each of the last two sweeps said of each of its runs, so
  `stab summary --changed` can say what is new, gone or changed.
- `walks`: the runs a `--recursive` walk found below a folder, with a hash of that
  folder's tree: while no file or folder below it changed, a rerun takes the list
  instead of sniffing every file again (most of a rerun's time otherwise).

Only the parent process writes (workers send documents back), one transaction per
sweep.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import Severity
from stabilitycli.core.records import dataclass
from stabilitycli.ingest import remote
from stabilitycli.pipeline import batch
from stabilitycli.pipeline.batch import BatchSettings, RunResult, first_bad_step
from stabilitycli.results import fingerprint

SCHEMA_VERSION = 1
APPLICATION_ID = 0x53544142  # "STAB": tells a stab store from any other SQLite file
# sweeps whose per-run answers are kept: the latest and the one before, for --changed
SWEEPS_KEPT = 2

_SCHEMA = """
CREATE TABLE sweeps (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    runs INTEGER,
    analysed INTEGER,
    reused INTEGER,
    failed INTEGER
);
CREATE TABLE runs (
    location TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    size_bytes INTEGER,
    mtime_ns INTEGER,
    content_sha256 TEXT,
    stab_version TEXT NOT NULL,
    thresholds_sha256 TEXT NOT NULL,
    options_sha256 TEXT NOT NULL,
    document TEXT,
    error TEXT,
    verdict TEXT NOT NULL,
    cause TEXT,
    severity TEXT,
    worst INTEGER,
    first_bad_step INTEGER,
    analysed_at TEXT NOT NULL,
    sweep_id INTEGER REFERENCES sweeps(id)
);
CREATE TABLE fragments (
    location TEXT NOT NULL,
    format TEXT NOT NULL,
    fail_on TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (location, format, fail_on)
);
CREATE TABLE history (
    location TEXT NOT NULL,
    sweep_id INTEGER,
    verdict TEXT,
    document TEXT,
    error TEXT,
    analysed_at TEXT,
    replaced_by_sweep INTEGER
);
CREATE INDEX history_location ON history (location);
CREATE TABLE walks (
    root TEXT PRIMARY KEY,
    tree_sha256 TEXT NOT NULL,
    options_sha256 TEXT NOT NULL,
    runs TEXT NOT NULL
);
CREATE TABLE sweep_runs (
    sweep_id INTEGER NOT NULL,
    location TEXT NOT NULL,
    run TEXT,
    verdict TEXT NOT NULL,
    cause TEXT,
    severity TEXT,
    first_bad_step INTEGER,
    error TEXT,
    exit_status INTEGER NOT NULL,
    PRIMARY KEY (sweep_id, location)
);
"""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _stored_json(text: Any) -> Any:
    """What a stored JSON column holds, or None when it is not JSON (edited by hand, or
    damaged): the store is a cache, and a damaged entry is only a miss."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def open_store(path: str | Path, create: bool) -> sqlite3.Connection:
    """The store at `path`, its schema checked; created when missing and `create`.

    Anything else (a missing store to read, a file that is not SQLite, another
    program's database, a newer schema) is a StabInputError: one line, exit 2."""
    path = Path(path)
    if not create and not path.is_file():
        raise StabInputError(str(path), "no such results store")
    try:
        if create:
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        else:
            # read-only: `stab summary` never creates or changes a store
            conn = sqlite3.connect(
                path.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None
            )
        _check_schema(conn, path, create)
        # text damaged in the file reads as text that is no JSON (a cache miss), not as an
        # error halfway through a sweep
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        damage = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as err:
        raise StabInputError(str(path), f"not a stab results store ({err})") from None
    if damage != "ok":
        conn.close()
        raise StabInputError(
            str(path), f"the results store is damaged ({damage}); remove it to start afresh"
        )
    return conn


def _check_schema(conn: sqlite3.Connection, path: Path, create: bool) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and tables == 0:
        if not create:
            raise StabInputError(str(path), "not a stab results store (an empty database)")
        conn.executescript(
            f"BEGIN; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID};"
            f" PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        )
        return
    if app_id != APPLICATION_ID:
        raise StabInputError(str(path), "not a stab results store (another SQLite database)")
    if version > SCHEMA_VERSION:
        raise StabInputError(
            str(path),
            f"results store schema {version} is newer than this stab reads "
            f"({SCHEMA_VERSION}); upgrade stab",
        )


@dataclass
class _Key:
    """What a run's stored result must match to be used again."""

    fingerprint: fingerprint.Fingerprint
    thresholds_sha256: str
    options_sha256: str


@dataclass
class Sweep:
    """One `stab analyze --results` sweep: `known` is `discover`'s hook, `stored` is
    `analyze_many`'s, `finish` writes what was analysed, in one transaction."""

    conn: sqlite3.Connection
    settings: BatchSettings
    fragment_format: str | None  # the CI format whose per-run fragments are printed
    started_at: str = field(default_factory=utc_now)
    reused: set[str] = field(default_factory=set)
    _keys: dict[str, _Key] = field(default_factory=dict)
    _prints: dict[str, fingerprint.Fingerprint | None] = field(default_factory=dict)
    _known_files: dict[str, tuple[int, int]] | None = None
    _walks: dict[str, tuple[str, list[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._options = fingerprint.options_sha256(
            self.settings.options, self.settings.select, self.settings.ignore
        )
        self._thresholds = fingerprint.ThresholdKeys(self.settings.set_values)

    def discover(self, targets: list[str], recursive: bool, warnings: list[str]) -> list[str]:
        """`batch.discover`, with each folder's walk taken from the store while nothing
        below the folder changed (and stored when it walked cleanly)."""
        runs: list[str] = []
        for target in targets:
            tree = None
            remote_prefix = recursive and remote.is_object_uri(target)
            remote_prefix = remote_prefix and remote.file_uri_path(target) is None
            if remote_prefix:
                options = self.settings.options
                tree = remote.content_sha256(target, options.limits, options.endpoint_url)
            elif recursive and "://" not in target and os.path.isdir(target):
                tree = fingerprint.walk_sha256(target)
            found = self._walked(target, tree) if tree is not None else None
            if found is None:
                said: list[str] = []
                if remote_prefix:
                    found = self._walk_remote(target, said)
                else:
                    found = batch.discover([target], recursive, said, known=self.known)
                warnings.extend(said)
                if tree is not None and not said:
                    self._walks[target] = (tree, found)
            runs.extend(found)
        return list(dict.fromkeys(runs))  # each run once, in the order first given

    def _walk_remote(self, prefix: str, warnings: list[str]) -> list[str]:
        """The runs below an object-store prefix, named by their URIs: found in a local
        copy of the prefix (deleted after the walk; each run is fetched again when it is
        analysed, and only then)."""
        options = self.settings.options
        said: list[str] = []
        with remote.staged(prefix, options.limits, options.endpoint_url, said.append) as local:
            found = batch.discover([str(local)], True, said)
            uri = prefix.rstrip("/")
            warnings.extend(w.replace(str(local), uri) for w in said)
            return [run.replace(str(local), uri) for run in found]

    def _walked(self, root: str, tree: str) -> list[str] | None:
        row = self.conn.execute(
            "SELECT runs FROM walks WHERE root = ? AND tree_sha256 = ? AND options_sha256 = ?",
            (root, tree, self._options),
        ).fetchone()
        runs = None if row is None else _stored_json(row[0])
        if not isinstance(runs, list) or not all(isinstance(run, str) for run in runs):
            return None  # never stored, or damaged since: walked again
        return runs

    def known(self, location: str) -> bool:
        """`discover`'s hook: the file was found to be a run by this stab version and has
        not changed since (whatever it was read with), so the walk need not sniff it."""
        if self._known_files is None:
            # one query for the whole walk: a file found before, with its stat then
            self._known_files = {
                loc: (size, mtime)
                for loc, size, mtime in self.conn.execute(
                    "SELECT location, size_bytes, mtime_ns FROM runs"
                    " WHERE kind = 'file' AND stab_version = ?",
                    (_version(),),
                )
            }
        before = self._known_files.get(location)
        if before is None:
            return False
        print_ = self._print(location)
        return print_ is not None and (print_.size_bytes, print_.mtime_ns) == before

    def _print(self, location: str) -> fingerprint.Fingerprint | None:
        if location not in self._prints:
            self._prints[location] = fingerprint.of_location(location, self.settings.options)
        return self._prints[location]

    def stored(self, location: str) -> RunResult | None:
        """The run's stored result when its content and settings are unchanged, else None
        (and the key is kept for `finish`)."""
        print_ = self._print(location)
        thresholds = None if print_ is None else self._thresholds(location, print_)
        if print_ is None or thresholds is None:
            return None  # nothing to compare: analysed every time, never stored
        self._keys[location] = _Key(print_, thresholds, self._options)
        row = self.conn.execute(
            "SELECT document, error, worst FROM runs WHERE location = ? AND kind = ?"
            " AND size_bytes IS ? AND mtime_ns IS ? AND content_sha256 IS ?"
            " AND thresholds_sha256 = ? AND options_sha256 = ? AND stab_version = ?",
            (
                location,
                print_.kind,
                print_.size_bytes,
                print_.mtime_ns,
                print_.content_sha256,
                thresholds,
                self._options,
                _version(),
            ),
        ).fetchone()
        if row is None:
            return None
        document, error, worst = row
        if error is not None:
            result = RunResult(location, error=error)
        else:
            fragment = None
            if self.fragment_format is not None:
                found = self.conn.execute(
                    "SELECT text FROM fragments WHERE location = ? AND format = ? AND fail_on = ?",
                    (location, self.fragment_format, self.settings.fail_on),
                ).fetchone()
                if found is None:
                    return None  # this format was never printed for it: analyse to make it
                fragment = found[0]
            doc = _stored_json(document)
            if not isinstance(doc, dict):
                return None  # a document damaged in the store: analysed again, and replaced
            if worst is not None and worst not in {int(s) for s in Severity}:
                return None  # so is a damaged severity
            result = RunResult(location, doc=doc, fragment=fragment, worst=worst)
        self.reused.add(location)
        return result

    def finish(self, results: list[RunResult], exit_of: Any) -> dict[str, int]:
        """Store every run analysed afresh (its previous result to `history` when it
        differs) and the sweep's answers, and close the store; `exit_of(result)` is a
        run's own exit status. The sweep's counts."""
        fresh = [
            r
            for r in results
            if r.path not in self.reused and r.path in self._keys and not r.transient
        ]
        counts = {
            "runs": len(results),
            "analysed": len(results) - len(self.reused),
            "reused": len(self.reused),
            "failed": sum(not r.ok for r in results),
        }
        now = utc_now()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            sweep_id = conn.execute(
                "INSERT INTO sweeps (started_at, finished_at, runs, analysed, reused, failed)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self.started_at, now, *counts.values()),
            ).lastrowid
            self._keep_history(fresh, sweep_id)
            conn.executemany(
                "INSERT OR REPLACE INTO runs VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [self._run_row(r, now, sweep_id) for r in fresh],
            )
            self._store_fragments(fresh)
            conn.executemany(
                "INSERT INTO sweep_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(sweep_id, *_answer(r), exit_of(r)) for r in results],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO walks VALUES (?, ?, ?, ?)",
                [
                    (root, tree, self._options, json.dumps(runs))
                    for root, (tree, runs) in self._walks.items()
                ],
            )
            conn.execute(
                "DELETE FROM sweep_runs WHERE sweep_id NOT IN"
                " (SELECT id FROM sweeps ORDER BY id DESC LIMIT ?)",
                (SWEEPS_KEPT,),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()  # a sweep is finished once
        return counts

    def _keep_history(self, fresh: list[RunResult], sweep_id: int | None) -> None:
        # a result replaced by a different one: its old row goes to history first
        self.conn.executemany(
            "INSERT INTO history SELECT location, sweep_id, verdict, document, error,"
            " analysed_at, ? FROM runs WHERE location = ?"
            " AND (document IS NOT ? OR error IS NOT ?)",
            [(sweep_id, r.path, _document(r), r.error) for r in fresh],
        )

    def _run_row(self, r: RunResult, now: str, sweep_id: int | None) -> tuple:
        key = self._keys[r.path]
        _location, _run, verdict, cause, severity, first_bad, error = _answer(r)
        return (
            r.path,
            key.fingerprint.kind,
            key.fingerprint.size_bytes,
            key.fingerprint.mtime_ns,
            key.fingerprint.content_sha256,
            _version(),
            key.thresholds_sha256,
            key.options_sha256,
            _document(r),
            error,
            verdict,
            cause,
            severity,
            r.worst,
            first_bad,
            now,
            sweep_id,
        )

    def _store_fragments(self, fresh: list[RunResult]) -> None:
        # a run analysed afresh: fragments made from its old document are stale
        self.conn.executemany(
            "DELETE FROM fragments WHERE location = ?", [(r.path,) for r in fresh]
        )
        if self.fragment_format is None:
            return
        self.conn.executemany(
            "INSERT INTO fragments VALUES (?, ?, ?, ?)",
            [
                (r.path, self.fragment_format, self.settings.fail_on, r.fragment)
                for r in fresh
                if r.ok and r.fragment is not None
            ],
        )


def _version() -> str:
    from stabilitycli import __version__

    return __version__


def _document(r: RunResult) -> str | None:
    return None if r.doc is None else json.dumps(r.doc, allow_nan=False)


def _answer(r: RunResult) -> tuple:
    """location, run name, verdict, cause, severity, first bad step, error."""
    if not r.ok:
        return (r.path, r.path, "unreadable", None, None, None, r.error)
    doc = r.doc or {}
    verdict = doc.get("verdict", {})
    return (
        r.path,
        doc.get("source", {}).get("run") or r.path,
        verdict.get("code"),
        verdict.get("cause"),
        verdict.get("severity"),
        first_bad_step(doc),
        None,
    )
