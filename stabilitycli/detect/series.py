"""The single-series view the §1–§4 rules read: numpy columns over logged steps.

Per-rank logs are reduced to the per-step mean over ranks first (what an
all-reduced logger would have written); a NaN on any rank makes that step's
mean NaN, as it would in training. Rules never see which format the data came
from, only this view.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

import numpy as np
import polars as pl

from stabilitycli.core.model import Restart, Skip, SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData


@dataclass
class SeriesView:
    steps: np.ndarray  # int64, sorted, unique
    columns: dict[str, np.ndarray]  # float64 per metric; NaN where not logged
    logged: dict[str, np.ndarray]  # bool per metric: was it logged at this step
    source: SourceInfo
    restarts: list[Restart] = field(default_factory=list)
    # rows a resume rewrote (`RunData.abandoned`, with `_segment`), for the replay rule
    abandoned: pl.DataFrame | None = None
    # the run itself, for the one rule that needs every rank (the view holds their mean)
    run: RunData | None = None
    # per metric: logged at every step of the view (then `points` needs no mask)
    _every_step: dict[str, bool] = field(default_factory=dict, repr=False)
    # what is read from the view once and shared by every reader (the overflow ledger)
    derived: dict[str, Any] = field(default_factory=dict, repr=False)

    def has(self, metric: str) -> bool:
        return metric in self.columns and bool(self.logged[metric].any())

    def points(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) at the steps where `metric` was logged; values keep NaN/Inf."""
        if metric not in self._every_step:
            self._every_step[metric] = bool(self.logged[metric].all())
        if self._every_step[metric]:  # no mask to apply: the arrays themselves, not copies
            return self.steps, self.columns[metric]
        mask = self.logged[metric]
        return self.steps[mask], self.columns[metric][mask]

    def finite_points(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) where `metric` was logged with a finite value."""
        steps, values = self.points(metric)
        ok = np.isfinite(values)
        if ok.all():  # the usual case: the arrays themselves, not copies
            return steps, values
        return steps[ok], values[ok]

    def finite_or_skip(
        self, metric: str, code: str, min_points: int, skipped: list
    ) -> tuple | None:
        """Finite points of `metric`, or None after noting why the rule `code` cannot run."""
        if not self.has(metric):
            skipped.append(Skip(code, f"no {metric} series in the log"))
            return None
        steps, values = self.finite_points(metric)
        if values.size < min_points:
            skipped.append(Skip(code, f"insufficient data: {values.size} finite {metric} points"))
            return None
        return steps, values

    @property
    def dtype(self) -> str | None:
        return self.source.dtype

    def layer_columns(self) -> list[str]:
        return [c for c in self.columns if c.startswith(("act_norm/", "grad_norm/"))]

    def param_norm_columns(self) -> list[str]:
        return [c for c in self.columns if c == "param_norm" or c.startswith("param_norm/")]


def build_view(run: RunData) -> SeriesView:
    metrics = run.metric_columns
    if "rank" not in run.frame.columns:
        run.pack_columns()
    frame = run.frame
    if "rank" in frame.columns:
        # the mean over ranks per step; `mean` would skip nulls (a rank not
        # reporting) but keeps NaN, which is what training would have seen
        from stabilitycli.frame.step_means import means_over_ranks  # per-rank logs' only

        frame = means_over_ranks(frame, metrics)
    steps = frame["step"].to_numpy().astype(np.int64, copy=False)
    columns: dict[str, np.ndarray] = {}
    logged: dict[str, np.ndarray] = {}
    every_row: np.ndarray | None = None
    for name in metrics:
        series = frame[name]
        if series.null_count():
            logged[name] = series.is_not_null().to_numpy()
        else:  # logged at every step: one mask serves every such metric (all are read-only)
            if every_row is None:
                every_row = np.ones(frame.height, dtype=bool)
            logged[name] = every_row
        # no copy when polars can hand over its own buffer (a Float64 column with no nulls)
        columns[name] = series.fill_null(np.nan).to_numpy().astype(np.float64, copy=False)
    # read-only: `points` hands out these arrays themselves, so a rule that wrote into one
    # would change what every later rule reads; numpy raises instead
    for array in (steps, *columns.values(), *logged.values()):
        array.flags.writeable = False
    restarts = [r for r in run.source.restarts]
    abandoned = run.abandoned if run.abandoned.height else None
    return SeriesView(
        steps=steps,
        columns=columns,
        logged=logged,
        source=run.source,
        restarts=restarts,
        abandoned=abandoned,
        run=run,
    )


def run_only_view(run: RunData) -> SeriesView:
    """A view of the run with no series: what a rule that reads only `view.run`
    (`Rule.before_view`) is given when it starts before `build_view` has made them."""
    return SeriesView(
        steps=np.zeros(0, dtype=np.int64), columns={}, logged={}, source=run.source, run=run
    )
