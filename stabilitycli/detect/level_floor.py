"""Where a series cannot reach a multiple of its trailing level, told without the level.

The spike rule asks, at every flagged point, whether the grad norm reached
`grad_norm_outlier_ratio` times its level (`level.LevelAt`) in the few steps before it:
a possible cause. That level takes over a dozen rolling statistics of the whole series
(at 10M steps, a quarter of the rule's time), while a healthy run's flagged points number
in the thousands and its grad norm never comes near ten times its level.

The level is never below the least finite value of its trailing window: it is the
window's mean, or where the curve falls the lower of that mean and the trend read at the
row, never under the mean of the window's last quarter (`level.local_level`), and each of
those means is of values of the window. So a value under `bar` times that least value,
by a margin far wider than any rounding of the means (half of it), is under `bar` times
its level, whatever the level's last bits: only the other rows need the level.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.detect import windows
from stabilitycli.detect.level import LevelAt
from stabilitycli.detect.windows import window_max_at
from stabilitycli.frame import plain_numpy

# what the least value is shrunk by before it stands for the level: the level's own
# rounding (a compensated running mean) is some 1e-15 of it
_MARGIN = 0.5


def may_reach(level: LevelAt, bar: float, later: tuple[float, ...] = ()) -> np.ndarray:
    """Per row of the level's series: could `value / level` be `bar` (> 0) or more? False
    only where the value is finite and under `_MARGIN * bar` times the least finite value
    of the level's window, that least value being above 0. Taken `windows.CHUNK_ROWS` rows
    at a time with the rows their windows reach back to: a least value is the same
    number however the series is cut, and the temporaries are a chunk's, not the log's.

    `later`: the bars a later call will ask of the same level, answered from the same least
    values and kept on it (`LevelAt.reach_kept`, a bool a row each) until asked: the least
    values of a long log cost more than all the rest of the answer."""
    kept = level.reach_kept.pop(bar, None)
    if kept is not None:
        return kept
    bars = (bar, *(b for b in later if b != bar))
    out = {b: np.empty(level.size, dtype=bool) for b in bars}
    chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
    for first in range(0, level.size, chunk_rows):  # loop over chunks of rows
        stop = min(level.size, first + chunk_rows)
        floor = _least(level, first, stop)
        values = level.values[first:stop]
        for each in bars:  # a bar or two
            with np.errstate(invalid="ignore", over="ignore"):
                under = (floor > 0) & np.isfinite(values) & (values < each * _MARGIN * floor)
            out[each][first:stop] = ~under
    level.reach_kept.update((b, out[b]) for b in bars[1:])
    return out[bar]


def _least(level: LevelAt, first: int, stop: int) -> np.ndarray:
    """The least finite value of the level's window at the rows [first, stop) (NaN where
    the window holds none)."""
    steps, plan = level.steps, level.plan
    if plan.by_step:
        reach = int(np.searchsorted(steps, steps[first] - level.window_steps, side="left"))
    else:
        reach = max(0, first - plan.reach_rows)
    values = level.values[reach:stop]
    if not plan.by_step and plan.reach_rows >= 1:
        return _trailing_min(values, plan.reach_rows)[first - reach :]
    # null where not finite; a window of rows reads the row before each row: the values
    # shifted one row on, NaN first. Both in numpy (freed memory used again; a polars
    # column of a long log's chunk is a fresh one), the same nulls and numbers
    finite = np.where(np.isfinite(values), values, np.nan)
    if not plan.by_step:
        finite = np.concatenate(([np.nan], finite[:-1]))
    frame = plain_numpy.frame({"step": steps[reach:stop], "v": finite})
    v = pl.col("v").fill_nan(None)
    if plan.by_step:
        least = v.rolling_min_by("step", f"{int(level.window_steps)}i", closed="left")
    else:  # the last reach_rows rows before the row, as the level's window
        least = v.rolling_min(plan.reach_rows, min_samples=1)
    return frame.select(least.fill_null(np.nan)).to_series().to_numpy()[first - reach :]


def _trailing_min(values: np.ndarray, width: int) -> np.ndarray:
    """Per row, the least finite value of the `width` rows before it (NaN where there is
    none): polars' `rolling_min(width, min_samples=1)` of the values shifted one row on,
    non-finite ones null. A least value is one of the values, whatever the algorithm
    (van Herk / Gil-Werman here: the least from the start of each block of `width` rows
    and to its end, two passes), so the same number, but for the sign of a zero where
    the window holds both (`may_reach` reads only whether it is above 0)."""
    # padded: `width` rows before the first (none of them finite), and to whole blocks
    blocks = -(-(values.size + width) // width) + 1
    padded = np.full(blocks * width, np.inf)
    inside = padded[width : width + values.size]
    np.copyto(inside, values)
    inside[~np.isfinite(values)] = np.inf  # NaN and -inf are no value either
    # a block a column: each pass runs along the blocks' rows, all blocks at once
    cols = padded.reshape(blocks, width).T
    ahead = np.minimum.accumulate(cols, axis=0).T.ravel()  # from each block's start
    behind = np.minimum.accumulate(cols[::-1], axis=0)[::-1].T.ravel()  # to its end
    # row t reads padded[t : t + width]: the end of one block and the start of the next
    size = values.size
    least = np.minimum(behind[:size], ahead[width - 1 : width - 1 + size])
    least[least == np.inf] = np.nan
    return least


def asked_rows(
    level: LevelAt | None, steps: np.ndarray, lead_steps: int, rows: np.ndarray, bar: float
) -> np.ndarray:
    """Which of `rows` have a row that `may_reach` the bar in [t - lead_steps, t] (the
    window `spike_causes.lead_max` reads), as a mask of `rows`; every row without a level
    (the ratio's denominator is then not `level` itself)."""
    if level is None or rows.size == 0 or not bar > 0:
        return np.ones(rows.size, dtype=bool)
    reach = may_reach(level, bar).astype(np.float64)
    return window_max_at(steps, reach, lead_steps + 1, rows) > 0
