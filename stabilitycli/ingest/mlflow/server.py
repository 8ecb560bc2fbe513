"""An MLflow tracking server, read over its REST API with the standard library.

Endpoints (MLflow REST API 2.0):

* `experiments/get-by-name`, `experiments/get`, `experiments/search`: which experiments;
* `runs/get`, `runs/search`: which runs, their params, tags and metric keys;
* `metrics/get-history`: every point of one metric, paged with
  `max_results`/`page_token`.

`get-history-bulk-interval` (what the UI charts use) is never called: it
returns a downsampled view, and a single NaN step must not be sampled away.
NaN/Inf arrive as the JSON strings "NaN"/"Infinity"/"-Infinity". A server on
a sqlite store clamps Inf to the largest double, which is mapped back as in
`mlflow_db`.

The target is the server URL (`http://host:5000`), optionally a UI link
(`http://host:5000/#/experiments/3/runs/<run_id>`) that names the run.
Credentials come from the same environment variables the mlflow client reads
(`MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`), or from
`user:password@` in the URL. They go only to the origin (scheme, host, port)
of the URL given: a redirect to another origin, `http` to `https` on the same
host included, is followed without them, and no message or report shows them.
Time and pages are bounded by `server_*` in `ingest/limits.py`.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import itertools
import json
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace

from stabilitycli.core.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest.limits import InputLimits, limit_hit
from stabilitycli.ingest.mlflow._common import MlflowRun, build_run, order_points, select_runs
from stabilitycli.ingest.mlflow.database import INF_NOTE
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import reject_many

NAME = "mlflow_server"
API = "/api/2.0/mlflow/"
# points per get-history page; servers that cap lower (Databricks: 25,000) get that
PAGE_POINTS = 100_000
FALLBACK_PAGE_POINTS = 25_000
SEARCH_PAGE_RUNS = 1000
MAX_REDIRECTS = 5
# an error page is read only this far: its first line is all the message shows
ERROR_BODY_BYTES = 64 * 1024
_UI_RUN = re.compile(r"experiments/([^/]+)/runs/([0-9a-f]{32})")
_UI_EXPERIMENT = re.compile(r"experiments/([^/?]+)")
_INT64 = 2**63


def sniff_uri(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def sniff(path, head: bytes) -> bool:
    return False  # a server is never a local path


def _origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: what a credential is given for (RFC 6454)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def without_userinfo(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class Client:
    """A few JSON calls against one server, every failure one readable line.

    Bounded in time as a whole (`server_total_seconds`) and per request
    (`server_request_seconds`, body included: a socket timeout only bounds the
    wait for each byte, so a server sending one byte every few seconds would
    never trip it). The credential goes only to the origin it was given for.
    """

    def __init__(self, base: str, where: str, limits: InputLimits):
        parts = urllib.parse.urlsplit(base)
        self.base = without_userinfo(base).rstrip("/")
        self.where = where
        self.limits = limits
        self.origin = _origin(self.base)
        self.started = time.monotonic()
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self.secrets: list[str] = []
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        if not token and not user and parts.username:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
        self.auth: str | None = None
        if token:
            self.auth = f"Bearer {token}"
            self.secrets.append(token)
        elif user:
            secret = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.auth = "Basic " + secret
            self.secrets += [secret, password]
        self._live: list[http.client.HTTPConnection] = []
        self._opener = urllib.request.build_opener(
            _OriginRedirects(self), _TrackedHTTP(self._live), _TrackedHTTPS(self._live)
        )

    def redact(self, text: str) -> str:
        """`text` with every credential blanked: a server may echo one in an error.

        Matched only where it does not run on into letters or digits, so that a
        short password such as "p" does not blank the p of every "http".
        """
        for secret in sorted(filter(None, self.secrets), key=len, reverse=True):
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
        return text

    def call(self, endpoint: str, params: dict | None = None, body: dict | None = None) -> dict:
        url = self.base + API + endpoint
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url, data=data, headers=self.headers, method="POST" if data else "GET"
        )
        if self.auth:
            request.add_header("Authorization", self.auth)
        status, raw = self._fetch(request, endpoint)
        if status >= 300:  # an error, or a redirect not followed
            raise ApiError(status, self.redact(_error_text(raw)))
        return self._json(raw, endpoint)

    def _deadline(self) -> tuple[float, str, float]:
        total = self.started + self.limits.server_total_seconds
        one = time.monotonic() + self.limits.server_request_seconds
        if total <= one:
            return total, "server_total_seconds", self.limits.server_total_seconds
        return one, "server_request_seconds", self.limits.server_request_seconds

    def _late(self, endpoint: str, setting: str, value: float) -> StabInputError:
        what = (
            f"{endpoint}: the server did not finish answering in time"
            if setting == "server_request_seconds"
            else f"{endpoint}: the requests to the server took too long in all"
        )
        return limit_hit(self.where, what, setting, value)

    def _fetch(self, request: urllib.request.Request, endpoint: str) -> tuple[int, bytes]:
        deadline, setting, value = self._deadline()
        if time.monotonic() >= deadline:
            raise self._late(endpoint, setting, value)
        expired = threading.Event()
        done = threading.Event()

        def cut() -> None:
            # shutting the socket down wakes a read blocked on it; a connection not yet
            # open is looked at again shortly (its connect is bounded by the timeout)
            if done.is_set():
                return
            expired.set()
            for conn in list(self._live):
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
            retry = threading.Timer(0.05, cut)
            retry.daemon = True
            retry.start()

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
        timer.daemon = True
        self._live.clear()
        timer.start()
        try:
            try:
                wait = max(0.001, deadline - time.monotonic())  # connect, and each read
                with self._opener.open(request, timeout=wait) as response:
                    status, raw = response.status, _read_body(response, self.limits, deadline)
            except urllib.error.HTTPError as err:
                with contextlib.closing(err):
                    status = err.code
                    raw = _read_body(err, self.limits, deadline, ERROR_BODY_BYTES)
            if expired.is_set() or time.monotonic() > deadline:
                raise _Late()
            return status, raw
        except _Late:
            raise self._late(endpoint, setting, value) from None
        except _TooBig as err:
            raise limit_hit(
                self.where,
                f"{endpoint}: the server's answer is too large",
                "max_input_bytes",
                err.limit,
            ) from None
        except (OSError, http.client.HTTPException, ValueError) as err:
            if expired.is_set() or time.monotonic() > deadline or isinstance(err, TimeoutError):
                raise self._late(endpoint, setting, value) from None
            reason = getattr(err, "reason", None) or err
            raise Unreachable(
                self.where, f"cannot reach the MLflow server: {self.redact(str(reason))}"
            ) from None
        finally:
            done.set()
            timer.cancel()
            self._live.clear()

    def _json(self, raw: bytes, endpoint: str) -> dict:
        limit = self.limits.max_json_depth
        too_deep = limit_hit(
            self.where, f"{endpoint}: the server's JSON nests too deep", "max_json_depth", limit
        )
        try:
            answer = json.loads(raw or b"{}")
        except RecursionError:
            raise too_deep from None
        except ValueError:
            head = raw[:60].decode("utf-8", errors="replace").split("\n", 1)[0]
            raise StabInputError(
                self.where,
                f"{endpoint}: the server did not answer JSON (it began {self.redact(head)!r})",
            ) from None
        if not isinstance(answer, dict):
            raise StabInputError(
                self.where, f"{endpoint}: the server answered a JSON {type(answer).__name__}"
            )
        if _deeper_than(answer, limit):
            raise too_deep
        return answer


def _deeper_than(value: dict | list, limit: int) -> bool:
    """Whether objects and lists nest more than `limit` deep, walked without recursion."""
    stack: list[tuple[dict | list, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class Unreachable(StabInputError):
    """The server did not answer at all (down, restarting, no route): it may come back."""


class _Late(Exception):
    """The deadline passed while a request was still being answered."""


class _TooBig(Exception):
    def __init__(self, limit: int):
        self.limit = limit


def _read_body(response, limits: InputLimits, deadline: float, cap: int | None = None) -> bytes:
    """The body, chunk by chunk, checking the deadline and the size between chunks."""
    limit = limits.max_input_bytes
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise _Late()
        chunk = response.read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if cap is not None and size >= cap:
            chunks.append(chunk)
            return b"".join(chunks)[:cap]
        if size > limit:
            raise _TooBig(limit)
        chunks.append(chunk)


class _OriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a few redirects; the credential never leaves the origin it was given for."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, client: Client):
        self.client = client

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise StabInputError(
                self.client.where, f"the server redirected to a non-http(s) URL ({code})"
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != self.client.origin:
            new.remove_header("Authorization")
        return new


class _TrackedHTTP(urllib.request.HTTPHandler):
    """Plain HTTP, keeping each connection so that a deadline can cut its socket."""

    def __init__(self, live: list):
        super().__init__()
        self.live = live

    def http_open(self, req):
        return self.do_open(self._connect, req)

    def _connect(self, host, **kwargs):
        conn = http.client.HTTPConnection(host, **kwargs)
        self.live.append(conn)
        return conn


class _TrackedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, live: list):
        super().__init__()
        self.live = live

    def https_open(self, req):
        return self.do_open(self._connect, req, context=self._context)

    def _connect(self, host, **kwargs):
        conn = http.client.HTTPSConnection(host, **kwargs)
        self.live.append(conn)
        return conn


class ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


def _error_text(raw: bytes) -> str:
    """MLflow's error_code and message, or the first line of whatever page came back."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        text = f"{body.get('error_code', '')} {body.get('message', '')}".strip()
        if text:
            return " ".join(text.split())[:300]
    head = raw.decode("utf-8", errors="replace").strip()
    first = head.split("\n", 1)[0].strip() if head else ""
    return f"not an MLflow answer ({first[:120]!r})" if first else "empty answer"


def split_target(target: str, options: ReadOptions) -> tuple[str, ReadOptions]:
    """Server base URL, and the run/experiment a pasted UI link names."""
    base, _, fragment = target.partition("#")
    run = _UI_RUN.search(fragment)
    if run and not options.run:
        options = replace(options, run=run.group(2), experiment=options.experiment or run.group(1))
    elif fragment and not options.experiment:
        experiment = _UI_EXPERIMENT.search(fragment)
        if experiment:
            options = replace(options, experiment=experiment.group(1))
    return base.rstrip("/"), options


def _pages(client: Client, what: str, fetch):
    """Each page of one paged listing, `fetch(token)` asking for the next.

    A server that keeps handing out page tokens (or the same one again) would
    be asked forever: the listing stops at `server_max_pages`.
    """
    token = None
    seen: set[str] = set()
    for number in itertools.count(1):
        if number > client.limits.server_max_pages:
            raise limit_hit(
                client.where,
                f"{what}: the server kept paging",
                "server_max_pages",
                client.limits.server_max_pages,
            )
        page = fetch(token)
        yield page
        token = page.get("next_page_token")
        if not token:
            return
        if not isinstance(token, str) or token in seen:
            raise StabInputError(
                client.where,
                f"{what}: the server sent page {number + 1}'s token again"
                if isinstance(token, str)
                else f"{what}: the server sent a page token that is not text",
            )
        seen.add(token)


def items_of(page: dict, field: str) -> list[dict]:
    """The objects of a list field in an answer; anything else there is no object."""
    items = page.get(field) or []
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _str(value) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _experiments(client: Client, options: ReadOptions) -> dict[str, str]:
    """`{id: name}` of the experiments to look in."""
    view = "ALL" if options.include_deleted else "ACTIVE_ONLY"
    if options.experiment:
        wanted = options.experiment.strip()
        for endpoint, field in (
            ("experiments/get-by-name", "experiment_name"),
            ("experiments/get", "experiment_id"),
        ):
            try:
                exp = client.call(endpoint, {field: wanted}).get("experiment")
            except ApiError:
                continue
            if isinstance(exp, dict) and "experiment_id" in exp:
                return {_str(exp["experiment_id"]): _str(exp.get("name"))}
        raise StabInputError(client.where, f"no experiment {wanted!r} on the server")
    found: dict[str, str] = {}

    def fetch(token):
        body = {"max_results": 1000, "view_type": view}
        if token:
            body["page_token"] = token
        return client.call("experiments/search", body=body)

    for page in _pages(client, "experiments/search", fetch):
        for exp in items_of(page, "experiments"):
            if "experiment_id" in exp:
                found[_str(exp["experiment_id"])] = _str(exp.get("name"))
    return found


def _pairs(items: list[dict]) -> dict[str, str]:
    return {_str(i["key"]): _str(i.get("value")) for i in items if "key" in i}


def as_run(raw: dict, experiments: dict[str, str]) -> MlflowRun:
    info, data = raw.get("info"), raw.get("data")
    info = info if isinstance(info, dict) else {}
    data = data if isinstance(data, dict) else {}
    tags = _pairs(items_of(data, "tags"))
    eid = _str(info.get("experiment_id"))
    run = MlflowRun(
        run_id=_str(info.get("run_id") or info.get("run_uuid")),
        name=_str(info.get("run_name") or tags.get("mlflow.runName")),
        experiment_id=eid,
        experiment_name=experiments.get(eid, ""),
        deleted=info.get("lifecycle_stage") == "deleted",
        params=_pairs(items_of(data, "params")),
        tags=tags,
    )
    # metric keys to fetch
    run.location = sorted({_str(m["key"]) for m in items_of(data, "metrics") if "key" in m})
    return run


def list_runs(client: Client, options: ReadOptions) -> list[MlflowRun]:
    if options.run:
        # a run id is the common case: one call, no search
        try:
            raw = client.call("runs/get", {"run_id": options.run.strip()}).get("run")
            if isinstance(raw, dict):
                return [as_run(raw, {})]
        except ApiError:
            pass
    experiments = _experiments(client, options)
    if not experiments:
        raise StabInputError(client.where, "no experiments on the server")
    runs: list[MlflowRun] = []
    ids = sorted(experiments)
    view = "ALL" if options.include_deleted else "ACTIVE_ONLY"
    for start in range(0, len(ids), 100):  # the server takes at most 100 experiment ids per search
        chunk = ids[start : start + 100]

        def fetch(token, chunk=chunk):
            body = {"experiment_ids": chunk, "max_results": SEARCH_PAGE_RUNS, "run_view_type": view}
            if token:
                body["page_token"] = token
            return client.call("runs/search", body=body)

        for page in _pages(client, "runs/search", fetch):
            runs += [as_run(raw, experiments) for raw in items_of(page, "runs")]
    return runs


def metric_history(client: Client, run_id: str, key: str) -> list[dict]:
    """Every point of one metric, page after page; never a sampled view."""
    points: list[dict] = []
    size = [PAGE_POINTS]

    def fetch(token):
        while True:
            params = {"run_id": run_id, "metric_key": key, "max_results": size[0]}
            if token:
                params["page_token"] = token
            try:
                return client.call("metrics/get-history", params)
            except ApiError as err:
                if size[0] != FALLBACK_PAGE_POINTS and "max_results" in err.text.lower():
                    size[0] = FALLBACK_PAGE_POINTS
                    continue
                raise StabInputError(
                    client.where, f"metric {key!r} of run {run_id}: {err}"
                ) from None

    for page in _pages(client, f"metrics/get-history of {key!r}", fetch):
        points += items_of(page, "metrics")
    return points


_INF_TEXT = {"inf", "infinity", "+inf", "+infinity", "-inf", "-infinity"}


def _point_value(raw) -> float | None:
    """A point's value: a JSON number or the strings "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw) if abs(raw) < 2**1024 else None
    if isinstance(raw, str):
        try:
            value = float(raw)
        except ValueError:
            return None
        # "1e400" parses as inf, which is not what the server sent
        if math.isinf(value) and raw.strip().lower() not in _INF_TEXT:
            return None
        return value
    return None


def _point_int(raw) -> int | None:
    """An int64 field: a JSON number or, as protobuf's JSON writes int64, a string of digits."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", raw):
        raw = int(raw)
    if isinstance(raw, int) and -_INT64 <= raw < _INT64:
        return raw
    return None


def run_points(client: Client, run: MlflowRun, source):
    """All metric points of one run as a polars frame (key, step, value, _order)."""
    # the server's listing leaves the run's metric keys in `location`
    keys: list[str] = list(run.location) if isinstance(run.location, list) else []
    history = HistoryPoints()
    for index, key in enumerate(sorted(keys)):
        part = history.key(key)
        part.take(metric_history(client, run.run_id, key), 1)
        history.finish_key(key, index, source)
    return history.frame(source)


class KeyHistory:
    """The points of one metric's history taken so far, and the ones rejected.

    A point whose value, step or timestamp is not what MLflow sends is rejected
    with its reason (line = its place in the metric's history), never read as 0.
    """

    def __init__(self) -> None:
        self.value: list[float] = []
        self.timestamp: list[int] = []
        self.step: list[int] = []
        self.line: list[int] = []
        self.bad: dict[str, list[int]] = {}
        self.clamped = 0

    def take(self, points: list[dict], first_line: int) -> None:
        """Points of the history from its `first_line` (1-based) on."""
        bound = sys.float_info.max
        for line, point in enumerate(points, start=first_line):
            value = _point_value(point.get("value"))
            # proto3's JSON leaves a zero step or timestamp out
            step = _point_int(point.get("step", 0))
            timestamp = _point_int(point.get("timestamp", 0))
            problem = (
                "the value is not a number"
                if value is None
                else "the step is not a 64-bit integer"
                if step is None
                else "the timestamp is not a 64-bit integer"
                if timestamp is None
                else None
            )
            if problem is not None:
                self.bad.setdefault(problem, []).append(line)
                continue
            assert value is not None and step is not None and timestamp is not None
            if abs(value) == bound:
                value = value * float("inf")  # the sqlite clamp undone: +/-Inf
                self.clamped += 1
            self.value.append(value)
            self.timestamp.append(timestamp)
            self.step.append(step)
            self.line.append(line)


class HistoryPoints:
    """Every metric of one run: each key's history, then the run's points in time order."""

    def __init__(self) -> None:
        self.keys: dict[str, KeyHistory] = {}
        self.columns: dict[str, list] = {
            name: [] for name in ("key", "value", "timestamp", "step", "_key_index", "_line")
        }
        self.clamped = 0

    def key(self, key: str) -> KeyHistory:
        return self.keys.setdefault(key, KeyHistory())

    def finish_key(self, key: str, index: int, source) -> None:
        """Add a key's points as the `index`-th key, and reject its bad points."""
        part = self.keys[key]
        columns = self.columns
        columns["key"] += [key] * len(part.value)
        columns["_key_index"] += [index] * len(part.value)
        columns["value"] += part.value
        columns["timestamp"] += part.timestamp
        columns["step"] += part.step
        columns["_line"] += part.line
        self.clamped += part.clamped
        for problem, lines in part.bad.items():
            reject_many(source, lines, f"metric {key!r}: {problem} (line = point of its history)")

    def frame(self, source):
        import polars as pl

        if not self.columns["key"]:
            return None
        if self.clamped:
            note = INF_NOTE.replace("sqlite store", "server")
            source.notes.append(note + f" ({self.clamped} point(s))")
        schema = {
            "key": pl.String,
            "value": pl.Float64,
            "timestamp": pl.Int64,
            "step": pl.Int64,
            "_key_index": pl.Int64,
            "_line": pl.Int64,
        }
        return order_points(pl.DataFrame(self.columns, schema=schema))


def read(target, options: ReadOptions) -> RunData:
    """Read the selected run(s) from a tracking server into the canonical frame."""
    text = str(target)
    if not sniff_uri(text) and options.tracking_uri:
        text = options.tracking_uri
    # a password in the URL is a credential: never shown, in a message or a report
    shown = without_userinfo(text)
    if not sniff_uri(text):
        raise StabInputError(shown, "not an http(s):// MLflow tracking server URL")
    base, options = split_target(text, options)
    client = Client(base, shown, options.limits)
    try:
        runs = list_runs(client, options)
        chosen, ranks = select_runs(runs, options, shown)
        run = build_run(
            shown,
            NAME,
            chosen,
            ranks,
            options,
            load_meta=lambda run: None,
            load_points=lambda run, source: run_points(client, run, source),
        )
    except ApiError as err:
        raise StabInputError(shown, f"the MLflow server refused: {err}") from None
    except StabInputError as err:
        if client.redact(str(err)) == str(err):
            raise
        raise StabInputError(client.redact(err.path), client.redact(err.reason)) from None
    source = run.source
    source.warnings[:] = [client.redact(w) for w in source.warnings]
    source.notes[:] = [client.redact(n) for n in source.notes]
    return run
