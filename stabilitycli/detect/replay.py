"""A resume's replay: the steps a restart logged twice, before and after.

When a run resumes from the checkpoint at step R after the log had reached
step E, steps R..E exist twice: the abandoned trajectory (kept aside by
`frame.finalize` in `RunData.abandoned`, labelled by `_segment`) and the
resumed one. Segment k is what the log wrote after its k-th restart, so for
restart N (1-based, in log order):

* the abandoned value at step s is the one from the highest segment < N;
* the resumed value is segment N's: in `abandoned` when a later restart
  rewrote it again, else in the kept frame (below every later resume point,
  no later segment logged s, and segment N did);
* the trajectory before the restart (for its noise level) is the kept frame
  below every resume point from N on, then the abandoned values.

Per-rank logs are reduced to the mean over ranks, as `SeriesView` is, and
their restarts (one per rank) to one event per (resumed_from, reached) pair.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Restart
from stabilitycli.core.records import dataclass
from stabilitycli.frame import SEGMENT


@dataclass(frozen=True)
class Replay:
    """Restart `index` (1-based) and, per metric, the three trajectories as (steps, values)."""

    index: int
    restart: Restart
    abandoned: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    resumed: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    before: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def window(self) -> tuple[int, int]:
        return self.restart.resumed_from_step, self.restart.last_step_before

    def pairs(self, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, abandoned, resumed) at the replayed steps where both logged `metric`."""
        if metric not in self.abandoned or metric not in self.resumed:
            empty = np.array([], dtype=np.int64)
            return empty, np.array([]), np.array([])
        a_steps, a_vals = self.abandoned[metric]
        r_steps, r_vals = self.resumed[metric]
        common, ia, ir = np.intersect1d(a_steps, r_steps, assume_unique=True, return_indices=True)
        return common, a_vals[ia], r_vals[ir]


def restart_events(restarts: list[Restart]) -> list[Restart]:
    """One event per restart in log order (per-rank logs repeat each one per rank)."""
    seen: set[tuple[int, int]] = set()
    events = []
    for r in sorted(restarts, key=lambda r: r.at_row):
        key = (r.resumed_from_step, r.last_step_before)
        if key not in seen:
            seen.add(key)
            events.append(Restart(r.at_row, r.resumed_from_step, r.last_step_before, None))
    return events


def build_replay(
    steps: np.ndarray,
    columns: dict[str, np.ndarray],
    logged: dict[str, np.ndarray],
    abandoned: pl.DataFrame | None,
    restarts: list[Restart],
    index: int,
    metrics: list[str] | None = None,
) -> Replay:
    """The replay of restart `index` from a kept series (steps, columns, logged) and the abandoned
    rows.

    `metrics` limits the work to those columns (a log may carry hundreds of per-layer series).
    """
    if metrics is not None:
        columns = {m: columns[m] for m in metrics if m in columns}
    events = restart_events(restarts)
    if not 1 <= index <= len(events):
        raise IndexError(index)
    event = events[index - 1]
    lo, hi = event.resumed_from_step, event.last_step_before
    later_min = min((e.resumed_from_step for e in events[index:]), default=np.iinfo(np.int64).max)
    own_min = min(later_min, lo)
    ab = _per_step(abandoned, list(columns))
    out_ab, out_res, out_before = {}, {}, {}
    for metric, values in columns.items():
        mask = logged[metric]
        k_steps, k_vals = steps[mask], values[mask]
        # what the log said last before this restart, from where a later resume rewrote it on:
        # the highest earlier segment at each step
        old = _metric_rows(
            ab, metric, (pl.col(SEGMENT) < index) & pl.col("step").is_between(own_min, hi)
        )
        old = old.sort([SEGMENT, "step"]).group_by("step", maintain_order=True).last().sort("step")
        o_steps, o_vals = old["step"].to_numpy(), old[metric].to_numpy()
        in_window = o_steps >= lo
        a_steps, a_vals = o_steps[in_window], o_vals[in_window]
        # resumed: segment `index` itself, from the abandoned rows first, else the kept frame
        mine = _metric_rows(
            ab, metric, (pl.col(SEGMENT) == index) & pl.col("step").is_between(lo, hi)
        )
        m_steps, m_vals = mine["step"].to_numpy(), mine[metric].to_numpy()
        kept = (
            (k_steps >= lo) & (k_steps <= hi) & (k_steps < later_min) & ~np.isin(k_steps, m_steps)
        )
        r_steps = np.concatenate([m_steps, k_steps[kept]])
        r_vals = np.concatenate([m_vals, k_vals[kept]])
        order = np.argsort(r_steps, kind="stable")
        # before: the kept frame below every resume point from this one on, then rewritten values
        early = k_steps < own_min
        b_steps = np.concatenate([k_steps[early], o_steps])
        b_vals = np.concatenate([k_vals[early], o_vals])
        b_order = np.argsort(b_steps, kind="stable")
        if a_steps.size:
            out_ab[metric] = (a_steps.astype(np.int64), a_vals.astype(np.float64))
        if r_steps.size:
            out_res[metric] = (r_steps[order].astype(np.int64), r_vals[order].astype(np.float64))
        out_before[metric] = (b_steps[b_order].astype(np.int64), b_vals[b_order].astype(np.float64))
    return Replay(index=index, restart=event, abandoned=out_ab, resumed=out_res, before=out_before)


def replay_from_view(view, index: int, metrics: list[str] | None = None) -> Replay:
    """`build_replay` over a `SeriesView` (which carries the abandoned rows)."""
    return build_replay(
        view.steps,
        view.columns,
        view.logged,
        getattr(view, "abandoned", None),
        view.restarts,
        index,
        metrics,
    )


def _per_step(abandoned: pl.DataFrame | None, metrics: list[str]) -> pl.DataFrame:
    """Abandoned rows with one row per (segment, step): per-rank values become their mean."""
    if abandoned is None or abandoned.height == 0 or SEGMENT not in abandoned.columns:
        return pl.DataFrame({SEGMENT: [], "step": []}, schema={SEGMENT: pl.Int64, "step": pl.Int64})
    present = [m for m in metrics if m in abandoned.columns]
    if "rank" in abandoned.columns:
        return abandoned.group_by([SEGMENT, "step"]).agg([pl.col(m).mean() for m in present])
    return abandoned.select([SEGMENT, "step", *present])


def _metric_rows(ab: pl.DataFrame, metric: str, where: pl.Expr) -> pl.DataFrame:
    if metric not in ab.columns:
        return pl.DataFrame(
            {SEGMENT: [], "step": [], metric: []},
            schema={SEGMENT: pl.Int64, "step": pl.Int64, metric: pl.Float64},
        )
    return ab.filter(where & pl.col(metric).is_not_null()).select([SEGMENT, "step", metric])


def replay_noise(replay, metric: str, thr: Thresholds) -> tuple[float, int, int]:
    """(sigma, first step, last step): the noise of the trajectory before the restart."""
    steps, values = replay.before.get(metric, (np.array([], dtype=np.int64), np.array([])))
    end = replay.restart.last_step_before
    # the judging module only where a replay is judged: most runs hold none (start-up, #40)
    from stabilitycli.detect.deviation import window_noise

    return window_noise(steps, values, end - thr.replay_noise_steps + 1, end)


def replay_judgement(replay, metric: str, thresholds: Thresholds) -> dict[str, Any] | None:
    """The restart-replay rule's numbers for one metric.

    Same band and judging as `compare_restart`."""
    steps, old, new = replay.pairs(metric)
    if steps.size == 0:
        return None
    from stabilitycli.detect.deviation import judge

    sigma, first, last = replay_noise(replay, metric, thresholds)
    band = thresholds.noise_band_sigmas * math.sqrt(2.0) * sigma
    verdict = judge(old, new, np.full(steps.size, band), thresholds.judge_points)
    stats = verdict.stats(steps)
    return {
        **stats,
        "noise_sigma": sigma,
        "noise_steps": [first, last],
        "tolerance": band,
        "departed": not verdict.passed,
    }
