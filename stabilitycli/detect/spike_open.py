"""The rows of a dense log's chunk the spike rule needs the local level at (issue 40).

`level.local_level` takes a hundred passes over its rows; of a chunk's rows the rule
reads its numbers only where the point passes the first bar (`loss > mu + k sigma`). A
row whose window does not fall (`LocalLevel.falling` False) is judged against the
window's mean and std with its floor, which two passes give. So the local level is
worked out only at the rows that may fall or that pass the bar of the mean and std:
every other row is judged, to the bit, as the whole `local_level` judges it.

Why a row outside those rows does not fall, in a dense log (no pooled noise, the fall
read from the points: `fall_curve.fall_z_with_windows` is then `fall_z` itself).
`falling` needs `fall_z >= fall_bar` (a number, so no NaN), with `fall_z = d / q`,
`d = early - late`, `q = judge * s`, `s = sqrt(1 / n_early + 1 / n_late)` and
`judge = max(nan_to_num(spread), floor) >= floor` (not NaN, else `fall_z` is NaN); here
`d` and `s` are the same operations on the same numbers, so the same bits. As
`fall_bar > 0`, `d > 0` and `q >= 0`. IEEE rounding is monotone: `floor <= judge` and
`s >= 0` give `fl(floor * s) <= fl(judge * s) = q`; if `fl(floor * s)` is 0, `d / 0`
is +inf, which passes; else `fl(d / fl(floor * s)) >= fl(d / q) = fall_z >= fall_bar`.
So `most = d / (floor * s) >= fall_bar` holds wherever `falling` does.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds

# rows worked out at a time: a block's temporaries stay in the cache, and are used again
BLOCK_ROWS = 1 << 16


def open_rows(
    stats: dict[str, np.ndarray],
    loss: np.ndarray,
    planned: np.ndarray | None,
    thresholds: Thresholds,
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a chunk whose window may fall or whose point passes the bar of the
    window's mean and floored std (sorted), and that floored std at every row, the sigma
    of `local_level` where the window does not fall, to the bit (the same operations).
    `stats`: the chunk's trailing `level.WINDOW_NAMES`; `loss`, its points. Every number
    is a row's own: worked out `BLOCK_ROWS` rows at a time."""
    size = loss.size
    std = np.empty(size)
    found = []
    for first in range(0, size, BLOCK_ROWS):  # loop over blocks of rows, not rows
        rows = slice(first, min(size, first + BLOCK_ROWS))
        keep = _open_block(
            {name: stats[name][rows] for name in _READ},
            loss[rows],
            None if planned is None else planned[rows],
            thresholds,
            std[rows],
        )
        found.append(np.flatnonzero(keep) + first)
    return (np.concatenate(found) if found else np.zeros(0, dtype=np.int64)), std


_READ = ("count", "count_half", "mean", "mean_half", "std")


def _open_block(
    stats: dict[str, np.ndarray],
    loss: np.ndarray,
    planned: np.ndarray | None,
    thresholds: Thresholds,
    std: np.ndarray,
) -> np.ndarray:
    """`open_rows` of a block, as a mask; its floored std written into `std`."""
    n, n_late = stats["count"], stats["count_half"]
    mean, late = stats["mean"], stats["mean_half"]
    floor = np.abs(mean) * thresholds.sigma_floor_frac
    np.maximum(np.nan_to_num(stats["std"], nan=0.0), floor, out=std)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bar = std * thresholds.spike_sigma  # the spike rule's bar, as it takes it
        bar += mean
        keep = np.isfinite(loss) & (loss > bar)
        # as `level._local_level_rows` takes them
        n_early = n - n_late
        early = (n * mean - n_late * late) / n_early
        most = (early - late) / (floor * np.sqrt(1.0 / n_early + 1.0 / n_late))
        fall_bar = np.full(n.shape, float(thresholds.level_fall_z))
        if planned is not None:
            fall_bar[planned] /= 2.0
        keep |= most >= fall_bar
    return keep
