"""Trailing windows in training steps, with the spec's widening rule (spec 0).

A window of W steps needs `min_points` logged points. A log sparser than that
(the Hugging Face Trainer logs every 500 steps) uses the last `widened_points`
logged points instead, and the evidence says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np
import polars as pl

from stabilitycli.core.records import dataclass
from stabilitycli.detect.pointwise import Pointwise
from stabilitycli.detect.window_counts import (
    COUNT_SHARES,
    STEP_MEAN_SHARES,
    exact_step_sums,
    window_counts,
)
from stabilitycli.frame import plain_numpy


@dataclass(frozen=True)
class TrailingStats:
    mean: np.ndarray
    std: np.ndarray
    count: np.ndarray
    widened: bool
    description: str


def median_interval(steps: np.ndarray) -> float:
    """`np.median(np.diff(steps))`: the steps between logged points, typically.

    Integer steps are read from the count of each distinct gap, taken a chunk of
    rows at a time: the whole log's gaps, and the median's own copy of them, were
    two more copies of the step column. An irregular log (more than
    `MAX_DISTINCT_GAPS` distinct gaps) and float steps take the whole-log median.
    """
    if steps.size < 2:
        return math.nan
    counted = _gap_counts(steps) if steps.dtype.kind in "iu" else None
    if counted is None:
        return float(np.median(np.diff(steps)))
    gaps, counts = counted
    total = steps.size - 1
    # np.median's middle one or two gaps, in order; its median of them is their mean
    middle = [total // 2] if total % 2 else [total // 2 - 1, total // 2]
    order = np.searchsorted(np.cumsum(counts), middle, side="right")
    return float(np.median(gaps[order]))


MAX_DISTINCT_GAPS = 1 << 16


def _gap_counts(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Each distinct gap between consecutive steps (ascending) and how often it occurs, or
    None past `MAX_DISTINCT_GAPS` of them."""
    gaps, counts = np.zeros(0, dtype=np.diff(steps[:2]).dtype), np.zeros(0, dtype=np.int64)
    chunk_rows = CHUNK_ROWS  # read at call time: tests take small chunks
    for first in range(0, steps.size - 1, chunk_rows):  # loop over chunks of rows
        piece, piece_counts = _distinct(np.diff(steps[first : first + chunk_rows + 1]))
        gaps, where = np.unique(np.concatenate((gaps, piece)), return_inverse=True)
        summed = np.zeros(gaps.size, dtype=np.int64)
        np.add.at(summed, where, np.concatenate((counts, piece_counts)))
        counts = summed
        if gaps.size > MAX_DISTINCT_GAPS:
            return None
    return gaps, counts


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_counts=True)`; a log at a fixed interval has one gap, and
    then no sort is needed to say so."""
    if bool((values == values[0]).all()):
        return values[:1], np.array([values.size])
    return np.unique(values, return_counts=True)


# rows whose windows polars computes at a time: its temporaries (the shifted copies and
# each statistic) then cost a piece of the column, not several copies of a long log
CHUNK_ROWS = 1 << 20


def trailing_stats(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    min_points: int,
    widened_points: int,
) -> TrailingStats:
    """Mean and std of `values` over [t - window_steps, t), excluding t itself.

    Non-finite values are left out of the baseline (a NaN would otherwise blind
    every window that holds it, polars' rolling semantics); the raw values are
    untouched.
    """
    out, widened, description = _trailing(
        steps, values, window_steps, min_points, widened_points, ("mean", "std", "count")
    )
    return TrailingStats(
        mean=out["mean"],
        std=out["std"],
        count=out["count"],
        widened=widened,
        description=description,
    )


@dataclass(frozen=True)
class WindowPlan:
    """How a trailing window is taken over one series (see `plan_window`)."""

    by_step: bool  # polars' windows by step, for irregular steps
    reach_rows: int  # else the last `reach_rows` rows before each row
    min_samples: int  # points a mean or a std needs
    widened: bool
    description: str


def plan_window(
    steps: np.ndarray, window_steps: int, min_points: int, widened_points: int
) -> WindowPlan:
    """The window over `steps`: `window_steps` steps, or widened to the last
    `widened_points` points when the log is sparser than `min_points` per window."""
    interval = median_interval(steps)
    per_window = window_steps / interval if interval and interval > 0 else 0.0
    if per_window >= min_points:
        description = f"{window_steps}-step window (about {per_window:.0f} points)"
        if every_step_logged(steps) and interval == 1.0:
            # every step logged: the window is the last window_steps rows, and polars' fixed
            # windows give the same numbers as its windows by step, in about two thirds the time
            return WindowPlan(False, int(window_steps), 1, False, description)
        return WindowPlan(True, 0, 1, False, description)
    description = (
        f"window widened to {widened_points} points = {widened_points * interval:,.0f} steps: "
        f"one point per {interval:,.0f} steps"
    )
    return WindowPlan(False, int(widened_points), 2, True, description)


def trailing_chunks(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    plan: WindowPlan,
    names: tuple[str, ...],
    later: tuple[str, ...] = (),
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The trailing `names` (of mean, std, count; NaN, or a count of 0, where a window is
    empty) `CHUNK_ROWS` rows at a time: each chunk's first row and its statistics, read-only
    arrays (polars' own buffers, not copies of them: a copy of every statistic of every
    chunk was a third of this function's time on a 10M-row log).

    Each chunk is computed with the rows its first window reaches back to, so a
    rule can keep what it needs of a chunk and let the rest go. polars' rolling
    sums are running sums, so a window's mean can differ in the last bit from the
    same window taken in one pass: no log of one chunk or less is affected.

    `later`: names a rule reads at a few rows only; those numpy counts (`window_counts`)
    are left out, for `trailing_counts_at` at those rows.
    """
    chunk_rows = CHUNK_ROWS  # read at call time: tests take small chunks
    for first in range(0, values.size, chunk_rows):
        stop = min(values.size, first + chunk_rows)
        yield first, _trailing_chunk(steps, values, window_steps, plan, names, first, stop, later)


def _trailing_chunk(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    plan: WindowPlan,
    names: tuple[str, ...],
    first: int,
    stop: int,
    later: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """The trailing `names` at the rows [first, stop), with the rows before `first` that
    its windows reach back to (`trailing_chunks`); the counts among `later` left out."""
    reach = _reach(steps, window_steps, plan, first)
    x = None
    if any(name in LEVEL_NAMES for name in names):
        x = _steps_from(steps, reach, stop)
    counted = _counted(steps, names, x is not None, reach, stop)
    out = window_counts(
        steps[reach:stop],
        np.isfinite(values[reach:stop]),
        tuple(name for name in counted if name not in later),
        (int(window_steps) if plan.by_step else plan.reach_rows, plan.by_step),
        first - reach,
        x,
    )
    rolled = tuple(name for name in names if name not in counted)
    if rolled:
        out.update(
            _rolled_chunk(steps, values, window_steps, plan, rolled, (reach, first, stop), x)
        )
    return {name: out[name] for name in names if name in out}


def _reach(steps: np.ndarray, window_steps: int, plan: WindowPlan, first: int) -> int:
    """The first row the windows of a chunk from row `first` reach back to."""
    if plan.by_step:
        return int(np.searchsorted(steps, steps[first] - window_steps, side="left"))
    return max(0, first - plan.reach_rows)


def _steps_from(steps: np.ndarray, reach: int, stop: int) -> np.ndarray:
    # steps from the chunk's first row, so that a mean of steps keeps its last digits
    return (steps[reach:stop] - steps[reach]).astype(np.float64)


def _counted(
    steps: np.ndarray, names: tuple[str, ...], level: bool, reach: int, stop: int
) -> tuple[str, ...]:
    """Which of `names` numpy counts (`window_counts`); the rest polars works out."""
    counted = tuple(name for name in names if name in COUNT_SHARES)
    if level and exact_step_sums(steps[reach:stop]):
        counted += tuple(name for name in names if name in STEP_MEAN_SHARES)
    return counted


def trailing_counts_at(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    plan: WindowPlan,
    names: tuple[str, ...],
    chunk: tuple[int, int],
    rows: np.ndarray,
) -> dict[str, np.ndarray]:
    """The trailing `names` at the `rows` (from `first`) of the chunk [first, stop) only, as
    `trailing_chunks` gives them over every row: the counts it left out (`later`). The same
    running sums over the same rows, differenced at those rows: the same bits."""
    first, stop = chunk
    reach = _reach(steps, window_steps, plan, first)
    x = _steps_from(steps, reach, stop)
    # every name is one `trailing_chunks` counts with the level's names
    assert set(names) <= set(_counted(steps, names, True, reach, stop)), names
    return window_counts(
        steps[reach:stop],
        np.isfinite(values[reach:stop]),
        names,
        (int(window_steps) if plan.by_step else plan.reach_rows, plan.by_step),
        first - reach,
        x,
        rows,
    )


def _rolled_chunk(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    plan: WindowPlan,
    names: tuple[str, ...],
    rows: tuple[int, int, int],
    x: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """The trailing `names` polars works out (no count) at the rows [first, stop), from the
    rows [reach, stop) (`rows`); `x`, the steps from the first of those (for `LEVEL_NAMES`)."""
    reach, first, stop = rows
    expressions = _window_expressions(
        names, plan.by_step, window_steps, plan.reach_rows, plan.min_samples
    )
    if plan.by_step:
        columns = {"step": steps[reach:stop], "v": values[reach:stop]}
        if x is not None:
            columns["x"] = x
        # non-finite values become null inside polars, in one pass and no numpy copy
        source = plain_numpy.frame(columns).with_columns(
            pl.when(pl.col("v").is_finite()).then(pl.col("v")).alias("v")
        )
    else:
        source = _shifted_source(values[reach:stop], x)
    out: dict[str, np.ndarray] = {}
    # a few statistics at a time: polars works out a select's expressions side by side,
    # each with temporaries of its own, and every one of them is a column of the chunk
    for at in range(0, len(names), _STATS_AT_A_TIME):  # loop over groups of statistics
        group = names[at : at + _STATS_AT_A_TIME]
        chunk = source.select(expressions[at : at + _STATS_AT_A_TIME]).slice(first - reach)
        for name in group:  # each column let go once it is in numpy
            column = chunk.drop_in_place(name)
            out[name] = column.fill_null(np.nan).to_numpy()
            del column
    return out


# the value and step columns shifted by one row, for windows of the rows before each row
_SHIFTED, _SHIFTED_X = "v_before", "x_before"


def _shifted_source(values: np.ndarray, x: np.ndarray | None) -> pl.DataFrame:
    """The columns a window of the rows before each row reads: the values (null where not
    finite) and, with `x`, the steps where a value is (`_level_expressions`), both shifted
    by one row (null first), and `x` itself. Shifted once, not once in each statistic,
    and in numpy, whose freed memory is used again (each polars column of a long log's
    chunk is a fresh one, paid a page fault a page): the same nulls and numbers."""
    finite = np.isfinite(values)
    columns = {_SHIFTED: _one_row_on(np.where(finite, values, np.nan))}
    if x is not None:
        columns[_SHIFTED_X] = _one_row_on(np.where(finite, x, np.nan))
        columns["x"] = x
    shifted = [name for name in (_SHIFTED, _SHIFTED_X) if name in columns]
    return plain_numpy.frame(columns).with_columns(pl.col(shifted).fill_nan(None))


def _one_row_on(column: np.ndarray) -> np.ndarray:
    """`column` shifted one row on: NaN first, its last value dropped."""
    out = np.empty(column.size)
    out[:1] = np.nan
    out[1:] = column[:-1]
    return out


_STATS_AT_A_TIME = 4


def trailing_chunk_at(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    plan: WindowPlan,
    names: tuple[str, ...],
    chunk: int,
) -> dict[str, np.ndarray]:
    """The trailing `names` at the rows of the `chunk`-th chunk of `CHUNK_ROWS` rows, as
    `trailing_chunks` yields them."""
    first = chunk * CHUNK_ROWS
    stop = min(values.size, first + CHUNK_ROWS)
    return _trailing_chunk(steps, values, window_steps, plan, names, first, stop)


class TrailingAt(Pointwise):
    """One trailing statistic (`name` of mean, std, count) computed at the rows read
    only: the chunks of `trailing_chunks` that hold them, so each row's number is the
    one the whole series gives. The last chunk computed is kept, as a rule reads a
    few neighbouring rows at a time."""

    def __init__(
        self, steps: np.ndarray, values: np.ndarray, window_steps: int, plan: WindowPlan, name: str
    ):
        self.steps, self.values, self.window_steps = steps, values, window_steps
        self.plan, self.name, self.size = plan, name, values.size
        self._kept: tuple[int, np.ndarray] | None = None

    def _at(self, rows: np.ndarray) -> np.ndarray:
        chunk_rows = CHUNK_ROWS  # read at call time, as trailing_chunks reads it
        out = np.empty(rows.shape)
        chunk_of = rows // chunk_rows
        for chunk in plain_numpy.unique(chunk_of).tolist():  # the chunks read, not every chunk
            if self._kept is None or self._kept[0] != chunk:
                self._kept = None  # the chunk kept goes before the next one is computed
                first = chunk * chunk_rows
                stop = min(self.size, first + chunk_rows)
                computed = _trailing_chunk(
                    self.steps, self.values, self.window_steps, self.plan, (self.name,), first, stop
                )
                self._kept = (chunk, computed[self.name])
            here = chunk_of == chunk
            out[here] = self._kept[1][rows[here] - chunk * chunk_rows]
        return out


def _trailing(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    min_points: int,
    widened_points: int,
    names: tuple[str, ...],
) -> tuple[dict[str, np.ndarray], bool, str]:
    """The trailing `names` over the whole series, whether the window was widened, and how."""
    plan = plan_window(steps, window_steps, min_points, widened_points)
    out = {name: np.empty(values.size) for name in names}
    for first, chunk in trailing_chunks(steps, values, window_steps, plan, names):
        for name, part in chunk.items():
            out[name][first : first + part.size] = part
    return out, plan.widened, plan.description


def _window_expressions(
    names: tuple[str, ...], by_step: bool, window_steps: int, rows: int, min_samples: int
) -> list[pl.Expr]:
    """polars' trailing `names` (no count: `window_counts`) over `window_steps` steps
    (`by_step`) or the `rows` rows before each row (`min_samples` of them for a mean or a
    std)."""
    if by_step:
        window = f"{int(window_steps)}i"
        built = {
            "mean": pl.col("v").rolling_mean_by("step", window, closed="left"),
            "std": pl.col("v").rolling_std_by("step", window, closed="left"),
        }
    else:
        shifted = pl.col(_SHIFTED)
        built = {
            "mean": shifted.rolling_mean(rows, min_samples=min_samples),
            "std": shifted.rolling_std(rows, min_samples=min_samples),
        }
    if any(name in LEVEL_NAMES for name in names):
        built.update(_level_expressions(by_step, window_steps, rows))
    return [built[name].alias(name) for name in names]


# what `detect/level.py` needs of a window to tell where the curve is now: the means of its
# later half and last quarter, and where in steps the window and its half lie
LEVEL_NAMES: tuple[str, ...] = ("mean_half", "count_half", "mean_quarter", "count_quarter")
LEVEL_NAMES += ("mean_double", "count_double", "x_mean_double")
LEVEL_NAMES += ("x_mean", "x_mean_half", "x_mean_quarter", "x_var", "x")


def _level_expressions(by_step: bool, window_steps: int, rows: int) -> dict[str, pl.Expr]:
    """The `LEVEL_NAMES` over the same window as the mean: [t - W, t), its later half and
    quarter, and [t - 2W, t) (for the window before it), in steps or in rows. A point with
    no value counts in none of them, and its step in none either (x follows v's nulls)."""
    x = pl.when(pl.col("v").is_not_null()).then(pl.col("x"))
    built: dict[str, pl.Expr] = {"x": pl.col("x")}
    if by_step:
        full = f"{int(window_steps)}i"
        half = f"{max(1, int(window_steps) // 2)}i"
        quarter = f"{max(1, int(window_steps) // 4)}i"
        for suffix, span in (("_half", half), ("_quarter", quarter)):
            built["mean" + suffix] = pl.col("v").rolling_mean_by("step", span, closed="left")
        built["x_mean"] = x.rolling_mean_by("step", full, closed="left")
        double = f"{2 * int(window_steps)}i"
        built["mean_double"] = pl.col("v").rolling_mean_by("step", double, closed="left")
        built["x_mean_double"] = x.rolling_mean_by("step", double, closed="left")
        built["x_mean_half"] = x.rolling_mean_by("step", half, closed="left")
        built["x_mean_quarter"] = x.rolling_mean_by("step", quarter, closed="left")
        built["x_var"] = x.rolling_var_by("step", full, closed="left")
        return built
    shifted, shifted_x = pl.col(_SHIFTED), pl.col(_SHIFTED_X)
    for suffix, size in (("_half", max(1, rows // 2)), ("_quarter", max(1, rows // 4))):
        built["mean" + suffix] = shifted.rolling_mean(size, min_samples=1)
    built["x_mean"] = shifted_x.rolling_mean(rows, min_samples=1)
    built["mean_double"] = shifted.rolling_mean(2 * rows, min_samples=1)
    built["x_mean_double"] = shifted_x.rolling_mean(2 * rows, min_samples=1)
    built["x_mean_half"] = shifted_x.rolling_mean(max(1, rows // 2), min_samples=1)
    built["x_mean_quarter"] = shifted_x.rolling_mean(max(1, rows // 4), min_samples=1)
    built["x_var"] = shifted_x.rolling_var(rows, min_samples=2)
    return built


def value_at_or_before(steps: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """values at the last logged step <= each of `at` (NaN before the first)."""
    idx = np.searchsorted(steps, at, side="right") - 1
    out = np.full(np.shape(at), np.nan)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


def every_step_logged(steps: np.ndarray) -> bool:
    """Sorted unique integer steps with no gap: row i is step steps[0] + i."""
    return bool(steps.size) and int(steps[-1]) - int(steps[0]) == steps.size - 1


def value_window_before(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    first: int = 0,
    stop: int | None = None,
) -> np.ndarray:
    """`value_at_or_before(steps, values, steps - window_steps)` at the rows [first, stop),
    without a search over the whole column when every step is logged (the point a window
    back is then window_steps rows back)."""
    stop = steps.size if stop is None else stop
    if every_step_logged(steps) and window_steps >= 0:
        out = np.full(stop - first, np.nan)
        reads_from = max(first, window_steps)  # the first row with a point a window back
        if reads_from < stop:  # else a negative slice end would count from the end
            out[reads_from - first :] = values[reads_from - window_steps : stop - window_steps]
        return out
    return value_at_or_before(steps, values, steps[first:stop] - window_steps)


def window_max_at(
    steps: np.ndarray,
    values,
    window_steps: int,
    rows: np.ndarray,
    *,
    non_finite_as: float | None = None,
) -> np.ndarray:
    """The max of `values` over the steps (t - window_steps, t] at `rows` only, as polars'
    `rolling_max_by(..., closed="right")` gives it; `steps` sorted unique integers, so a
    window holds at most window_steps rows.

    `non_finite_as`: NaN and +-Inf read as this value. Few rows then read only their
    windows' values, so `values` may be anything indexable by an array of rows (a
    series computed where it is read) and no finite copy of it is made.
    """
    few_rows = window_steps >= 1 and rows.size * window_steps < steps.size
    if few_rows and (non_finite_as is not None or not np.isnan(values).any()):
        first = np.searchsorted(steps, steps[rows] - window_steps, side="right")
        at = rows[:, None] - np.arange(window_steps)[None, :]  # each row and the rows before it
        inside = at >= first[:, None]
        held = values[np.where(inside, at, rows[:, None])]  # outside: the row again
        if non_finite_as is not None:
            held = np.nan_to_num(
                held, nan=non_finite_as, posinf=non_finite_as, neginf=non_finite_as
            )
        return held.max(axis=1)
    if non_finite_as is not None:
        values = np.nan_to_num(
            values[:], nan=non_finite_as, posinf=non_finite_as, neginf=non_finite_as
        )
    frame = pl.DataFrame({"step": steps, "v": values})
    window = pl.col("v").rolling_max_by("step", f"{window_steps}i", closed="right")
    return frame.select(window)["v"].to_numpy()[rows]


@dataclass(frozen=True)
class ForwardMedian:
    """The median of the non-NaN values among `values[j : j + points]`, the window cut short
    at the end: `pl.Series(values[::-1]).fill_nan(None).rolling_median(points,
    min_samples=1)` reversed, computed a slice at a time for a scan that reads a few.

    Each slice is that same polars call over the slice and the points - 1 values after
    it, so every window holds what it holds in the whole series; a null put after the
    slice keeps polars on the null-aware kernel whenever the whole series would be.
    """

    values: np.ndarray
    points: int
    has_nan: bool

    @classmethod
    def of(cls, values: np.ndarray, points: int) -> ForwardMedian:
        forward = cls(values, points, bool(np.isnan(values).any()))
        forward.slice(0, 1)  # a window polars refuses fails here, as the whole series did
        return forward

    def slice(self, lo: int, hi: int) -> np.ndarray:
        hi = min(hi, self.values.size)
        if hi <= lo:
            return np.zeros(0)
        stop = min(self.values.size, hi + self.points - 1)
        backwards = pl.Series(self.values[lo:stop][::-1], dtype=pl.Float64)
        if self.has_nan:
            backwards = pl.concat([pl.Series([None], dtype=pl.Float64), backwards])
        medians = (
            backwards.fill_nan(None)
            .rolling_median(self.points, min_samples=1)
            .fill_null(np.nan)
            .to_numpy()[::-1]
        )
        return medians[: hi - lo]


def rolling_median_at(
    values: np.ndarray | Pointwise, window_points: int, min_samples: int, rows: np.ndarray
) -> np.ndarray:
    """`pl.Series(values).shift(1).rolling_median(window_points, min_samples)` at `rows` only
    (NaN where that is null).

    polars takes each window's median from that window alone, so the windows of
    `rows`, laid end to end, give the very same numbers at a fraction of the cost
    when `rows` are few; only a zero median's sign may differ, as polars keeps
    each window sorted from the one before and a window holding both 0.0 and -0.0
    may have either in the middle. A leading all-null window keeps polars on the null-aware
    kernel that the full series (its shifted-in null) takes.
    """
    if rows.size == 0:
        return np.zeros(0)
    if rows.size * window_points >= values.size:  # many rows: the whole series is cheaper
        whole = pl.Series(values[:], dtype=pl.Float64).shift(1)  # a per-point series made whole
        medians = whole.rolling_median(window_points, min_samples=min_samples)
        return medians.fill_null(np.nan).to_numpy()[rows]
    # shifted position p holds values[p - 1]; p < 1 (the shifted-in null, or before the
    # start) is null, which a truncated window at the start amounts to
    positions = rows.astype(np.int64)[:, None] + np.arange(1 - window_points, 1)[None, :]
    positions = np.concatenate([np.zeros(window_points, dtype=np.int64), positions.ravel()])
    present = positions >= 1
    gathered = values[np.where(present, positions - 1, 0)]
    windows = plain_numpy.frame({"v": gathered, "present": present}).select(
        pl.when(pl.col("present")).then(pl.col("v")).alias("v")
    )["v"]
    medians = windows.rolling_median(window_points, min_samples=min_samples)
    ends = medians.gather_every(window_points, offset=window_points - 1)[1:]
    return ends.fill_null(np.nan).to_numpy()


def _trailing_median_frame(steps: np.ndarray, values: np.ndarray, window_steps: int) -> pl.Series:
    frame = plain_numpy.frame({"step": steps, "v": values})
    median = pl.col("v").rolling_median_by("step", window_size=f"{window_steps}i", closed="left")
    return frame.select(median)["v"]


def _window_start(steps: np.ndarray, rows: np.ndarray, window_steps: int) -> np.ndarray:
    """The first row of each row's window [t - window_steps, t); `steps` sorted unique ints."""
    if every_step_logged(steps):  # the usual dense log: no search over the whole column
        return np.maximum(rows - window_steps, 0)
    return np.searchsorted(steps, steps[rows] - window_steps, side="left")


def trailing_median_at(
    steps: np.ndarray, values: np.ndarray, window_steps: int, rows: np.ndarray
) -> np.ndarray:
    """The median of `values` over the steps [t - window_steps, t) at `rows` only (NaN for an
    empty window), as polars' `rolling_median_by` gives it over the whole series.

    Each row's window is cut out and the cut-outs are laid end to end, their steps
    moved apart so that no window reaches into the one before: polars then sees each
    window exactly as it would in the whole series. `steps` are sorted unique integers.
    """
    if rows.size == 0:
        return np.zeros(0)
    rows = rows.astype(np.int64)
    first = _window_start(steps, rows, window_steps)
    sizes = rows - first + 1  # the window and the row itself
    # long or many windows: the whole series is cheaper (and the moved steps stay in int64)
    if int(sizes.sum()) >= steps.size or (2 * window_steps + 2) * rows.size >= 2**62:
        return (
            _trailing_median_frame(steps, values, window_steps).fill_null(np.nan).to_numpy()[rows]
        )
    ends = np.cumsum(sizes)
    piece = np.repeat(np.arange(rows.size), sizes)
    at = np.arange(int(ends[-1])) - np.repeat(ends - sizes, sizes) + np.repeat(first, sizes)
    # each piece spans at most window_steps; a gap of twice that keeps the pieces apart
    moved = steps[at] - np.repeat(steps[first], sizes) + piece * (2 * window_steps + 2)
    medians = _trailing_median_frame(moved, values[at], window_steps)
    return medians.gather(ends - 1).fill_null(np.nan).to_numpy()


def trailing_median_bound(
    steps: np.ndarray, values: np.ndarray, window_steps: int, side: Literal["lower", "upper"]
) -> np.ndarray:
    """Per row, a lower or an upper bound of the median `trailing_median_at` gives
    (-inf/+inf where none is cheap), for a rule that needs the exact median only
    where the bound leaves its test open (`rows_left_open` takes it a chunk at a time).

    The rows are cut into blocks of `block` rows. If every block lying wholly in a
    window of n values has at least `block - rank` values >= y, and those blocks hold
    n // 2 + 1 such values in all, the window's lower middle value is >= y, and so is
    its median (the middle value, or between the two middle ones); the upper bound is
    the mirror image. The blocks are those inside every window of a block of rows,
    so one bound serves the whole block. `values` are finite; `steps` sorted unique
    integers, so a window holds at most `window_steps` values.
    """
    return _bound_rows(_block_bounds(steps, values, window_steps), side, 0, steps.size)


def rows_left_open(
    steps: np.ndarray,
    values: np.ndarray,
    window_steps: int,
    side: Literal["lower", "upper"],
    settled: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """The rows where `settled(values, bound)` is False, `bound` that row's
    `trailing_median_bound`: the only rows whose exact median a rule needs.

    Taken `CHUNK_ROWS` rows at a time: the bound and the test's temporaries cost
    a chunk, where whole they were each one more copy of the column.
    """
    blocked = _block_bounds(steps, values, window_steps)
    found = []
    for first in range(0, steps.size, CHUNK_ROWS):  # loop over chunks, not rows
        stop = min(steps.size, first + CHUNK_ROWS)
        bound = _bound_rows(blocked, side, first, stop)
        found.append(np.flatnonzero(~settled(values[first:stop], bound)) + first)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _bound_rows(
    blocked: tuple[np.ndarray, np.ndarray, int] | None,
    side: Literal["lower", "upper"],
    first: int,
    stop: int,
) -> np.ndarray:
    """The bound at rows [first, stop): each row takes its block's."""
    if blocked is None:
        return np.full(stop - first, -np.inf if side == "lower" else np.inf)
    q_lower, q_upper, block = blocked
    return (q_lower if side == "lower" else q_upper)[np.arange(first, stop) // block]


def _block_bounds(
    steps: np.ndarray, values: np.ndarray, window_steps: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The bounds of `trailing_median_bound` per block of rows, and the block's length in
    rows; None where no bound is cheap."""
    n = steps.size
    span = float(steps[-1] - steps[0]) if n else 0.0
    window_rows = min(window_steps, window_steps * (n - 1) / span if span > 0 else 0.0)
    block = int(window_rows // 5)
    if block < 4 or n < 2 * block:
        return None
    blocks = n // block
    first_row = np.arange(0, n, block)
    last_row = np.minimum(first_row + block - 1, n - 1)
    # every window of the rows block q starts at or before lo_last and ends at q's first row
    lo_last = _window_start(steps, last_row, window_steps)
    lo_first = _window_start(steps, first_row, window_steps)
    first_full = -(-lo_last // block)
    del lo_last
    count = np.arange(first_row.size) - first_full  # whole blocks in every window of q
    need = np.minimum(last_row - lo_first, window_steps) // 2 + 1  # n // 2 + 1 at most
    # per block, but blocks are a fifth of a window: on a long log each of these arrays is
    # a sizeable part of a column, so they go as soon as they are read
    del first_row, last_row, lo_first
    usable = count > 0
    if not usable.any():
        return None
    per_block = int(np.ceil(np.median(need[usable] / count[usable])))
    rank = block - per_block
    if rank < 0:
        return None
    usable &= count * per_block >= need
    del need
    low_stat, high_stat = _block_order_stats(values, block, blocks, rank)
    q_lower, q_upper = _range_extremes(low_stat, high_stat, first_full, count, usable)
    return q_lower, q_upper, block


def _block_order_stats(
    values: np.ndarray, block: int, blocks: int, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per whole block of `block` values, its `rank`-th smallest and largest. Sorted a
    chunk of blocks at a time: a sorted copy of the whole column would be held only
    to read two values of each block."""
    low_stat, high_stat = np.empty(blocks), np.empty(blocks)
    per_chunk = max(1, CHUNK_ROWS // block)
    for first in range(0, blocks, per_chunk):  # loop over chunks of blocks, not rows
        stop = min(blocks, first + per_chunk)
        # a sort of short rows is several times faster than np.partition along them
        ordered = np.sort(values[first * block : stop * block].reshape(stop - first, block), axis=1)
        low_stat[first:stop], high_stat[first:stop] = ordered[:, rank], ordered[:, block - 1 - rank]
    return low_stat, high_stat


def _range_extremes(
    low_stat: np.ndarray,
    high_stat: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    usable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """min of low_stat and max of high_stat over [start, start + count) where usable
    (-inf/+inf elsewhere): a sparse table, one level per doubling of the range."""
    lows, highs = [low_stat], [high_stat]
    width = 1
    longest = int(count[usable].max())
    while 2 * width <= longest:
        lows.append(np.minimum(lows[-1][:-width], lows[-1][width:]))
        highs.append(np.maximum(highs[-1][:-width], highs[-1][width:]))
        width *= 2
    q_lower, q_upper = np.full(count.size, -np.inf), np.full(count.size, np.inf)
    at = np.flatnonzero(usable)
    c = count[at]
    level = np.floor(np.log2(c)).astype(np.int64)
    s = start[at]
    for k in range(len(lows)):  # a few levels, not rows
        pick = level == k
        a, b = s[pick], s[pick] + c[pick] - (1 << k)
        q_lower[at[pick]] = np.minimum(lows[k][a], lows[k][b])
        q_upper[at[pick]] = np.maximum(highs[k][a], highs[k][b])
    return q_lower, q_upper
