"""Follow a run on an MLflow tracking server while the client logs to it.

The REST API pages a metric's history with `page_token`s and has no "points
after step N" query (`get-history-bulk-interval` samples, so it is never
used). A follower keeps, for each metric, a token the server handed out that
starts one point before the end of what was read: a poll asks from there, so
it gets that one known point (checked against what was read: a history that
changed under it is read again from the start) and the new ones. When there
were new ones, a second request of exactly that many points gets the token for
the next poll. A poll costs `runs/get` (the status, params, tags and metric
keys) plus one or two small requests a metric, whatever the run's length.

FINISHED, FAILED or KILLED end the watch. A server that cannot be reached is
one line in `Poll.problems`; the next polls ask again from where they were.
"""

from __future__ import annotations

import contextlib
from dataclasses import field

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData
from stabilitycli.ingest.mlflow import server
from stabilitycli.ingest.mlflow._common import MlflowRun, build_run, select_runs
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.sources._live_files import Once, input_boundary
from stabilitycli.watch.sources._mlflow_live import ended


@dataclass
class _Metric:
    """One metric's history as read: its points and where the next poll asks from."""

    history: server.KeyHistory = field(default_factory=server.KeyHistory)
    count: int = 0  # points of the history read (rejected ones included)
    token: str | None = None  # a page token starting at point `start` (0-based)
    start: int = 0
    last: tuple | None = None  # the raw (value, timestamp, step) of point `count - 1`


class _Changed(Exception):
    """A history is not the one read so far (points removed or put before the end)."""


class ServerFollower:
    def __init__(self, target: str, options: ReadOptions) -> None:
        text = str(target)
        if not server.sniff_uri(text) and options.tracking_uri:
            text = options.tracking_uri
        self.shown = server.without_userinfo(text)
        if not server.sniff_uri(text):
            raise StabInputError(self.shown, "not an http(s):// MLflow tracking server URL")
        self.base, self.options = server.split_target(text, options)
        self.display = self.shown
        self.runs: list[MlflowRun] = []
        self.ranks: dict[str, int] | None = None
        self.metrics: dict[str, dict[str, _Metric]] = {}
        self.points_fetched = 0  # history points the server sent: what polls cost
        self.requests = 0
        self.page_points = server.PAGE_POINTS  # as the reader asks, while a history is caught up
        self.once = Once()
        self.client = server.Client(self.base, self.shown, self.options.limits)
        # a server that is not up yet may be starting: the first poll says so, and tries again
        with contextlib.suppress(server.Unreachable):
            self._select()

    def _call(self, endpoint: str, params: dict) -> dict:
        self.requests += 1
        return self.client.call(endpoint, params)

    def _select(self) -> None:
        try:
            runs = server.list_runs(self.client, self.options)
        except server.ApiError as err:
            raise StabInputError(self.shown, f"the MLflow server refused: {err}") from None
        self.runs, self.ranks = select_runs(runs, self.options, self.shown)
        self.metrics = {run.run_id: {} for run in self.runs}

    def poll(self) -> Poll:
        result = Poll()
        # a watch lasts longer than `server_total_seconds`, the bound of one whole read:
        # each poll gets its own
        self.client = server.Client(self.base, self.shown, self.options.limits)
        try:
            if not self.runs:
                self._select()
            over = [self._poll_run(i, result) for i in range(len(self.runs))]
        except server.Unreachable as err:
            self.once.tell(result.problems, "server", self.client.redact(str(err)))
            return result
        except (StabInputError, server.ApiError) as err:
            line = self.client.redact(str(err))
            self.once.tell(result.problems, "server", f"{self.shown}: {line}")
            return result
        self.once.clear("server")
        if over and all(over):
            result.ended = "; ".join(o for o in over if o)
        return result

    def _poll_run(self, index: int, result: Poll) -> str | None:
        run = self.runs[index]
        raw = self._call("runs/get", {"run_id": run.run_id}).get("run")
        if not isinstance(raw, dict):
            raise StabInputError(self.shown, f"runs/get of {run.run_id}: no run in the answer")
        fresh = server.as_run(raw, {run.experiment_id: run.experiment_name})
        fresh.name = run.name  # as selected: the reader's label
        listed = fresh.location if isinstance(fresh.location, list) else []
        keys = sorted({*listed, *self.metrics[run.run_id]})
        fresh.location = keys
        self.runs[index] = fresh
        for key in keys:
            metric = self.metrics[run.run_id].setdefault(key, _Metric())
            try:
                result.records_read += self._advance(run.run_id, key, metric)
            except _Changed:
                result.reread = f"metric {key!r} of run {run.run_id} changed; read again"
                metric = self.metrics[run.run_id][key] = _Metric()
                result.records_read += self._advance(run.run_id, key, metric)
        info = raw.get("info")
        return ended(info.get("status") if isinstance(info, dict) else None, run.label)

    def _page(self, run_id: str, key: str, token: str | None, size: int) -> dict:
        params: dict = {"run_id": run_id, "metric_key": key, "max_results": size}
        if token:
            params["page_token"] = token
        try:
            page = self._call("metrics/get-history", params)
        except server.ApiError as err:
            if size > server.FALLBACK_PAGE_POINTS and "max_results" in err.text.lower():
                # a server that caps pages lower (Databricks): its cap from now on
                self.page_points = server.FALLBACK_PAGE_POINTS
                return self._page(run_id, key, token, server.FALLBACK_PAGE_POINTS)
            raise StabInputError(self.shown, f"metric {key!r} of run {run_id}: {err}") from None
        self.points_fetched += len(server.items_of(page, "metrics"))
        return page

    def _advance(self, run_id: str, key: str, metric: _Metric) -> int:
        """Read the points added to one history; returns how many."""
        token, start, points = metric.token, metric.start, []
        last_token, last_start = token, start
        while True:
            page = self._page(run_id, key, token, self.page_points)
            items = server.items_of(page, "metrics")
            points += items
            following = page.get("next_page_token")
            if not following or not items:
                break
            last_token, last_start = following, start + len(points)
            token = following
        total = metric.start + len(points)
        if total < metric.count:
            raise _Changed
        if metric.count and _raw(points[metric.count - 1 - metric.start]) != metric.last:
            raise _Changed
        new = points[metric.count - metric.start :]
        if not new:
            return 0
        metric.history.take(new, metric.count + 1)
        metric.count, metric.last = total, _raw(points[-1])
        # the token of the next poll: a page of exactly the points up to the last one
        # ends with a token that starts at the last one
        upto = total - 1 - last_start
        if upto > 0:
            page = self._page(run_id, key, last_token, upto)
            following = page.get("next_page_token")
            if isinstance(following, str) and following:
                # a server that caps pages lower sends fewer: its token starts after them
                last_token = following
                last_start += len(server.items_of(page, "metrics"))
        metric.token, metric.start = last_token, last_start
        return len(new)

    def snapshot(self) -> RunData:
        with input_boundary(self.shown, server.NAME):
            return self._snapshot()

    def _snapshot(self) -> RunData:
        if not self.runs:
            raise StabInputError(self.shown, "the MLflow server has not answered yet")

        def points(run: MlflowRun, source):
            history = server.HistoryPoints()
            keys = run.location if isinstance(run.location, list) else []
            for index, key in enumerate(keys):
                history.keys[key] = self.metrics[run.run_id][key].history
                history.finish_key(key, index, source)
            return history.frame(source)

        result = build_run(
            self.shown,
            server.NAME,
            list(self.runs),
            self.ranks,
            self.options,
            load_meta=lambda run: None,
            load_points=points,
        )
        redact = self.client.redact
        result.source.warnings[:] = [redact(w) for w in result.source.warnings]
        result.source.notes[:] = [redact(n) for n in result.source.notes]
        return result

    def close(self) -> None:
        """Every request opens and closes its own connection."""


def _raw(point: dict) -> tuple:
    return (point.get("value"), point.get("timestamp"), point.get("step"))


def follow(target: str, options: ReadOptions) -> ServerFollower:
    return ServerFollower(target, options)
