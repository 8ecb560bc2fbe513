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

import itertools
import math
import re
import sys
from dataclasses import replace

from stabilitycli.core.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest.limits import limit_hit
from stabilitycli.ingest.mlflow._common import MlflowRun, build_run, order_points, select_runs
from stabilitycli.ingest.mlflow._http import (  # noqa: F401 (re-exported)
    API,
    ApiError,
    Client,
    Unreachable,
    without_userinfo,
)
from stabilitycli.ingest.mlflow.database import INF_NOTE
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import reject_many

NAME = "mlflow_server"
# points per get-history page; servers that cap lower (Databricks: 25,000) get that
PAGE_POINTS = 100_000
FALLBACK_PAGE_POINTS = 25_000
SEARCH_PAGE_RUNS = 1000
_UI_RUN = re.compile(r"experiments/([^/]+)/runs/([0-9a-f]{32})")
_UI_EXPERIMENT = re.compile(r"experiments/([^/?]+)")
_INT64 = 2**63


def sniff_uri(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def sniff(path, head: bytes) -> bool:
    return False  # a server is never a local path


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
