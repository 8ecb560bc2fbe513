"""Follow a run of an MLflow file store (`mlruns/`) while the client logs to it.

Each metric is a text file the client appends `timestamp value step` lines to:
it is read from the end of its last whole line (a line without its newline
waits), and a metric logged for the first time is a new file, found on the next
poll. The run's `meta.yaml` gives its status: FINISHED, FAILED or KILLED end
the watch. `snapshot` hands the lines read to the reader's own parsing and
ordering, so it is `read` on the whole lines written by that poll.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData
from stabilitycli.ingest.mlflow import file_store as store
from stabilitycli.ingest.mlflow._common import MlflowRun, build_run, select_runs
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.sources._live_files import Once, input_boundary, read_from
from stabilitycli.watch.sources._mlflow_live import ended, unloaded


@dataclass
class _Metric:
    """One metric's history file, read up to its last whole line."""

    path: Path
    offset: int = 0
    lines: int = 0
    identity: tuple[int, int] | None = None
    good: list = field(default_factory=list)  # polars frames, in file order
    bad: list = field(default_factory=list)

    def frames(self):
        if not self.good:  # an empty file is a key with no point, as the reader sees it
            return store.parse_metric_lines(b"")[0]
        if len(self.good) > 1:
            import polars as pl

            self.good = [pl.concat(self.good)]
        return self.good[0]


class FileStoreFollower:
    def __init__(self, target: str, options: ReadOptions) -> None:
        self.path = store.local_path(target)
        self.options = options
        runs = store.list_runs(self.path, options)
        self.runs, self.ranks = select_runs(
            runs, options, str(self.path), fetch_rank_info=store.load_params_tags
        )
        self.display = str(target)
        self.metrics: dict[str, dict[str, _Metric]] = {run.run_id: {} for run in self.runs}
        self.bytes_read = 0
        self.once = Once()

    def poll(self) -> Poll:
        result = Poll()
        over = []
        for run in self.runs:
            folder: Path = run.location  # type: ignore[assignment]
            if not folder.is_dir():
                self.once.tell(result.problems, str(folder), f"{folder}: run folder gone")
                continue
            self.once.clear(str(folder))
            meta = store.read_meta(folder) or {}
            over.append(ended(meta.get("status"), run.label))
            try:
                files = store.metric_files(folder)
            except (OSError, StabInputError) as err:
                why = err.reason if isinstance(err, StabInputError) else str(err)
                self.once.tell(result.problems, str(folder), f"{folder}: cannot list ({why})")
                continue
            known = self.metrics[run.run_id]
            for key, path in files.items():
                metric = known.setdefault(key, _Metric(path))
                self._read(key, metric, result)
        if over and all(over):
            result.ended = "; ".join(o for o in over if o)
        return result

    def _read(self, key: str, metric: _Metric, result: Poll) -> None:
        stretch = self.once.read(result.problems, metric.path, metric.offset, metric.identity)
        if stretch is None:
            return
        if stretch.shrunk:
            result.reread = f"{metric.path}: the file shrank or was replaced; read again"
            metric.__init__(metric.path)  # type: ignore[misc]
            stretch = read_from(metric.path, 0)
        metric.identity = stretch.identity
        whole = stretch.data[: stretch.data.rfind(b"\n") + 1]
        if not whole:
            return
        self.bytes_read += len(whole)
        good, bad = store.parse_metric_lines(whole, metric.lines + 1)
        metric.offset += len(whole)
        metric.lines += whole.count(b"\n")
        metric.good.append(good)
        if bad.height:
            metric.bad.append(bad)
        result.records_read += good.height + bad.height

    def _points(self, run: MlflowRun, source: SourceInfo):
        import polars as pl

        frames = []
        for key, metric in sorted(self.metrics[run.run_id].items()):
            if metric.bad:
                store.report_bad_lines(source, metric.path, key, pl.concat(metric.bad))
            frames.append((key, metric.frames()))
        return store.ordered_points(frames)

    def snapshot(self) -> RunData:
        with input_boundary(str(self.path), store.NAME):
            return self._snapshot()

    def _snapshot(self) -> RunData:
        return build_run(
            self.path,
            store.NAME,
            [unloaded(run) for run in self.runs],
            self.ranks,
            self.options,
            load_meta=store.load_params_tags,
            load_points=self._points,
        )

    def close(self) -> None:
        """Nothing is held open between polls."""


def follow(target: str, options: ReadOptions) -> FileStoreFollower:
    return FileStoreFollower(target, options)
