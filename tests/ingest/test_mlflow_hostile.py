"""MLflow stores as a careless or hostile world leaves them (issue 12).

Damaged values in a sqlite store or a file store are rejected with their reason and
counted (rows read = used + rejected + rewritten), never turned into another number;
a locked or WAL-mode database is read without writing anything beside it or said to
be locked in one line. The tracking-server cases run against a small misbehaving
HTTP server on loopback.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.mlflow import database as mlflow_db
from stabilitycli.ingest.mlflow import file_store as mlflow_file
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
    _set(copy, "value", 1e19, step=20)  # a huge value is a value: kept as it is
    run = ingest.read(copy, ReadOptions(run="spike"))
    source = run.source
    assert run.frame["loss"][20] == 1e19
    assert source.rows_rejected == 1, source.rejections
    assert source.rejections[0].line == rowid and said in source.rejections[0].reason
    assert source.restarts == [] and source.rows_rewritten == 0  # no made-up resume
    _accounted(source)
    assert run.frame["loss"][10] is None and run.frame["grad_norm"][10] is not None
    assert run.frame["step"].to_list() == list(range(60))
    assert run.frame["loss"][30] == 9.5


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
    # with a live writer whose last change is only in the -wal: read, and nothing new
    writer = sqlite3.connect(copy)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        _set_with(writer, 4.25)
        present = _listing(tmp_path)
        assert present == ["mlflow.db", "mlflow.db-shm", "mlflow.db-wal"]
        assert ingest.read(copy, ReadOptions(run="spike")).frame["loss"][10] == 4.25
        assert _listing(tmp_path) == present
    finally:
        writer.close()


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


def test_sqlite_wal_without_shm_is_copied_only_within_max_input_bytes(tmp_path, monkeypatch):
    copy, writer = _wal_with_uncheckpointed_point(tmp_path)
    elsewhere = tmp_path / "copied"
    elsewhere.mkdir()
    shutil.copy(copy, elsewhere / "mlflow.db")
    shutil.copy(tmp_path / "mlflow.db-wal", elsewhere / "mlflow.db-wal")
    writer.close()
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", "4096")
    with pytest.raises(StabInputError) as err:
        ingest.read(elsewhere / "mlflow.db", ReadOptions(run="spike"))
    assert "max_input_bytes = 4 KiB" in str(err.value) and _listing(elsewhere) == [
        "mlflow.db",
        "mlflow.db-wal",
    ]


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
        (b"1700000000010 three 10\n", "value is not a number"),
        (b"1700000000010 1e400 10\n", "float64 range"),
        (b"1700000000010 3.\xff5 10\n", "value is not a number"),
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


def test_file_store_non_utf8_byte_anywhere_keeps_the_other_lines(tmp_path):
    folder = _file_run(tmp_path)
    _replace_line(folder, 20, b"\xfe\xff\n")
    # what is not damaged stays exactly as written: huge, infinite, NaN, MLflow < 1.0 lines
    _replace_line(folder, 10, b"1700000000010 1e300 10\n")
    _replace_line(folder, 11, b"1700000000011 -inf 11\n")
    _replace_line(folder, 12, b"1700000000012 nan 12\n")
    (folder / "metrics" / "old").write_text("1700000000000 2.5\n")
    run = ingest.read(folder)
    assert run.source.rows_rejected == 1 and run.source.rejections[0].line == 21
    assert run.frame["loss"][21:].to_list() == LOSS[21:]
    loss = run.frame["loss"]
    assert loss[10] == 1e300 and loss[11] == -math.inf and math.isnan(loss[12])
    assert run.frame["old"][0] == 2.5
    _accounted(run.source)


# --- a misbehaving tracking server on loopback --------------------------------------------

TOKEN = "tok-9f3c1e77-never-print-me"
RUN_ID = "0123456789abcdef0123456789abcdef"
# every wait below is a guard against a stuck test, never what a test asserts on
GUARD_S = 20.0


def _run_answer() -> dict:
    return {
        "run": {
            "info": {"run_id": RUN_ID, "run_name": "r", "experiment_id": "1"},
            "data": {"metrics": [{"key": "loss"}], "params": [], "tags": []},
        }
    }


def _history(steps=range(60)) -> dict:
    points = [
        {"key": "loss", "value": 2.0 - s / 100, "step": str(s), "timestamp": str(1700 + s)}
        for s in steps
    ]
    return {"metrics": points}


class _Api:
    """A fake tracking server: `route(handler, endpoint)` answers one request."""

    def __init__(self):
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.stop = threading.Event()

    def route(self, handler, endpoint: str) -> None:
        if endpoint == "runs/get":
            self.json(handler, _run_answer())
        elif endpoint == "metrics/get-history":
            self.json(handler, _history())
        else:
            self.json(handler, {"error_code": "NOT_FOUND", "message": "no"}, status=404)

    @staticmethod
    def json(handler, body, status: int = 200, raw: bytes | None = None, kind="application/json"):
        data = raw if raw is not None else json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _any(self) -> None:
        api: _Api = self.server.api  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        api.seen.append((self.path, dict(self.headers.items())))
        endpoint = self.path.split("/api/2.0/mlflow/", 1)[-1].split("?", 1)[0]
        # the client hanging up on us part way is what several tests want
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            api.route(self, endpoint)

    do_GET = do_POST = _any

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def _serve(api: _Api):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.block_on_close = False
    server.api = api  # type: ignore[attr-defined]
    # shutdown() waits for the loop to look at its flag: every 0.5 s by default, which was
    # half a second of every test here
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        api.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(GUARD_S)


@pytest.fixture
def limits(monkeypatch):
    """Small server limits, so that a test that reaches one is quick."""
    monkeypatch.setenv("STAB_LIMIT_SERVER_TOTAL_SECONDS", "30")
    monkeypatch.setenv("STAB_LIMIT_SERVER_REQUEST_SECONDS", "1")
    monkeypatch.setenv("STAB_LIMIT_SERVER_MAX_PAGES", "5")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)


def _error(url: str, **options) -> str:
    with pytest.raises(StabInputError) as err:
        ingest.read(url, ReadOptions(run=RUN_ID, **options))
    message = str(err.value)
    assert "\n" not in message and TOKEN not in message
    return message


class _PagesForever(_Api):
    def route(self, handler, endpoint):
        if endpoint == "metrics/get-history":
            page = sum(1 for path, _ in self.seen if "get-history" in path)
            body = _history(range(page, page + 1))
            if page < self.guard_pages:  # a reader with no bound ends here, and fails the test
                body["next_page_token"] = f"page-{page + 1}"
            if self.stop.wait(self.delay):
                return
            self.json(handler, body)
        else:
            super().route(handler, endpoint)

    delay = 0.0
    guard_pages = 300


def test_server_that_pages_forever_stops_at_max_pages(limits):
    api = _PagesForever()
    with _serve(api) as url:
        message = _error(url)
    assert url in message and "server_max_pages = 5" in message
    assert sum(1 for path, _ in api.seen if "get-history" in path) == 5


def test_server_that_pages_forever_slowly_stops_at_the_total_time(limits, monkeypatch):
    monkeypatch.setenv("STAB_LIMIT_SERVER_MAX_PAGES", "1000000")
    monkeypatch.setenv("STAB_LIMIT_SERVER_TOTAL_SECONDS", "1")
    api = _PagesForever()
    api.delay = 0.02
    with _serve(api) as url:
        message = _error(url)
    assert url in message and "server_total_seconds = 1" in message


def test_server_sending_the_same_page_token_again_is_one_line(limits, monkeypatch):
    monkeypatch.setenv("STAB_LIMIT_SERVER_MAX_PAGES", "1000000")

    class SameToken(_Api):
        def route(self, handler, endpoint):
            if endpoint == "metrics/get-history":
                again = sum(1 for path, _ in self.seen if "get-history" in path) < 300
                self.json(handler, {**_history(range(1)), "next_page_token": "again" * again})
            else:
                super().route(handler, endpoint)

    api = SameToken()
    with _serve(api) as url:
        message = _error(url)
    assert "token again" in message
    assert sum(1 for path, _ in api.seen if "get-history" in path) == 2


class _Trickle(_Api):
    """Answers get-history a byte at a time (headers too, with `in_headers`), then gives up;
    `sent`: the bytes it wrote before it gave up or the client hung up."""

    in_headers = False
    sent = 0

    def route(self, handler, endpoint):
        if endpoint != "metrics/get-history":
            return super().route(handler, endpoint)
        body = json.dumps(_history()).encode()
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        if not self.in_headers:
            handler.wfile.write(head)
            head = b""
        for byte in (head + body)[:_TRICKLE_BYTES]:
            if self.stop.wait(0.05):
                return
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:  # the client cut the connection at its deadline
                return
            self.sent += 1
        handler.close_connection = True


# the trickle's whole length: 10 s at a byte every 50 ms, ten times the test's deadline
_TRICKLE_BYTES = 200


@pytest.mark.parametrize("in_headers", [False, True])
def test_server_that_trickles_is_cut_at_the_request_deadline(limits, in_headers):
    api = _Trickle()
    api.in_headers = in_headers
    with _serve(api) as url:
        message = _error(url)
        # cut at its deadline, the read hung up on the server before the trickle ended (a
        # read that only looked at the clock between chunks waited for all of it)
        assert api.sent < _TRICKLE_BYTES
    assert url in message and "server_request_seconds = 1" in message


def test_server_that_hangs_is_cut_at_the_request_deadline(limits):
    class Hang(_Api):
        def route(self, handler, endpoint):
            if endpoint == "metrics/get-history":
                self.stop.wait(GUARD_S)
                handler.close_connection = True
            else:
                super().route(handler, endpoint)

    with _serve(Hang()) as url:
        message = _error(url)
    assert url in message and "server_request_seconds = 1" in message


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_json_is_refused_by_depth(limits, depth):
    class Deep(_Api):
        def route(self, handler, endpoint):
            raw = b'{"run": ' + b"[" * depth + b"]" * depth + b"}"
            self.json(handler, None, raw=raw)

    with _serve(Deep()) as url:
        message = _error(url)
    assert url in message and "max_json_depth = 64" in message


@pytest.mark.parametrize("status", [200, 500])
def test_html_page_instead_of_json_is_one_line_quoting_it(limits, status):
    class Html(_Api):
        def route(self, handler, endpoint):
            page = b"<html>\n<body>Proxy Error: upstream went away</body>\n</html>\n"
            self.json(handler, None, status=status, raw=page, kind="text/html")

    with _serve(Html()) as url:
        message = _error(url)
    assert url in message and "<html>" in message
    if status == 500:
        assert "HTTP 500" in message


def test_bad_points_from_the_server_are_rejected_rows(limits):
    class BadPoints(_Api):
        def route(self, handler, endpoint):
            if endpoint == "metrics/get-history":
                body = _history()
                body["metrics"][10]["step"] = "60.5"
                body["metrics"][11]["value"] = "loss"
                body["metrics"][12]["value"] = [1]
                body["metrics"][13]["timestamp"] = 1e19
                self.json(handler, body)
            else:
                super().route(handler, endpoint)

    with _serve(BadPoints()) as url:
        run = ingest.read(url, ReadOptions(run=RUN_ID))
    source = run.source
    assert source.rows_rejected == 4 and source.restarts == [] and source.rows_rewritten == 0
    assert {r.line for r in source.rejections} == {11, 12, 13, 14}
    _accounted(source)
    assert run.frame["step"].to_list() == [s for s in range(60) if s not in (10, 11, 12, 13)]


class _Redirect(_Api):
    """Sends every API call on to `target` (another origin, or its own /moved/ path)."""

    def __init__(self, target: str):
        super().__init__()
        self.target = target

    def route(self, handler, endpoint):
        if handler.path.startswith("/moved/"):
            handler.path = handler.path[len("/moved") :]
            return super().route(handler, endpoint)
        handler.send_response(302)
        handler.send_header("Location", self.target + handler.path)
        handler.send_header("Content-Length", "0")
        handler.end_headers()


def test_token_goes_only_to_its_origin_on_a_redirect(limits):
    other = _Api()
    with _serve(other) as elsewhere:
        origin = _Redirect(elsewhere)
        with _serve(origin) as url:
            run = ingest.read(url, ReadOptions(run=RUN_ID))
    assert run.frame.height == 60
    assert origin.seen and all(h.get("Authorization") == f"Bearer {TOKEN}" for _, h in origin.seen)
    assert other.seen and not any("Authorization" in h for _, h in other.seen)
    assert not any(TOKEN in str(h) for _, h in other.seen)
    # a redirect within the origin keeps it
    same = _Api()
    with _serve(same) as url:
        same.__class__ = type("SameOrigin", (_Redirect,), {})
        same.target = url + "/moved"  # type: ignore[attr-defined]
        assert ingest.read(url, ReadOptions(run=RUN_ID)).frame.height == 60
    moved = [h for path, h in same.seen if path.startswith("/moved/")]
    assert moved and all(h.get("Authorization") == f"Bearer {TOKEN}" for h in moved)


def test_basic_credentials_in_the_url_stay_home_and_unprinted(limits, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
    other = _Api()
    with _serve(other) as elsewhere:
        origin = _Redirect(elsewhere)
        with _serve(origin) as url:
            with_user = url.replace("http://", "http://alice:pw-s3cret-77@")
            run = ingest.read(with_user, ReadOptions(run=RUN_ID))
    assert origin.seen[0][1].get("Authorization", "").startswith("Basic ")
    assert not any("Authorization" in h for _, h in other.seen)
    assert "pw-s3cret-77" not in run.source.path and run.source.path == url


def test_token_never_printed_even_when_the_server_echoes_it(limits, cli, tmp_path):
    class Echo(_Api):
        def route(self, handler, endpoint):
            said = handler.headers.get("Authorization", "")
            body = {"error_code": "PERMISSION_DENIED", "message": f"{said} may not read this"}
            self.json(handler, body, status=403)

    with _serve(Echo()) as url:
        message = _error(url)
        results = [
            cli("analyze", url, "--run", RUN_ID, "--format", fmt)
            for fmt in ("terminal", "json", "github", "junit", "markdown", "concise")
        ]
    assert "403" in message
    for result in results:
        assert result.exit_code == 2
        assert TOKEN not in result.stdout + result.stderr
    # and in no output of a good read through a redirect to another origin
    other = _Api()
    with _serve(other) as elsewhere, _serve(_Redirect(elsewhere)) as url:
        outputs = []
        for fmt in ("terminal", "json", "github", "junit", "markdown", "concise"):
            result = cli("analyze", url, "--run", RUN_ID, "--format", fmt)
            assert result.exit_code in (0, 1), result.stderr
            outputs.append(result.stdout + result.stderr)
        report = tmp_path / "report.html"
        result = cli("report", url, "--run", RUN_ID, "-o", report)
        outputs.append(result.stdout + result.stderr + report.read_text(errors="replace"))
    assert outputs and not any(TOKEN in text for text in outputs)


# --- ranks from tags and names ------------------------------------------------------------


def _two_runs(tmp_path: Path, tags: tuple[str, str], names: tuple[str, str]) -> Path:
    """An experiment holding the spike run twice, with the given rank tags and run names."""
    first = _file_run(tmp_path)
    experiment = first.parent
    second = experiment / ("f" * 32)
    shutil.copytree(first, second)
    for folder, tag, name in zip((first, second), tags, names, strict=True):
        meta = folder / "meta.yaml"
        text = meta.read_text().replace(first.name, folder.name)
        text = "\n".join(
            f"run_name: {name}" if line.startswith("run_name:") else line
            for line in text.splitlines()
        )
        meta.write_text(text + "\n")
        (folder / "tags" / "mlflow.runName").write_text(name)
        if tag:
            (folder / "tags" / "rank").write_text(tag)
    return experiment


@pytest.mark.parametrize(
    ("tags", "names"),
    [
        (("\u00b2", "1"), ("a", "b")),  # "²".isdigit() is true, int("²") fails
        (("", ""), ("rank-99999999999999999999999", "rank-1")),
        (("99999999999999999999999", "1"), ("a", "b")),
    ],
)
def test_odd_rank_tags_and_names_are_not_ranks(tmp_path, tags, names):
    experiment = _two_runs(tmp_path, tags, names)
    with pytest.raises(StabInputError) as err:
        ingest.read(experiment)
    assert "2 runs found" in str(err.value) and "\n" not in str(err.value)


def test_a_short_password_in_the_url_is_neither_shown_nor_blanking_other_text(limits):
    from tests.ingest._mlflow_server_proc import free_port

    url = f"http://127.0.0.1:{free_port()}"
    message = _error(url.replace("http://", "http://u:p@") + "/#/experiments/3")
    assert message.startswith(f"{url}/#/experiments/3: cannot reach the MLflow server")


def test_file_store_metric_file_past_max_input_bytes_names_the_limit(tmp_path, monkeypatch):
    # the message gave the file's own size as the limit
    folder = _file_run(tmp_path)
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", "1024")
    with pytest.raises(StabInputError) as err:
        ingest.read(folder)
    assert "max_input_bytes = 1 KiB" in str(err.value)
