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
(`MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace

from stabilitycli.errors import StabInputError
from stabilitycli.frame import RunData
from stabilitycli.ingest._mlflow_common import MlflowRun, build_run, order_points, select_runs
from stabilitycli.ingest.mlflow_db import INF_NOTE
from stabilitycli.ingest.options import ReadOptions

NAME = "mlflow_server"
API = "/api/2.0/mlflow/"
REQUEST_TIMEOUT_S = 120.0
# points per get-history page; servers that cap lower (Databricks: 25,000) get that
PAGE_POINTS = 100_000
FALLBACK_PAGE_POINTS = 25_000
SEARCH_PAGE_RUNS = 1000
_UI_RUN = re.compile(r"experiments/([^/]+)/runs/([0-9a-f]{32})")
_UI_EXPERIMENT = re.compile(r"experiments/([^/?]+)")


def sniff_uri(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def sniff(path, head: bytes) -> bool:
    return False  # a server is never a local path


class _Client:
    """A few JSON calls against one server, every failure one readable line."""

    def __init__(self, base: str, where: str):
        self.base = base.rstrip("/")
        self.where = where
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif user:
            secret = f"{user}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}".encode()
            self.headers["Authorization"] = "Basic " + base64.b64encode(secret).decode()

    def call(self, endpoint: str, params: dict | None = None, body: dict | None = None) -> dict:
        url = self.base + API + endpoint
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url, data=data, headers=self.headers, method="POST" if data else "GET"
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            raise _ApiError(err.code, _error_text(err)) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            reason = getattr(err, "reason", err)
            raise StabInputError(self.where, f"cannot reach the MLflow server: {reason}") from None
        except ValueError as err:
            raise StabInputError(
                self.where, f"{endpoint}: the server did not answer JSON ({err})"
            ) from None


class _ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(err.read() or b"{}")
        return f"{body.get('error_code', '')} {body.get('message', '')}".strip() or str(err.reason)
    except ValueError:
        return str(err.reason)


def _split_target(target: str, options: ReadOptions) -> tuple[str, ReadOptions]:
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


def _experiments(client: _Client, options: ReadOptions) -> dict[str, str]:
    """`{id: name}` of the experiments to look in."""
    view = "ALL" if options.include_deleted else "ACTIVE_ONLY"
    if options.experiment:
        wanted = options.experiment.strip()
        try:
            exp = client.call("experiments/get-by-name", {"experiment_name": wanted})["experiment"]
            return {str(exp["experiment_id"]): exp.get("name", "")}
        except _ApiError:
            pass
        try:
            exp = client.call("experiments/get", {"experiment_id": wanted})["experiment"]
            return {str(exp["experiment_id"]): exp.get("name", "")}
        except _ApiError:
            raise StabInputError(client.where, f"no experiment {wanted!r} on the server") from None
    found: dict[str, str] = {}
    token = None
    while True:
        body = {"max_results": 1000, "view_type": view}
        if token:
            body["page_token"] = token
        page = client.call("experiments/search", body=body)
        for exp in page.get("experiments", []):
            found[str(exp["experiment_id"])] = exp.get("name", "")
        token = page.get("next_page_token")
        if not token:
            return found


def _as_run(raw: dict, experiments: dict[str, str]) -> MlflowRun:
    info, data = raw.get("info", {}), raw.get("data", {})
    tags = {t["key"]: t.get("value", "") for t in data.get("tags", [])}
    eid = str(info.get("experiment_id", ""))
    run = MlflowRun(
        run_id=info.get("run_id") or info.get("run_uuid", ""),
        name=info.get("run_name") or tags.get("mlflow.runName", ""),
        experiment_id=eid,
        experiment_name=experiments.get(eid, ""),
        deleted=info.get("lifecycle_stage") == "deleted",
        params={p["key"]: p.get("value", "") for p in data.get("params", [])},
        tags=tags,
    )
    run.location = [m["key"] for m in data.get("metrics", [])]  # metric keys to fetch
    return run


def list_runs(client: _Client, options: ReadOptions) -> list[MlflowRun]:
    if options.run:
        # a run id is the common case: one call, no search
        try:
            raw = client.call("runs/get", {"run_id": options.run.strip()})["run"]
            return [_as_run(raw, {})]
        except _ApiError:
            pass
    experiments = _experiments(client, options)
    if not experiments:
        raise StabInputError(client.where, "no experiments on the server")
    runs: list[MlflowRun] = []
    ids = sorted(experiments)
    view = "ALL" if options.include_deleted else "ACTIVE_ONLY"
    for start in range(0, len(ids), 100):  # the server takes at most 100 experiment ids per search
        token = None
        while True:
            body = {
                "experiment_ids": ids[start : start + 100],
                "max_results": SEARCH_PAGE_RUNS,
                "run_view_type": view,
            }
            if token:
                body["page_token"] = token
            page = client.call("runs/search", body=body)
            runs += [_as_run(raw, experiments) for raw in page.get("runs", [])]
            token = page.get("next_page_token")
            if not token:
                break
    return runs


def metric_history(client: _Client, run_id: str, key: str) -> list[dict]:
    """Every point of one metric, page after page; never a sampled view."""
    points: list[dict] = []
    size = PAGE_POINTS
    token = None
    while True:
        params = {"run_id": run_id, "metric_key": key, "max_results": size}
        if token:
            params["page_token"] = token
        try:
            page = client.call("metrics/get-history", params)
        except _ApiError as err:
            if size != FALLBACK_PAGE_POINTS and "max_results" in err.text.lower():
                size = FALLBACK_PAGE_POINTS
                continue
            raise StabInputError(client.where, f"metric {key!r} of run {run_id}: {err}") from None
        points += page.get("metrics", [])
        token = page.get("next_page_token")
        if not token:
            return points


def run_points(client: _Client, run: MlflowRun, source):
    """All metric points of one run as a polars frame (key, step, value, _order)."""
    import polars as pl

    # the server's listing leaves the run's metric keys in `location`
    keys: list[str] = list(run.location) if isinstance(run.location, list) else []
    bound = sys.float_info.max
    columns: dict[str, list] = {
        "key": [],
        "value": [],
        "timestamp": [],
        "step": [],
        "_key_index": [],
        "_line": [],
    }
    clamped = 0
    for index, key in enumerate(sorted(keys)):
        for line, point in enumerate(metric_history(client, run.run_id, key), start=1):
            value = float(point.get("value", 0.0))  # "NaN", "Infinity" and "-Infinity" included
            if abs(value) == bound:
                value = value * float("inf")  # the sqlite clamp undone: +/-Inf
                clamped += 1
            columns["key"].append(key)
            columns["value"].append(value)
            columns["timestamp"].append(int(point.get("timestamp", 0)))
            columns["step"].append(int(point.get("step", 0)))
            columns["_key_index"].append(index)
            columns["_line"].append(line)
    if not columns["key"]:
        return None
    if clamped:
        source.notes.append(INF_NOTE.replace("sqlite store", "server") + f" ({clamped} point(s))")
    schema = {
        "key": pl.String,
        "value": pl.Float64,
        "timestamp": pl.Int64,
        "step": pl.Int64,
        "_key_index": pl.Int64,
        "_line": pl.Int64,
    }
    return order_points(pl.DataFrame(columns, schema=schema))


def read(target, options: ReadOptions) -> RunData:
    """Read the selected run(s) from a tracking server into the canonical frame."""
    text = str(target)
    if not sniff_uri(text) and options.tracking_uri:
        text = options.tracking_uri
    if not sniff_uri(text):
        raise StabInputError(text, "not an http(s):// MLflow tracking server URL")
    base, options = _split_target(text, options)
    client = _Client(base, text)
    try:
        runs = list_runs(client, options)
        chosen, ranks = select_runs(runs, options, text)
        return build_run(
            text,
            NAME,
            chosen,
            ranks,
            options,
            load_meta=lambda run: None,
            load_points=lambda run, source: run_points(client, run, source),
        )
    except _ApiError as err:
        raise StabInputError(text, f"the MLflow server refused: {err}") from None
