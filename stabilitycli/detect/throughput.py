"""Throughput drops of the whole run (per-rank stragglers live in ranks.py)."""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Skip
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.throughput import THROUGHPUT_DROP, ThroughputDropEvidence
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.windows import rows_left_open, trailing_median_at


def _throughput(view: SeriesView) -> tuple[str, np.ndarray, np.ndarray] | None:
    for name in ("tokens_per_s", "tflops"):
        if view.has(name):
            steps, values = view.points(name)
            return name, steps, values
    if view.has("step_time_ms"):
        steps, values = view.points("step_time_ms")
        with np.errstate(divide="ignore"):
            return "1/step_time_ms", steps, 1000.0 / values
    return None


@rule(
    THROUGHPUT_DROP.rule,
    THROUGHPUT_DROP.section,
    "the run's throughput fell below its recent level",
    emits=(THROUGHPUT_DROP,),
    series=("tokens_per_s", "tflops", "step_time_ms"),
    reads=(
        "min_points_per_window",
        "spike_window_steps",
        "throughput_drop_frac",
        "throughput_persist_points",
    ),
)
def detect_throughput_drop(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """Throughput that falls and stays below its trailing median.

    What it detects: tokens/s (or TFLOPs, or 1/step time) more than
    {throughput_drop_frac:.0%} (`throughput_drop_frac`) below its median over the previous
    {spike_window_steps} steps (`spike_window_steps`) for at least
    {throughput_persist_points} logged points in a row (`throughput_persist_points`).

    Why it matters: a sustained slowdown of the whole job is usually one slow
    GPU or node holding every rank back (a straggler); it costs
    tokens per hour long before it shows in the loss.
    """
    result = RuleResult()
    found = _throughput(view)
    if found is None:
        result.skipped.append(
            Skip(THROUGHPUT_DROP.rule, "no throughput or step-time series in the log")
        )
        return result
    name, steps, values = found
    ok = np.isfinite(values) & (values > 0)
    if not ok.all():  # most logs: no copy of either column
        steps, values = steps[ok], values[ok]
    if values.size < thresholds.min_points_per_window + thresholds.throughput_persist_points:
        result.skipped.append(
            Skip(
                THROUGHPUT_DROP.rule,
                f"insufficient data: {values.size} throughput points for a trailing baseline",
            )
        )
        _short_log_drop(name, steps, values, thresholds, result)
        return result
    low, median_rows, median = _low_points(steps, values, thresholds)
    run = pl.Series(low).rle()
    lengths, flags = run.struct.field("len").to_numpy(), run.struct.field("value").to_numpy()
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    hits = np.flatnonzero(flags & (lengths >= thresholds.throughput_persist_points))
    for h in hits[:10]:
        begin, length = int(starts[h]), int(lengths[h])
        level = float(np.median(values[begin : begin + length]))
        # a drop's first point is low, so its median was taken
        base = float(median[np.searchsorted(median_rows, begin)])
        result.findings.append(
            THROUGHPUT_DROP.finding(
                f"{name} fell {1 - level / base:.1%} ({base:.4g} -> {level:.4g}) "
                f"from step {steps[begin]} for {length} points",
                step=int(steps[begin]),
                end_step=int(steps[begin + length - 1]),
                metric=name,
                evidence=ThroughputDropEvidence(
                    baseline=base,
                    level=level,
                    drop_frac=1 - level / base,
                    points=length,
                ),
            )
        )
    return result


def _low_points(
    steps: np.ndarray, values: np.ndarray, thresholds: Thresholds
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which points sit throughput_drop_frac below their trailing median, exactly where a
    drop of throughput_persist_points could be (False elsewhere); the rows the median was
    taken at, and the median there.

    A point at or above (1 - frac) x an upper bound of its median is not low. A drop
    is throughput_persist_points low points in a row, so only stretches of that many
    points the bound leaves open get the exact median; a shorter one is no drop.
    """
    window, keep = thresholds.spike_window_steps, 1 - thresholds.throughput_drop_frac

    def not_low(values: np.ndarray, upper: np.ndarray) -> np.ndarray:
        if keep <= 0:
            return np.zeros(values.size, dtype=bool)
        with np.errstate(invalid="ignore"):
            return values >= keep * upper

    # the stretches, found among the few open rows rather than over the whole column
    maybe_rows = rows_left_open(steps, values, window, "upper", not_low)
    # each open row's stretch number from 0 (prepending -2 opens the first; none: none)
    stretch = np.cumsum(np.diff(maybe_rows, prepend=-2) != 1) - 1
    lengths = np.bincount(stretch)
    long = lengths >= max(1, thresholds.throughput_persist_points)
    open_rows = maybe_rows[long[stretch]]
    baseline = trailing_median_at(steps, values, window, open_rows)
    low = np.zeros(values.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        low[open_rows] = values[open_rows] < keep * baseline
    return low, open_rows, baseline


def _short_log_drop(name, steps, values, thresholds: Thresholds, result: RuleResult) -> None:
    """In a log too short for a baseline: do its last points sit below its first ones?"""
    if values.size < 2 * thresholds.throughput_persist_points - 2:
        return
    head = float(np.median(values[:2]))
    tail = float(values[-1])
    # the last point is where the run now sits; the one before must agree it dropped
    if (
        tail < (1 - thresholds.throughput_drop_frac) * head
        and values[-2] < (1 - thresholds.throughput_drop_frac / 2) * head
    ):
        drop_at = int(np.argmax(values < (1 - thresholds.throughput_drop_frac / 2) * head))
        result.findings.append(
            THROUGHPUT_DROP.finding(
                f"{name} fell {1 - tail / head:.1%} ({head:.4g} -> {tail:.4g}) "
                f"from step {steps[drop_at]} to the end of this short log",
                step=int(steps[drop_at]),
                end_step=int(steps[-1]),
                metric=name,
                evidence=ThroughputDropEvidence(
                    baseline=head,
                    level=tail,
                    drop_frac=1 - tail / head,
                    short_log=True,
                ),
            )
        )
