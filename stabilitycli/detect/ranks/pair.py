"""Two ranks: a median of two cannot outvote the bad one, so compare the pair.

With two ranks each sits exactly one MAD from their midpoint, so a cohort z is
always 0.67 and says nothing. Instead:

1. the pair's difference d = x_b - x_a is compared with its usual noise. The
   noise comes from each rank's own step-to-step changes (1.4826 * MAD of the
   first differences / sqrt(2)), which a level shift barely moves, so a rank
   that is wrong for most of the run does not hide itself by inflating the
   scale. z_pair = d / sqrt(sigma_a^2 + sigma_b^2), floored at
   rank_rel_floor * |midpoint|.
2. once |z_pair| >= rank_z for rank_persist_steps logged steps in a row, each
   rank's own history names the culprit: the one whose level moved from its
   last 50 points before the onset, at least three times as far as the
   other's. When neither stands out (or the pair disagrees from the first
   step), the disagreement is reported without a culprit (rank None).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.detect.ranks.change import change_point, recovery
from stabilitycli.detect.ranks.cohort import MAD_TO_SIGMA


def _own_noise(x: np.ndarray) -> float:
    diffs = np.diff(x[np.isfinite(x)])
    if diffs.size == 0:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(diffs - np.median(diffs))) / np.sqrt(2.0))


def pair_level(
    rows: pl.DataFrame,
    rank_z: float,
    persist: int,
    rel_floor: float,
    *,
    history_points: int,
    culprit_ratio: float,
    cusum_k: float,
    cusum_h: float,
    recovery_steps: int,
) -> dict | None:
    """The pair's persistent disagreement, or None. `rows`: rank, t, x (two ranks)."""
    ranks = sorted(rows["rank"].unique().to_list())
    if len(ranks) != 2:
        return None
    a, b = ranks
    wide = (
        rows.filter(pl.col("rank") == a)
        .select("t", pl.col("x").alias("xa"))
        .join(rows.filter(pl.col("rank") == b).select("t", pl.col("x").alias("xb")), on="t")
        .filter(pl.col("xa").is_finite() & pl.col("xb").is_finite())
        .sort("t")
    )
    if wide.height < persist:
        return None
    t = wide["t"].to_numpy()
    xa = wide["xa"].to_numpy()
    xb = wide["xb"].to_numpy()
    noise = float(np.hypot(_own_noise(xa), _own_noise(xb)))
    mid = (xa + xb) / 2.0
    scale = np.maximum(noise, rel_floor * np.abs(mid))
    scale = np.where(scale > 0, scale, 1e-12)
    z = (xb - xa) / scale
    flag = np.abs(z) >= rank_z
    confirmed = _first_run(flag, persist)
    if confirmed is None:
        return None
    onset_index, _ = change_point(z, confirmed, k=cusum_k, h=cusum_h, clip=rank_z)
    # every row here has both ranks finite: each one is compared
    last, back, rows_back = recovery(flag, np.ones_like(flag), onset_index, recovery_steps)
    stop = last if back is not None else t.size - 1
    episode = np.arange(onset_index, stop + 1)
    common = {
        "pair": (a, b),
        "onset_step": int(t[onset_index]),
        "end_step": int(t[last]),
        "recovered_step": None if back is None else int(t[back]),
        "rows_back": rows_back,
        "recovery_steps": recovery_steps,
        "effect_steps": (int(t[onset_index]), int(t[stop])),
    }
    before = slice(max(0, onset_index - history_points), onset_index)
    culprit = None
    if onset_index > 0:
        moved_a = abs(np.median(xa[episode]) - np.median(xa[before]))
        moved_b = abs(np.median(xb[episode]) - np.median(xb[before]))
        if moved_a >= culprit_ratio * moved_b and moved_a > 0:
            culprit = a
        elif moved_b >= culprit_ratio * moved_a and moved_b > 0:
            culprit = b
    if culprit is None:
        return {
            **common,
            "rank": None,
            "value": None,
            "cohort_median": float(np.median(mid[episode])),
            "robust_z": float(np.median(np.abs(z[episode]))),
            "mean_shift": None,
            "values": (float(np.median(xa[episode])), float(np.median(xb[episode]))),
        }
    mine, other, sign = (xa, xb, -1.0) if culprit == a else (xb, xa, 1.0)
    return {
        **common,
        "rank": culprit,
        "value": float(np.median(mine[episode])),
        # the healthy rank's level is the reference a median of more ranks would give
        "cohort_median": float(np.median(other[episode])),
        "robust_z": float(np.median(sign * z[episode])),
        # the pair's mean with the culprit, minus the other rank alone
        "mean_shift": float(np.mean((mine[episode] - other[episode]) / 2.0)),
        "mean_with": float(np.mean(mid[episode])),
        "mean_without": float(np.mean(other[episode])),
    }


def _first_run(flag: np.ndarray, length: int) -> int | None:
    """Index where the first run of at least `length` True values starts.

    As in `rank_cohort.flag_runs`, one False between two Trues does not break a run.
    """
    if length <= 1:
        hits = np.flatnonzero(flag)
        return int(hits[0]) if hits.size else None
    filled = flag.copy()
    filled[1:-1] |= flag[:-2] & flag[2:]
    padded = np.concatenate(([0], filled.astype(np.int8), [0]))
    edges = np.diff(padded)
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    long_enough = np.flatnonzero(ends - starts >= length)
    return int(starts[long_enough[0]]) if long_enough.size else None
