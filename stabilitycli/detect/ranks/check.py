"""Per-rank telemetry (spec 5, seed 000): find the rank that the mean hides.

One failed rank among 64 (40.0 while the others sit at 2.0) moves the global
mean by (40 - 2) / 64 = 0.59 nats; among 1024 ranks, by 0.04. The mean is a
low-pass filter over exactly this signal, so `find_rank_outliers` compares
each rank with its cohort at every step instead:

* **level**: robust z = (x - cohort median) / (1.4826 * MAD, floored; see
  `rank_cohort`) at least `rank_z` for `rank_persist_steps` logged steps in a
  row, or a CUSUM of that z (drift allowance `rank_cusum_k`) reaching
  `rank_cusum_decide`: a rank 3-5 sigmas off for good never holds 6 for ten
  steps, but piles up that much evidence within a few dozen. One noisy step,
  or a rank drifting by mini-batch noise, is not an outlier: a healthy 64-rank
  run reports none.
* **nonfinite**: the rank reports NaN/Inf while at least half of the other
  ranks are finite, for `rank_nonfinite_steps` steps (default 1: a NaN is not
  noise). When the whole cohort goes NaN together, that is spec 1, not a rank.
* **silent**: the rank's last logged step is at least `rank_persist_steps`
  cohort steps before the cohort's last step (the median over ranks).
* **straggler**: throughput (`tokens_per_s`, or `step_time_ms` inverted) below
  `straggler_ratio` times the cohort median and `rank_z` robust sigmas under
  it, persistently.

Small cohorts: with 3 ranks the median still outvotes one bad rank (the
spread is pooled over ~51 steps, so one tight step is not a hair trigger).
With 2 ranks a median cannot tell which one is wrong: `rank_pair` compares the
pair's difference with each rank's own step-to-step noise and names a culprit
only when one rank's own history moved; otherwise it reports the
disagreement with `rank` None. One rank: nothing to compare, said in the notes.

`mean_shift` is the seed's arithmetic, (x_rank - cohort median) / N with N the
ranks reporting at that step, as a median over the outlier's steps.
`explained_mean_shift` says how much of a move in the global mean the outlier
ranks account for, so that `analyze` does not blame the mean for a spike that
one rank explains.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import polars as pl

from stabilitycli.core import numfmt, progress, threads
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.detect.ranks.change import (
    change_point,
    deviation_end,
    direction_at,
    first_crossings,
    recovery,
)
from stabilitycli.detect.ranks.cohort import (
    STEP_STATS,
    Block,
    Cohort,
    build_cohort,
    cohort_steps_after,
    flag_runs,
    positions,
    rank_bounds,
    steps_back,
)
from stabilitycli.detect.ranks.decision import (
    ONSET_CHANGE_POINT,
    ONSET_RAMP,
    Decision,
    decide,
    with_cusum,
)
from stabilitycli.detect.ranks.decision import evidence as decision_evidence
from stabilitycli.detect.ranks.decision import words as decision_words
from stabilitycli.detect.ranks.drift import ramp_onset
from stabilitycli.detect.ranks.pair import pair_level
from stabilitycli.detect.ranks.picture import PictureSums
from stabilitycli.detect.ranks.report import (
    KINDS,
    LEVEL,
    NONFINITE,
    SILENT,
    STRAGGLER,
    MeanShift,
    RankOutlier,
    RankPicture,
    RankReport,
)

if TYPE_CHECKING:
    from stabilitycli.core.config import Thresholds
    from stabilitycli.frame import RunData

THROUGHPUT = (("tokens_per_s", False), ("step_time_ms", True))  # (column, invert to a rate)
RANK_PARTS = 4  # the parts of the check told as progress (find_rank_outliers)


def find_rank_outliers(run: RunData, metric: str, thresholds: Thresholds) -> RankReport:
    """Compare every rank with its cohort at every step (module doc); one pass, vectorised."""
    frame = run.frame
    if metric == "loss":
        run.require_loss()
    if "rank" not in frame.columns:
        raise StabInputError(
            run.source.path,
            "no per-rank values (no rank key such as 'rank' or 'global_rank', and not a "
            "directory of per-rank files)",
        )
    if metric not in frame.columns:
        shown = ", ".join(c for c in frame.columns if c not in ("step", "rank"))
        raise StabUsageError(f"--metric {metric}: not in {run.source.path} (metrics: {shown})")
    notes: list[str] = []
    height = frame.height
    # the parts told as progress: the cohort, the judgement, the throughput cohort, the last
    progress.tell("ranks", 0, RANK_PARTS)
    cohort = build_cohort(
        frame,
        metric,
        thresholds.rank_rel_floor,
        notes,
        pool_points=thresholds.rank_spread_pool_points,
        with_totals=True,  # `_level` sums each step for an outlier rank's effect on the mean
    )
    rows = cohort.rows
    if rows.height == 0:
        raise StabInputError(run.source.path, f"no logged {metric} values")
    logged = _logged_steps(cohort)
    # lockstep ranks are distinct ranks of per_rank rows each
    n_ranks = rows.height // cohort.per_rank if cohort.per_rank else int(rows["rank"].n_unique())
    # polars types median/min/max as any scalar; these columns are integers
    typical = int(cast("float | None", cohort.steps["n"].median()) or 0)
    throughput = next(((c, inv) for c, inv in THROUGHPUT if c in frame.columns), None)
    # the throughput cohort is judged beside the metric's when that costs no copy of the rows
    # (the judging is numpy on one core; the machine has more)
    beside = _judged_beside(frame, metric, throughput, thresholds, cohort) if n_ranks >= 2 else None
    progress.tell("ranks", 1, RANK_PARTS, rows=height // RANK_PARTS)
    is_throughput = metric in (c for c, _ in THROUGHPUT)
    by_level = n_ranks > 2 and not is_throughput and typical >= 2
    flagged, crossed, picture = _judge_rows(cohort, thresholds, crossings=by_level)
    outliers: list[RankOutlier] = []
    if n_ranks < 2:
        notes.append("one rank only: nothing to compare it with")
    elif is_throughput:
        notes.append(f"{metric} is throughput: ranks below the cohort are stragglers")
    elif not by_level:
        outliers += _pair(cohort, thresholds, notes) if n_ranks == 2 else []
        if n_ranks > 2:
            notes.append(f"typically {typical} rank(s) per step: too few to compare levels")
    else:
        # steps with fewer than rank_min_cohort finite values are simply not judged
        outliers += _level(cohort, flagged, crossed, thresholds)
    if n_ranks >= 2:
        outliers += _nonfinite(cohort, flagged, thresholds)
        outliers += _silent(cohort, thresholds)
    progress.tell("ranks", 2, RANK_PARTS, rows=2 * height // RANK_PARTS)
    step_range = _step_range(cohort)
    if beside is not None:
        del cohort, rows, flagged
        outliers += beside.result()
    elif n_ranks >= 2 and throughput is not None:
        column, invert = throughput
        if column == metric and not invert:
            tp = cohort
        else:
            # the loss cohort is done with: let it go before the throughput one is built, or
            # a 64-rank log holds two copies of its rows with every per-row statistic
            frame_grid = cohort.frame_grid
            del cohort, rows, flagged
            tp = build_cohort(
                frame,
                column,
                thresholds.rank_rel_floor,
                [],
                pool_points=thresholds.rank_spread_pool_points,
                invert=invert,
                frame_grid=frame_grid,
            )
        outliers += _straggler(tp, thresholds, invert)
        del tp
    progress.tell("ranks", 3, RANK_PARTS, rows=3 * height // RANK_PARTS)
    outliers.sort(key=_order)
    report = RankReport(
        metric=metric,
        ranks=n_ranks,
        steps=step_range,
        outliers=tuple(outliers),
        throughput_metric=throughput[0] if throughput else None,
        notes=tuple(notes),
        picture=picture,
    )
    report = replace(
        report,
        mean_effect=explained_mean_shift(
            report, frame, baseline_points=thresholds.rank_history_points, logged=logged
        ),
    )
    progress.tell("ranks", RANK_PARTS, RANK_PARTS, rows=height)
    return report


def _step_range(cohort: Cohort) -> tuple[int, int]:
    """The first and the last step logged: the ends of the step table (sorted by t), a row
    per step unless a stride bucketed them; else of the rows."""
    t = cohort.steps["t"]
    if cohort.stride is None and t.null_count() == 0:
        return int(t[0]), int(t[-1])
    step = cohort.rows["step"]
    return int(cast(int, step.min())), int(cast(int, step.max()))


def _logged_steps(cohort: Cohort) -> pl.DataFrame | None:
    """The steps that logged the metric (t) and the distinct ranks that logged each one
    (ranks: known for lockstep ranks, else 0), when the cohort's steps are the log's
    (not stride buckets); for `explained_mean_shift`."""
    if cohort.stride is not None:
        return None
    ranks = pl.col("n") if cohort.per_rank is not None else pl.lit(0, pl.Int64)
    return cohort.steps.select("t", ranks.alias("ranks"))


def _judged_beside(
    frame: pl.DataFrame,
    metric: str,
    throughput: tuple[str, bool] | None,
    thresholds: Thresholds,
    cohort: Cohort,
) -> Future[list[RankOutlier]] | None:
    """The stragglers, found in a thread while the metric's cohort is judged, when both
    cohorts' rows are views of the frame's columns (lockstep ranks, nothing missing, no rate
    made of a time): two cohorts then hold little more than one. None: judge them after,
    as also when no second thread is lent (`core.threads`: a process under a memory cap
    takes turns, and a library caller lends none)."""
    if throughput is None or cohort.per_rank is None or threads.lent() < 2:
        return None
    column, invert = throughput
    if invert or column == metric or frame[column].null_count() or frame[metric].null_count():
        return None

    frame_grid = cohort.frame_grid

    def stragglers() -> list[RankOutlier]:
        tp = build_cohort(
            frame,
            column,
            thresholds.rank_rel_floor,
            [],
            pool_points=thresholds.rank_spread_pool_points,
            frame_grid=frame_grid,
        )
        return _straggler(tp, thresholds, invert)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stab-stragglers")
    future = pool.submit(stragglers)
    pool.shutdown(wait=False)  # the thread ends with its one task; `result` waits for it
    return future


def _order(o: RankOutlier) -> tuple:
    z = abs(o.robust_z) if o.robust_z is not None and np.isfinite(o.robust_z) else np.inf
    return (-int(o.severity), KINDS.index(o.kind), -z, o.rank if o.rank is not None else -1)


# --- the four kinds -------------------------------------------------------------------


def _judge_rows(
    cohort: Cohort, thresholds: Thresholds, *, crossings: bool
) -> tuple[pl.DataFrame, dict[int, int], RankPicture]:
    """One pass over every row, a block at a time, for the three things that need them:
    the rows that deviate (level) or are non-finite against a finite cohort, with their
    steps' statistics (`_flag_rows`); each rank's first CUSUM crossing (`_crossings`, when
    the level rule judges this cohort: `crossings`); and the picture (`PictureSums`). A
    block's z, and where its x is finite, are worked out once for the three."""
    judged_step = cohort.per_step(pl.col("n") >= thresholds.rank_min_cohort)
    # at least half of the *other* ranks finite: the cohort is finite, this rank is not
    finite_cohort_step = cohort.per_step(
        (pl.col("n_fin") >= 1) & (2 * pl.col("n_fin") >= pl.col("n") - 1)
    )
    height = cohort.rows.height
    level = np.empty(height, dtype=bool)
    lone_nonfinite = np.zeros(height, dtype=bool)
    picture = PictureSums(cohort)
    crossed: dict[int, int] = {}
    # whole ranks for the CUSUM, whose running sums restart at each rank
    for block in cohort.blocks(whole_ranks=crossings):
        finite = np.isfinite(block.x)
        picture.add(block, finite)
        judged = finite & block.at(judged_step)
        level[block.start : block.stop] = block.flat(_over(block.z, thresholds.rank_z, judged))
        if not finite.all():  # else no row is (lone_nonfinite starts all False)
            np.logical_not(finite, out=finite)
            finite &= block.at(finite_cohort_step)
            lone_nonfinite[block.start : block.stop] = block.flat(finite)
        if crossings:  # the last use of the block's z, which it overwrites
            crossed.update(_crossings(cohort, block, judged, thresholds))
    bad = level | lone_nonfinite
    flagged = cohort.flagged(bad).with_columns(
        pl.Series("lvl", level[bad]),
        pl.Series("nf", lone_nonfinite[bad]),
        pl.lit(True).alias("bad"),
    )
    return flagged, crossed, picture.picture()


def _over(z: np.ndarray, bar: float, judged: np.ndarray) -> np.ndarray:
    """Where a judged row's |z| is not under the bar: "not under" rather than "over", so
    that a NaN z counts as over, as polars orders NaN above every number."""
    over = np.abs(z) < bar
    np.logical_not(over, out=over)
    over &= judged
    return over


def _episodes(
    cohort: Cohort,
    flagged: pl.DataFrame,
    flag: str,
    persist: int,
    stats: list[pl.Expr],
    max_gap: int,
    recovery_steps: int,
) -> list[dict]:
    """Per outlier rank: onset (first qualifying run), stats over its flagged rows after it,
    the last bad row (`bad`) and the step at which it came back, if it stayed back for
    `recovery_steps` logged steps to the end."""
    runs = flag_runs(flagged, flag, max(1, persist), max_gap)
    if runs.height == 0:
        return []
    episode = flagged.join(runs.select("rank", pl.col("start").alias("onset")), on="rank").filter(
        pl.col("step") >= pl.col("onset")
    )
    ends = (
        episode.filter(pl.col("bad"))
        .group_by("rank")
        .agg(pl.col("i").max().alias("last_i"), pl.col("step").max().alias("end_step"))
    )
    summary = (
        episode.filter(pl.col(flag))
        .sort(["rank", "step"])
        .group_by("rank")
        .agg(pl.col("onset").first(), pl.col("n").first().alias("n_onset"), *stats)
        .join(ends, on="rank")
        .sort("rank")
    )
    last_i = summary["last_i"].to_numpy().astype(np.int64)
    ranks = summary["rank"].to_numpy()
    out = summary.drop("last_i").to_dicts()
    for item, (step, compared) in zip(
        out, steps_back(cohort, last_i, ranks, recovery_steps), strict=True
    ):
        item["recovered_step"] = step
        item["rows_back"] = compared
        item["recovery_steps"] = recovery_steps
    return out


def _level(
    cohort: Cohort, flagged: pl.DataFrame, crossed: dict[int, int], thresholds: Thresholds
) -> list[RankOutlier]:
    """Persistence or the CUSUM decides; the CUSUM places the onset; the rank's rows the rest.

    A loop over the ranks that passed either bar (few), each one numpy over its
    own rows: where the deviation began (`change.change_point`), whether it
    came back (`change.recovery`), and over the affected steps (onset to
    recovery, or to the end) its level, the cohort's, its z and the mean with
    it minus the mean without it.
    """
    runs = flag_runs(
        flagged,
        "lvl",
        max(1, thresholds.rank_persist_steps),
        thresholds.rank_max_gap_points,
    )
    rows = cohort.rows
    confirmed = dict(crossed)
    persisted = {}
    for rank, start, decided, length in runs.select("rank", "start", "decided", "length").rows():
        confirmed[rank] = min(start, confirmed.get(rank, start))
        persisted[rank] = (decided, length)
    if not confirmed:
        return []
    ranks = np.array(sorted(confirmed), dtype=np.int64)  # long_rows casts rank to Int64
    starts, ends = rank_bounds(rows, ranks)
    summed = cohort.totals()
    table = summed["t"].to_numpy()
    totals = summed["total"].fill_null(np.nan).to_numpy()
    out = []
    for rank, lo, hi in zip(ranks.tolist(), starts, ends, strict=True):
        part = cohort.with_stats(cohort.part(int(lo), int(hi)), *STEP_STATS)
        decided = decide(
            persisted.get(rank),
            crossed.get(rank),
            persist_bar=thresholds.rank_persist_steps,
            cusum_bar=thresholds.rank_cusum_decide,
        )
        e = _level_episode(
            part,
            int(confirmed[rank]),
            totals[positions(table, part["t"].to_numpy())],
            thresholds,
            decided,
        )
        e["rank"] = rank
        out.append(_outlier(LEVEL, e, cohort.column, thresholds))
    return out


def _crossings(
    cohort: Cohort, block: Block, judged: np.ndarray, thresholds: Thresholds
) -> dict[int, int]:
    """Rank -> the step where its CUSUM of z first reaches `rank_cusum_decide`, for the ranks
    of a block of whole ranks (`Cohort.blocks`) whose CUSUM does; `judged`: the block's
    rows that the cohort judges. The block's z is overwritten."""
    z = block.z
    if not judged.all():  # the usual block judges every row: no pass to mark none
        z[~judged] = np.nan
    start, stop = block.start, block.stop
    ranks, at = first_crossings(
        block.flat(z),
        cohort.array("rank", start, stop),
        k=thresholds.rank_cusum_k,
        clip=thresholds.rank_z,
        bar=thresholds.rank_cusum_decide,
        rows_per_rank=z.shape[1] if z.ndim == 2 else None,
    )
    steps = cohort.array("step", start, stop)
    return dict(zip(ranks.tolist(), steps[at].tolist(), strict=True))


def _pooled_z(x: np.ndarray, med: np.ndarray, sigma: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """The rank's deviation in units of the cohort's typical spread over its judged rows, for
    placing the onset: the per-step spread of a small cohort swings from row to row (the MAD
    of four values), and a wide row shrinks the z of the very row where the shift began."""
    spread = sigma[judged & np.isfinite(sigma)]
    if not spread.size:
        return (x - med) / sigma
    return (x - med) / float(np.median(spread))


def _level_episode(
    part: pl.DataFrame,
    confirmed_step: int,
    total: np.ndarray,
    thresholds: Thresholds,
    decided: Decision | None = None,
) -> dict:
    """One rank's rows (`part`, in step order) and the per-step sum of the finite values."""
    steps = part["step"].to_numpy()
    x = part["x"].to_numpy()
    z = part["z"].fill_null(np.nan).to_numpy()
    med = part["med"].fill_null(np.nan).to_numpy()
    n = part["n"].to_numpy()
    n_fin = part["n_fin"].to_numpy()
    judged = np.isfinite(x) & np.isfinite(z) & (n >= thresholds.rank_min_cohort)
    # the same two conditions `_judge_rows` uses, on this rank's rows only
    bad = (judged & (np.abs(z) >= thresholds.rank_z)) | (
        ~np.isfinite(x) & (n_fin >= 1) & (2 * n_fin >= n - 1)
    )
    confirmed = int(np.searchsorted(steps, confirmed_step))
    sigma = part["sigma"].fill_null(np.nan).to_numpy()
    pooled = np.where(judged, _pooled_z(x, med, sigma, judged), np.nan)
    onset, _ = change_point(
        pooled,
        confirmed,
        k=thresholds.rank_cusum_k,
        h=thresholds.rank_cusum_h,
        clip=thresholds.rank_z,
    )
    end = deviation_end(
        np.where(judged, z, np.nan),
        confirmed,
        k=thresholds.rank_cusum_k,
        h=thresholds.rank_cusum_h,
        clip=thresholds.rank_z,
    )
    drift = ramp_onset(
        pooled,
        steps,
        steps.size - 1 if end is None else end,
        direction_at(pooled, confirmed),
        clip=thresholds.rank_z,
    )
    onset_by = ONSET_CHANGE_POINT
    if drift is not None and drift < onset:
        onset, onset_by = drift, ONSET_RAMP
    if decided is not None:
        decided = with_cusum(
            decided,
            np.where(judged, z, np.nan),
            steps,
            k=thresholds.rank_cusum_k,
            clip=thresholds.rank_z,
        )
    if end is not None:  # under the bar is not back in line while the CUSUM says it is off
        bad[onset : end + 1] = True
    last, back, rows_back = recovery(bad, judged, onset, thresholds.rank_recovery_steps)
    stop = last if back is not None else steps.size - 1
    inside = np.zeros(steps.size, dtype=bool)
    inside[onset : stop + 1] = True
    level = inside & judged
    # per step: the mean over every finite rank, and over the others (this rank left out)
    share = inside & np.isfinite(x) & np.isfinite(total) & (n_fin >= 2)
    with_it = total[share] / n_fin[share]
    without = (total[share] - x[share]) / (n_fin[share] - 1)
    return {
        "onset": int(steps[onset]),
        "end_step": int(steps[last]),
        "recovered_step": None if back is None else int(steps[back]),
        "rows_back": rows_back,
        "recovery_steps": thresholds.rank_recovery_steps,
        "effect_steps": (int(steps[onset]), int(steps[stop])),
        "value": _median(x[level]),
        "cohort_median": _median(med[level]),
        "robust_z": _median(z[level]),
        "mean_shift": float(np.mean(with_it - without)) if with_it.size else None,
        "mean_with": float(np.mean(with_it)) if with_it.size else None,
        "mean_without": float(np.mean(without)) if with_it.size else None,
        "n_onset": int(n[onset]),
        **decision_evidence(decided, onset_by),
    }


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def _nonfinite(cohort: Cohort, flagged: pl.DataFrame, thresholds: Thresholds) -> list[RankOutlier]:
    stats = [
        pl.col("x").first().alias("value"),
        pl.col("med").first().alias("cohort_median"),
        (pl.col("x").first() / pl.col("n").first()).alias("mean_shift"),
    ]
    # steps where most of the cohort is non-finite: the NaN spread (or was everywhere)
    spread = cohort.steps.filter(2 * pl.col("n_fin") < pl.col("n"))["t"].to_numpy()
    out = []
    for e in _episodes(
        cohort,
        flagged,
        "nf",
        thresholds.rank_nonfinite_steps,
        stats,
        thresholds.rank_max_gap_points,
        thresholds.rank_recovery_steps,
    ):
        e["robust_z"] = None
        later = spread[np.searchsorted(spread, e["onset"]) :]
        e["cohort_nonfinite_step"] = int(later[0]) if later.size else None
        out.append(_outlier(NONFINITE, e, cohort.column))
    return out


def _straggler(cohort: Cohort, thresholds: Thresholds, invert: bool) -> list[RankOutlier]:
    """Throughput below straggler_ratio x the cohort median (x the faster rank with 2 ranks)."""
    judged = pl.col("n") >= thresholds.rank_min_cohort
    ref_step = cohort.per_step(pl.when(judged).then(pl.col("med")).otherwise(pl.col("hi")))
    judged_step = cohort.per_step(judged)
    pair_step = cohort.per_step(pl.col("n") == 2)
    rows = cohort.rows
    slow = np.empty(rows.height, dtype=bool)
    # a NaN reference counts as above the rank, as polars orders NaN above every number
    ref_bar_step = thresholds.straggler_ratio * ref_step
    no_ref_step = np.isnan(ref_step)
    some_without_ref = bool(no_ref_step.any())
    for block in cohort.blocks():
        x = block.x
        below = x < block.at(ref_bar_step)
        if some_without_ref:
            below |= block.at(no_ref_step)
        below &= np.isfinite(x)
        if below.any():  # else no row is slow, and the block's z is not needed
            judged_low = block.at(judged_step) & (block.z <= -thresholds.rank_z)
            below &= judged_low | block.at(pair_step)
        slow[block.start : block.stop] = block.flat(below)
    flagged = cohort.flagged(slow)
    flagged = flagged.with_columns(
        pl.lit(True).alias("slow"),
        pl.lit(True).alias("bad"),
        pl.Series("ref", ref_step[flagged["pos"].to_numpy()]),
    )
    original = (1.0 / pl.col("x")) if invert else pl.col("x")
    original_ref = (1.0 / pl.col("ref")) if invert else pl.col("ref")
    stats = [
        original.median().alias("value"),
        original_ref.median().alias("cohort_median"),
        pl.col("z").median().alias("robust_z"),
        ((original - original_ref) / pl.col("n")).median().alias("mean_shift"),
        (pl.col("x") / pl.col("ref")).median().alias("ratio"),
    ]
    column = cohort.column
    return [
        _outlier(STRAGGLER, e, column)
        for e in _episodes(
            cohort,
            flagged,
            "slow",
            thresholds.rank_persist_steps,
            stats,
            thresholds.rank_max_gap_points,
            thresholds.rank_recovery_steps,
        )
    ]


def _silent(cohort: Cohort, thresholds: Thresholds) -> list[RankOutlier]:
    """Ranks whose last report is rank_persist_steps cohort steps before the cohort's last."""
    # rows are in (rank, step) order: a rank's last row holds its last t
    _, last_i = cohort.last_rows()
    cohort_t = cohort.steps["t"].to_numpy()
    last_t = cohort.rows["t"].to_numpy()[last_i]
    reference = float(np.quantile(last_t, 0.5, method="higher"))
    missed = cohort_steps_after(cohort_t, last_t, reference)
    silent = np.flatnonzero(missed >= max(1, thresholds.rank_persist_steps))
    if silent.size == 0:
        return []
    at = cohort.with_stats(cohort.take(last_i[silent]), *STEP_STATS)
    onsets = cohort_t[np.searchsorted(cohort_t, last_t[silent], side="right")]
    out = []
    for row, onset, count in zip(at.to_dicts(), onsets, missed[silent], strict=True):
        z = row["z"] if row["z"] is not None and np.isfinite(row["z"]) else None
        entry = {
            "rank": row["rank"],
            "onset": int(onset),
            "end_step": int(row["step"]),
            "value": row["x"],
            "cohort_median": row["med"],
            "robust_z": z,
            # it no longer contributes to the mean after it falls silent
            "mean_shift": 0.0,
            "n_onset": row["n"],
            "recovered_step": None,
            "missed": int(count),
            "reference": int(reference),
        }
        out.append(_outlier(SILENT, entry, cohort.column))
    return out


def _pair(cohort: Cohort, thresholds: Thresholds, notes: list[str]) -> list[RankOutlier]:
    notes.append(
        "two ranks: compared with each other and with their own history "
        "(a median of two cannot say which one is wrong)"
    )
    hit = pair_level(
        cohort.rows.select("rank", "t", "x"),
        thresholds.rank_z,
        thresholds.rank_persist_steps,
        thresholds.rank_rel_floor,
        history_points=thresholds.rank_history_points,
        culprit_ratio=thresholds.rank_pair_culprit_ratio,
        cusum_k=thresholds.rank_cusum_k,
        cusum_h=thresholds.rank_cusum_h,
        recovery_steps=thresholds.rank_recovery_steps,
    )
    if hit is None:
        return []
    entry = dict(hit, onset=hit["onset_step"], n_onset=2)
    return [_outlier(LEVEL, entry, cohort.column)]


# --- messages ----------------------------------------------------------------------------


def _outlier(kind: str, e: dict, metric: str, thresholds: Thresholds | None = None) -> RankOutlier:
    rank = e["rank"]
    onset = int(e["onset"])
    n = int(e.get("n_onset") or 0)
    value, median = _f(e.get("value")), _f(e.get("cohort_median"))
    z, shift = _f(e.get("robust_z")), _f(e.get("mean_shift"))
    back = e.get("recovered_step")
    tail = _tail(e)
    test_words = ""
    span = e.get("effect_steps")
    over = f"steps {span[0]}–{span[1]}" if span else ""
    if kind == LEVEL and rank is None:
        a, b = e["pair"]
        va, vb = e["values"]
        message = (
            f"ranks {a} and {b} disagree from step {onset} on ({_fmt(va)} vs {_fmt(vb)}, medians "
            f"over {over}; a median {_fmt(z)} times their usual difference); with two ranks "
            f"neither can be blamed{tail}"
        )
    elif kind == LEVEL:
        message = (
            f"rank {rank} sits at {_fmt(value)} against a cohort median of {_fmt(median)} "
            f"from step {onset} on (medians over {over}; robust z {_fmt(z)}, a median too); "
            f"{_effect_words(rank, metric, over, shift, e)}{tail}"
        )
        if thresholds is not None and e.get("test") is not None:
            test_words = decision_words(e, thresholds.rank_z, thresholds.rank_cusum_k)
            message += "; " + test_words
    elif kind == NONFINITE:
        spread = e.get("cohort_nonfinite_step")
        message = (
            f"rank {rank} reports {_fmt(value)} {metric} at step {onset} while the cohort is "
            f"finite (median {_fmt(median)} at that step, {n} ranks); it alone makes the mean "
            f"non-finite{tail}"
            + (
                f"; most of the cohort is non-finite from step {spread} on"
                if spread is not None
                else ""
            )
        )
    elif kind == SILENT:
        message = (
            f"rank {rank} stops reporting {metric} after step {e['end_step']} while the cohort "
            f"goes on to step {e['reference']} ({e['missed']} more logged steps)"
        )
    else:
        message = (
            f"rank {rank} runs at {_fmt(e.get('ratio'))}x the cohort's {metric} "
            f"({_fmt(value)} vs a median of {_fmt(median)}, medians over its slow steps) "
            f"from step {onset} on{tail}"
        )
    return RankOutlier(
        rank=None if rank is None else int(rank),
        kind=kind,
        onset_step=onset,
        value=value,
        cohort_median=median,
        robust_z=z,
        mean_shift=shift,
        metric=metric,
        ranks_reporting=n,
        end_step=None if e.get("end_step") is None else int(e["end_step"]),
        recovered_step=None if back is None else int(back),
        pair=tuple(e["pair"]) if e.get("pair") and rank is None else None,
        cohort_nonfinite_step=e.get("cohort_nonfinite_step"),
        effect_steps=None if span is None else (int(span[0]), int(span[1])),
        mean_with=_f(e.get("mean_with")),
        mean_without=_f(e.get("mean_without")),
        test=e.get("test"),
        test_step=e.get("test_step"),
        test_statistic=_f(e.get("test_statistic")),
        test_bar=_f(e.get("test_bar")),
        onset_by=e.get("onset_by"),
        message=message,
        test_words=test_words,
    )


def _effect_words(rank: int, metric: str, over: str, shift: float | None, e: dict) -> str:
    """The mean effect said the way it is computed (the per-step difference, averaged)."""
    words = (
        f"the mean of {metric} with rank {rank} minus the mean without it over {over}: "
        f"{_fmt(shift, sign=True)}"
    )
    with_it, without = _f(e.get("mean_with")), _f(e.get("mean_without"))
    if with_it is not None and without is not None:
        words += f" ({_fmt(with_it)} with it, {_fmt(without)} without, means over those steps)"
    return words


def _tail(e: dict) -> str:
    """Back in line from a step, or why not (still out at the end, or back too briefly)."""
    back, rows_back, need = e.get("recovered_step"), e.get("rows_back"), e.get("recovery_steps")
    if back is not None:
        return (
            f"; back in line from step {back} (in line on all {rows_back} logged steps compared "
            "with the cohort from there on)"
        )
    if rows_back is None:
        return ""
    if rows_back == 0:
        return "; not back in line by the end of the log"
    return (
        f"; not back in line (in line on only {rows_back} logged step(s) after its last "
        f"deviating one, {need} needed)"
    )


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _fmt(value: float | None, sign: bool = False) -> str:
    return "?" if value is None else numfmt.number(value, sign)


def global_mean(
    frame: pl.DataFrame,
    metric: str,
    exclude_ranks: tuple[int, ...] = (),
    from_step: int | None = None,
) -> pl.DataFrame:
    """The all-rank mean per step (step, mean, n) as an all-reduced logger would show it,
    for the steps from `from_step` on (every step without it).

    NaN on any rank makes the step's mean NaN; a rank not reporting is left out.
    """
    lazy = frame.lazy().filter(pl.col(metric).is_not_null())
    if from_step is not None:
        lazy = lazy.filter(pl.col("step") >= from_step)
    if exclude_ranks and "rank" in frame.columns:
        lazy = lazy.filter(~pl.col("rank").is_in(list(exclude_ranks)))
    return (
        lazy.group_by("step")
        .agg(pl.col(metric).mean().alias("mean"), pl.len().alias("n"))
        .sort("step")
        .collect()
    )


def explained_mean_shift(
    report: RankReport,
    frame: pl.DataFrame,
    metric: str | None = None,
    start_step: int | None = None,
    end_step: int | None = None,
    baseline_points: int = 50,
    logged: pl.DataFrame | None = None,
) -> MeanShift | None:
    """How much of the mean's move over [start_step, end_step] the outlier ranks explain.

    The "before" level is the mean over the `baseline_points` logged steps just
    before `start_step`; the "during" level is the mean over the window. The
    same two numbers without the level/nonfinite outlier ranks give the clean
    shift; `explained = shift - clean_shift`. Without a window, the window is
    the earliest outlier onset to the last step; None when there is nothing to
    explain. `logged` (`_logged_steps`): the steps where `metric` was logged, so that
    only the steps from the baseline on are averaged, not every step of the log.
    """
    metric = metric or report.metric
    culprits = [
        o
        for o in report.outliers
        if o.kind in (LEVEL, NONFINITE) and o.rank is not None and o.metric == metric
    ]
    if start_step is None:
        if not culprits:
            return None
        start_step = min(o.onset_step for o in culprits)
    if end_step is None:
        end_step = report.steps[1]
    ranks = tuple(sorted({int(o.rank) for o in culprits if o.rank is not None}))
    from_step, clean_from_step = _baseline_start(logged, start_step, baseline_points, len(ranks))
    full = global_mean(frame, metric, from_step=from_step)
    clean = global_mean(frame, metric, ranks, clean_from_step) if ranks else full

    def levels(series: pl.DataFrame) -> tuple[float | None, float | None, tuple[int, int] | None]:
        before = series.filter(pl.col("step") < start_step).tail(baseline_points)
        during = series.filter(pl.col("step").is_between(start_step, end_step))
        span = (int(before["step"][0]), int(before["step"][-1])) if before.height else None
        return _mean(before["mean"]), _mean(during["mean"]), span

    before, during, span = levels(full)
    clean_before, clean_during, _ = levels(clean)
    return MeanShift(
        start_step=int(start_step),
        end_step=int(end_step),
        baseline_steps=span,
        ranks=ranks,
        n_ranks=report.ranks,
        mean_before=before,
        mean_during=during,
        clean_before=clean_before,
        clean_during=clean_during,
    )


def _baseline_start(
    logged: pl.DataFrame | None, start_step: int, baseline_points: int, n_left_out: int
) -> tuple[int | None, int | None]:
    """The first step the means with and without the left-out ranks need (the first of the
    `baseline_points` logged steps before `start_step`), or None: every step.

    Without the ranks a step stays only if another rank logged it: a step that they
    alone logged would pull that baseline earlier, so it starts there only when each of
    its steps was logged by more ranks than are left out.
    """
    if logged is None:
        return None, None
    t = logged["t"].to_numpy()
    start = int(np.searchsorted(t, start_step))
    first = max(0, start - baseline_points)
    if first == 0:
        return None, None
    window = logged["ranks"].to_numpy()[first:start]
    return int(t[first]), int(t[first]) if bool((window > n_left_out).all()) else None


def _mean(series: pl.Series) -> float | None:
    if series.len() == 0:
        return None
    return float(np.mean(series.to_numpy()))
