"""HTTP to an MLflow tracking server: the client, its bounds and its errors.

Split from `server`, which knows the REST endpoints and builds the run; this module
only fetches JSON. Credentials (from the mlflow client's environment variables or the
URL's userinfo) go only to the origin of the URL given (see `server`'s docstring).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits, limit_hit

API = "/api/2.0/mlflow/"
MAX_REDIRECTS = 5
# an error page is read only this far: its first line is all the message shows
ERROR_BODY_BYTES = 64 * 1024


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
        self._live: list[socket.socket] = []
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
            for sock in list(self._live):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
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


def _tracked(conn: http.client.HTTPConnection, live: list) -> http.client.HTTPConnection:
    """`conn`, whose socket goes into `live` once it is open, so that a deadline can cut it.

    The socket, not the connection: once the headers are in, urllib hands the socket to
    the answer and sets the connection's own `sock` to None, so a deadline that looked
    there found nothing to cut while the body was read, and a server trickling the body a
    byte at a time held the read as long as it liked (a 1 s deadline cut at 10 s, when
    the test's server stopped)."""
    connect = conn.connect

    def connect_and_track() -> None:
        connect()
        live.append(conn.sock)

    conn.connect = connect_and_track  # type: ignore[method-assign]
    return conn


class _TrackedHTTP(urllib.request.HTTPHandler):
    """Plain HTTP, keeping each connection's socket so that a deadline can cut it."""

    def __init__(self, live: list):
        super().__init__()
        self.live = live

    def http_open(self, req):
        return self.do_open(self._connect, req)

    def _connect(self, host, **kwargs):
        return _tracked(http.client.HTTPConnection(host, **kwargs), self.live)


class _TrackedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, live: list):
        super().__init__()
        self.live = live

    def https_open(self, req):
        return self.do_open(self._connect, req, context=self._context)

    def _connect(self, host, **kwargs):
        return _tracked(http.client.HTTPSConnection(host, **kwargs), self.live)


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
