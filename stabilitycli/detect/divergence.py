"""§4: silent divergence - a loss that rises for good, and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding, Skip
from stabilitycli.core.records import dataclass
from stabilitycli.detect.autocorr import NoiseMemory, inflation, loss_noise_memory
from stabilitycli.detect.facts import Facts, TrendScan
from stabilitycli.detect.kinds.divergence import (
    DIVERGENCE,
    GRAD_NORM_RISING,
    LOSS_RISE,
    PLATEAU,
    LossRiseEvidence,
    RiseCause,
    RisingGradNorm,
    RisingLr,
    TrendEvidence,
    WeightNormMove,
)
from stabilitycli.detect.kinds.schedule import LR_INCREASING
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.schedule import warmup_end
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.spike import SpikeEvent
from stabilitycli.detect.trend import (
    CHUNK_WINDOWS,
    Binned,
    bin_medians,
    mann_kendall_at,
    mann_kendall_between,
    mann_kendall_windows,
    plain_values,
    window_chunks,
)
from stabilitycli.detect.windows import median_interval


@rule(
    DIVERGENCE.rule,
    DIVERGENCE.section,
    "loss rising for good (Mann-Kendall over trailing windows and longer ones), with its cause",
    emits=(DIVERGENCE, PLATEAU, LOSS_RISE, GRAD_NORM_RISING),
    series=("loss", "lr", "param_norm", "grad_norm"),
    reads=(
        "divergence_after_frac",
        "divergence_end_z",
        "divergence_min_rise_frac",
        "divergence_step_share",
        "recovery_median_points",
        "divergence_falling_evidence",
        "divergence_slow_z",
        "divergence_window_steps",
        "divergence_z",
        "grad_norm_rise_frac",
        "lr_rise_frac",
        "min_points_per_window",
        "noise_autocorr_min",
        "noise_far_lag_points",
        "trend_points",
        "warmup_frac",
        "weight_norm_ratio",
        "widened_window_points",
    ),
    needs=("spikes",),
    provides=("trend",),
)
def detect_divergence(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A loss that keeps rising and never comes back, and which §4 cause fits.

    What it detects: every {divergence_window_steps}-step window of the run is
    tested for a rising trend with the Mann-Kendall statistic on bin medians
    (tolerant of heavy-tailed noise; the literal strictly-monotone check is
    reported beside it) (Q4.1). A significant rise (z >= {divergence_z:g}, or
    {divergence_slow_z:g} over the longer windows of a slow rise) counts as
    divergence only when the loss after the window never returns to the
    window's starting level; a rise the run later undoes is `loss-rise` (info).
    The divergence starts where a least-squares fit of "falling or level, then
    a straight rise, then level" over the logged points, from before the first
    rising window to the end of the log, starts its rise; where the loss before
    it follows a decay curve (a power law or exponential fitted to what was
    logged before, kept only when it beats a straight line by Akaike's
    criterion), that curve stands in for the straight fall. A rise that accelerates
    is dated by a fit of its whole shape instead, where that fits better: the loss
    over a stretch reaching three times the rise's length back (not before its
    steepest fall) to the end of the log, as the trend before it (a line plus
    that decay curve and the LR) carried on under it plus b * (t - t0)^p, p a
    small whole power above one, t0 no further back than 1.5 times the straight
    rise's length before its start (#36); with the LR logged, that decay curve
    runs on the LR-weighted step count where it fits the loss before the rise
    clearly better there (Akaike's evidence 10), and then, where it halves over
    the stretch, the LR times the curve is part of the trend too (the anneal of a
    decaying LR takes a share of the level);
    the finding then says so ("onset fitted: ..."). For the first
    diverging window it asks Q4.2 (LR rising by more than {lr_rise_frac:.0%}
    outside warmup -> `lr-increasing`), Q4.3 (a weight norm changing more than
    {weight_norm_ratio:g}x -> `weight-norm`) and Q4.4 (grad-norm moving average
    rising by more than {grad_norm_rise_frac:.0%} -> `grad-norm-rising`). A rise
    below {divergence_min_rise_frac:.0%} of the starting level with none of
    those causes is a plateau. Where the loss noise is autocorrelated (lag-1 at least
    {noise_autocorr_min:g}) z is corrected for it: divided by the square root of the
    variance factor of a window's correlated bins. A window is judged only with
    {divergence_after_frac:.0%} of a window's points logged after it, unless its z reaches
    {divergence_end_z:g}; what could not be judged is said in Q4.1. A rise that half a
    window after its onset already holds {divergence_step_share:.0%} of its height is a
    step (a level shift, §2), not divergence.

    Why it matters: silent divergence raises no NaN and no overflow; the loss
    just stops coming back. Caught early it costs a checkpoint reload and an LR
    or schedule fix; caught late it costs the run.
    """
    result = RuleResult()
    if not view.has("loss"):
        result.skipped.append(Skip(DIVERGENCE.rule, "loss not read: no loss series in the log"))
        return result
    steps, loss = view.finite_points("loss")
    # once: every scan below reads them
    interval, plain = median_interval(steps), plain_values(loss)
    # the noise's memory from point to point, measured on the points themselves: bin
    # medians around a rolling mean would count the curve's own bends as memory
    memory = loss_noise_memory(view, thresholds)
    # a log that ends in NaN or Inf did not come back: its last windows are judged
    ends_nonfinite = not bool(np.isfinite(view.points("loss")[1][-1]))
    window_points, description, shortened = _window_points(steps, interval, thresholds)
    if window_points is None:
        result.skipped.append(Skip(DIVERGENCE.rule, description))
        return result
    scan = _scan(
        steps,
        loss,
        (interval, plain, memory, ends_nonfinite),
        window_points,
        thresholds.divergence_z,
        thresholds,
        facts,
    )
    if scan is None:
        bins = max(1, math.ceil(window_points / thresholds.trend_points))
        result.skipped.append(
            Skip(
                DIVERGENCE.rule,
                f"insufficient data: {math.ceil(steps.size / bins)} bins < "
                f"{max(3, round(window_points / bins))}",
            )
        )
        return result
    binned, z, m, part = scan.binned, scan.z, scan.m, scan.part
    first_mean, last_mean, after_min = scan.first_mean, scan.last_mean, scan.after_min
    trend = TrendScan(
        description, scan.windows, scan.max_z, shortened, _unjudged_words(scan, steps, thresholds)
    )
    result.facts["trend"] = trend

    # windows that rose and fell back again: told as `loss-rise` (info), but only those
    # before a divergence, whose rise never came back: inside it they are its noise
    undone = scan.undone
    # a loss-rise window is told by its bins' steps alone, not their medians
    undone_scan = (replace(binned, values=np.empty(0)), z, m, first_mean, last_mean)
    candidates = scan.diverging
    if not candidates.size:
        # the longer scans need none of this scan's medians: they go before those come
        del scan, binned
        slow = _slow_rise(
            steps, loss, (interval, plain, memory, ends_nonfinite), window_points, thresholds, facts
        )
        if slow is None:
            result.findings += _loss_rise(undone, *undone_scan)
            return result
        scan, candidates = slow, slow.diverging
        binned, z, m, part = scan.binned, scan.z, scan.m, scan.part
        first_mean, last_mean, after_min = scan.first_mean, scan.last_mean, scan.after_min
        span_steps = round(scan.window_points * interval)
        description = (
            f"{description}; a slow rise, found over windows of {scan.window_points} points "
            f"({span_steps:,} steps)"
        )
    j = int(candidates[0])
    # the fit never looks back across a spike: a rise after it is measured from it
    final_level = float(np.mean(binned.values[-part:]))
    before = [
        e.onset_step
        for e in facts.spikes
        if e.onset_step <= binned.steps[j] and _is_a_jump(e, steps, loss, final_level)
    ]
    # only a log that rises is dated: a healthy one never loads the fits (start-up, #40)
    from stabilitycli.detect.divergence_onset import onset, past_the_fall

    start_step, trough_level, trough_end_step, fitted = onset(
        steps,
        loss,
        binned,
        j,
        m,
        thresholds.trend_points,
        thresholds.divergence_falling_evidence,
        max(before, default=int(steps[0])),
        _lr_at(view, steps),
    )
    start_step, trough_level, trough_end_step = past_the_fall(
        steps, loss, start_step, trough_level, trough_end_step
    )
    # a step is sought where the straight ramp fit put the rise: the fit of an accelerating
    # shape dates it earlier, where the curve has not yet fallen to the level it rises from
    # at the end, and a rise measured from there looks like nothing but the noise's steps
    step_at = start_step if fitted is None else fitted.ramp_start_step
    step_words = _a_step(steps, loss, step_at, final_level, thresholds)
    if step_words:
        # a level that moved up at once and stayed is §2's persistent spike (or, under its
        # bar, noise's level), not a trend: told in the Q4.1 evidence, not as divergence
        result.facts["trend"] = replace(trend, unjudged=step_words)
        result.findings += _loss_rise(undone, *undone_scan)
        return result
    end_step = int(binned.end_steps[j + m - 1])
    # Q4.2-Q4.4 in the first diverging window, then over the whole stretch since
    restarted = facts.lr_plan.restarts if facts.lr_plan is not None else ()
    causes = _causes(
        view,
        start_step,
        max(end_step, start_step + thresholds.divergence_window_steps),
        thresholds,
        restarted,
    ) or _causes(view, start_step, int(steps[-1]), thresholds, restarted)
    for c in causes:
        if c["cause"] == GRAD_NORM_RISING.code:
            result.findings.append(
                GRAD_NORM_RISING.finding(
                    f"{cause_words(c)}; the loss began to rise at step {start_step}",
                    step=start_step,
                    metric="grad_norm",
                    evidence=c,
                )
            )
    # every level is named by what it is: a window's levels are means of the bin medians
    final_steps = [int(binned.steps[-part]), int(binned.end_steps[-1])]
    opens_steps = [int(binned.steps[j]), int(binned.end_steps[j + part - 1])]
    closes_steps = [int(binned.steps[j + m - part]), int(binned.end_steps[j + m - 1])]
    final_words = (
        f"the mean of the medians over steps {final_steps[0]}-{final_steps[1]}, the end of the log"
    )
    window_opens = f"the mean of the medians over steps {opens_steps[0]}-{opens_steps[1]}"
    # the rise counts from where it began (the fitted onset), not from the first window
    # that passed the test: that window can open halfway up a slow ramp
    if trough_level <= float(first_mean[j]):
        rise_from, from_steps, from_stat = trough_level, [start_step, trough_end_step], "median"
        from_words = f"the median of steps {start_step}-{trough_end_step}"
    else:
        rise_from, from_steps, from_stat = float(first_mean[j]), opens_steps, "mean-of-medians"
        from_words = window_opens
    if fitted is not None:
        # an onset fitted on a curve still falling under the rise sits above where the loss
        # went down to before the rise overtook the fall: the rise counts from that low
        low = _lowest_bin(binned, start_step, int(binned.end_steps[j + m - 1]))
        if low is not None and low[0] < rise_from:
            rise_from, from_steps, from_stat = low[0], [low[1], low[2]], "median"
            trough_level = low[0]  # the evidence's trough is the median rise_from_steps name
            from_words = (
                f"the median of steps {low[1]}-{low[2]}, the lowest trend bin from the onset on"
            )
    # ...to the higher of the end of the log and the end of the window that rose: the
    # percentage is between the two levels the sentence names
    if float(last_mean[j]) > final_level:
        rise_to, to_steps = float(last_mean[j]), closes_steps
        to_words = (
            f"the mean of the medians over steps {closes_steps[0]}-{closes_steps[1]}, the end of "
            f"the trend window), then {final_level:.4g} ({final_words}"
        )
    else:
        rise_to, to_steps, to_words = final_level, final_steps, final_words
    climb = rise_to - rise_from
    span_words = f"from {rise_from:.4g} ({from_words}) to {rise_to:.4g} ({to_words})"
    if rise_from != 0:
        rise = climb / abs(rise_from)
        rise_words = f"{rise:.1%}, {span_words}"
    else:
        # a loss level of exactly 0 (damaged or degenerate data) has no relative rise: the
        # climb is said in loss units, and counts as past any relative threshold
        rise = math.inf if climb > 0 else 0.0
        rise_words = f"{climb:.4g} in loss units (no relative rise from 0), {span_words}"
    in_window = (steps >= start_step) & (steps <= end_step)
    strictly = bool(np.all(np.diff(loss[in_window]) > 0))
    trend_numbers: dict[str, Any] = {
        "start_step": start_step,
        "end_step": end_step,
        "z": round(float(z[j]), 2),
        "window_start_step": int(binned.steps[j]),
        "trough": trough_level,
        "start_level": float(first_mean[j]),
        "end_level": float(last_mean[j]),
        "rise_from_level": rise_from,
        "rise_from_steps": from_steps,
        "rise_from_stat": from_stat,
        "rise_to_level": rise_to,
        "rise_to_steps": to_steps,
        "start_level_steps": opens_steps,
        "end_level_steps": closes_steps,
        "final_level_steps": final_steps,
        "relative_rise": float(rise) if math.isfinite(rise) else None,
        "after_min": float(after_min[j]) if np.isfinite(after_min[j]) else None,
        "final_loss": float(loss[-1]),
        "final_level": final_level,
        "strictly_monotone": strictly,
        "window": description,
        "bin_points": scan.bin_points,
        "causes": causes,
        "window_shortened": shortened,
    }
    fit_words = ""
    if fitted is not None:
        fit_words = f"; {fitted.words()}"
        trend_numbers.update(fitted.numbers())
    if not scan.memory.independent:
        trend_numbers["z_uncorrected"] = round(float(z[j]) * scan.z_inflation, 2)
        trend_numbers["noise_lag1"] = round(scan.memory.lag1, 3)
    z_words = _z_words(scan, float(z[j]), int(binned.steps[j]), end_step)
    scanned, scan_bins = undone_scan[0], undone_scan[2]
    undone_ends = scanned.end_steps[undone + scan_bins - 1]  # each window's last step
    undone_before = undone[undone_ends < start_step]
    result.findings += _loss_rise(undone_before, *undone_scan)
    if undone.size > undone_before.size:
        trend_numbers["loss_rise_windows_inside"] = int(undone.size - undone_before.size)
        trend_numbers["folded"] = (
            "windows inside this rise that rose and fell back are its noise, not a recovery: "
            "they are counted here (loss_rise_windows_inside), not reported as loss-rise"
        )
    evidence = TrendEvidence(**trend_numbers)
    result.facts["trend"] = replace(trend, rise=evidence)
    cause = causes[0]["cause"] if causes else None
    if rise < thresholds.divergence_min_rise_frac and cause is None:
        result.findings.append(
            PLATEAU.finding(
                f"loss drifted up from step {start_step}: {rise_words}; {z_words}, and it never "
                "came back, "
                "with no LR, weight-norm or grad-norm cause: a plateau, not divergence" + fit_words,
                step=start_step,
                end_step=end_step,
                metric="loss",
                evidence=evidence,
            )
        )
        return result
    note = f" ({description})" if shortened else ""
    result.findings.append(
        DIVERGENCE.finding(
            f"silent divergence from step {start_step}: the loss rose {rise_words}; "
            f"{z_words}; after step "
            f"{end_step}, never back down to {first_mean[j]:.4g} ({window_opens})"
            + (f"; cause: {cause}" if cause else "")
            + fit_words
            + note,
            step=start_step,
            end_step=int(steps[-1]),
            metric="loss",
            evidence=evidence,
        )
    )
    return result


SHORT_STEP_SHARE = 0.6


def _lowest_bin(binned: Binned, first: int, last: int) -> tuple[float, int, int] | None:
    """The lowest finite bin median among the bins from step `first` to step `last`, with
    its first and last step (None without one)."""
    inside = (binned.steps >= first) & (binned.end_steps <= last) & np.isfinite(binned.values)
    if not inside.any():
        return None
    k = int(np.flatnonzero(inside)[np.argmin(binned.values[inside])])
    return float(binned.values[k]), int(binned.steps[k]), int(binned.end_steps[k])


def _lr_at(view: SeriesView, steps: np.ndarray) -> np.ndarray | None:
    """The LR at each of `steps` (the last one logged at or before it; None without an LR
    series, or where none was logged before the first of them)."""
    if not view.has("lr"):
        return None
    lr_steps, lr = view.finite_points("lr")
    if not lr.size or lr_steps[0] > steps[0]:
        return None
    return lr[np.searchsorted(lr_steps, steps, side="right") - 1].astype(float)


def _a_step(
    steps: np.ndarray, loss: np.ndarray, start: int, final_level: float, thresholds: Thresholds
) -> str:
    """'' for a rise, or what makes it a step: near its onset, the loss between two
    neighbouring logged points moves up by `divergence_step_share` of the whole rise to the
    end of the log, measured as the median of the quarter window of points after the pair
    against that of the quarter window before it (a ramp spreads its rise over both), and
    as the median of `recovery_median_points` points either side."""
    quarter = thresholds.divergence_window_steps // 4
    at = int(np.searchsorted(steps, start, side="left"))
    q = int(np.searchsorted(steps, start + quarter, side="left")) - at
    if q < thresholds.min_points_per_window // 2:
        return ""
    lo, hi = max(0, at - 2 * q), min(loss.size, at + 3 * q)
    trailing = pl.Series(loss[lo:hi]).rolling_median(q).to_numpy()  # over [i - q + 1, i]
    # the point i: `before` over the q points up to i, `after` over the q points from i + 2
    before, after = trailing[q - 1 : -(q + 1)], trailing[2 * q :]
    if not before.size:
        return ""
    gain = after - before
    i = int(np.nanargmax(np.where(np.isfinite(gain), gain, -np.inf)))
    low, high = float(before[i]), float(after[i])
    first = lo + i + q - 1  # the index of point i
    # ...and at that pair itself, over a few points either side: a ramp shorter than a
    # quarter window looks like a step to the long medians, not to these
    k = thresholds.recovery_median_points
    near = np.median(loss[first + 2 : first + 2 + k]) - np.median(
        loss[max(0, first - k + 1) : first + 1]
    )
    bar = thresholds.divergence_step_share * (final_level - low)
    # (the short medians are noisier: they need the share of the long ones' gain)
    if not final_level > low or high - low < bar or not near >= SHORT_STEP_SHARE * (high - low):
        return ""
    return (
        f"not a trend: the lasting rise from step {start} is a step at step "
        f"{int(steps[first + 1])}, the median of the {q} points from step "
        f"{int(steps[first + 2])} is {high:.4g} against {low:.4g} over the {q} up to step "
        f"{int(steps[first])}, already {(high - low) / (final_level - low):.0%} of the rise "
        f"to {final_level:.4g} at the end of the log (a level shift, §2's question)"
    )


def _z_words(scan: _Scan, z: float, first: int, last: int) -> str:
    """'Mann-Kendall z = 4.1 over steps A-B', and what it was corrected for."""
    words = f"Mann-Kendall z = {z:.1f} over steps {first}-{last}"
    if scan.memory.independent:
        return words
    return (
        f"{words} (corrected for the bin medians' {scan.memory.words()}: "
        f"{z * scan.z_inflation:.1f} uncorrected)"
    )


def _unjudged_words(scan: _Scan, steps: np.ndarray, thresholds: Thresholds) -> str:
    """What the scan could not judge at the end of the log, in words ('' for nothing)."""
    if not scan.unjudged.size:
        return ""
    w = int(scan.unjudged[0])
    first = int(scan.binned.steps[w])
    last = int(scan.binned.end_steps[w + scan.m - 1])
    need = math.ceil(thresholds.divergence_after_frac * scan.m) * scan.bin_points
    return (
        f"not judged: the loss rose in the window of steps {first}-{last} "
        f"(Mann-Kendall z = {float(scan.z[w]):.1f}, under the {thresholds.divergence_end_z:g} "
        f"that needs no later points), but fewer than {need} points were logged after it (the "
        f"log ends at step {int(steps[-1])}): whether it comes back cannot be told, so it is "
        "not called divergence or a plateau"
    )


def _loss_rise(
    undone: np.ndarray,
    binned: Binned,
    z: _AtWindows,
    m: int,
    first_mean: _AtWindows,
    last_mean: _AtWindows,
) -> list[Finding]:
    """The windows (indices `undone`) where the loss rose and the run later undid it."""
    if not undone.size:
        return []
    worst = int(undone[np.argmax(z[undone])])
    return [
        LOSS_RISE.finding(
            f"{undone.size} window(s) where the loss rose and the run later undid it "
            f"(largest: z = {z[worst]:.1f} from step {binned.steps[worst]}, "
            f"+{last_mean[worst] - first_mean[worst]:.3g}): not divergence",
            step=int(binned.steps[worst]),
            end_step=int(binned.end_steps[worst + m - 1]),
            metric="loss",
            evidence=LossRiseEvidence(
                windows=int(undone.size),
                z=round(float(z[worst]), 2),
                rise=float(last_mean[worst] - first_mean[worst]),
            ),
        )
    ]


@dataclass(frozen=True)
class _AtWindows:
    """A per-window statistic kept only at the windows later read (`windows`, ascending):
    indexed by window, as the whole column was."""

    windows: np.ndarray
    values: np.ndarray

    def __getitem__(self, window: Any) -> Any:
        return self.values[np.searchsorted(self.windows, window)]


@dataclass(frozen=True)
class _Scan:
    """The Mann-Kendall test over every window of one length, on bin medians; a window's
    numbers are kept only where it rose (passed the test), the only windows read later."""

    window_points: int
    bin_points: int
    binned: Binned
    m: int  # bins per window
    part: int  # bins in a window's first and last part
    windows: int  # windows tested
    max_z: float  # NaN for a slow-rise scan (`_scan`, every_window), which needs no z elsewhere
    z: _AtWindows
    first_mean: _AtWindows
    last_mean: _AtWindows
    after_min: _AtWindows
    undone: np.ndarray  # windows that rose and fell back again
    diverging: np.ndarray  # windows that rose and never came back
    # windows that rose too near the end of the log to tell whether the loss comes back
    unjudged: np.ndarray
    memory: NoiseMemory  # the bin medians' autocorrelation the z is corrected for
    z_inflation: float  # sqrt F(m): the raw z over the corrected one


def _slow_rise(
    steps: np.ndarray,
    loss: np.ndarray,
    known: tuple[float, bool, NoiseMemory, bool],
    window_points: int,
    thresholds: Thresholds,
    facts: Facts,
) -> _Scan | None:
    """A slow ramp (+10% over 20,000 steps) moves no trend window: test windows twice, four
    times... as long, up to half the log, and return the shortest that finds a rise."""
    longer = window_points * 2
    while longer <= steps.size // 2:
        wider = _scan(
            steps,
            loss,
            known,
            longer,
            thresholds.divergence_slow_z,
            thresholds,
            facts,
            every_window=False,
        )
        if wider is None:
            return None
        if wider.diverging.size:
            return wider
        longer *= 2
    return None


def _scan(
    steps: np.ndarray,
    loss: np.ndarray,
    known: tuple[float, bool, NoiseMemory, bool],  # interval, plain, memory, ends non-finite
    window_points: int,
    z_bar: float,
    thresholds: Thresholds,
    facts: Facts,
    *,
    every_window: bool = True,
) -> _Scan | None:
    """The test over every window of `window_points`; with `every_window` False (the
    longer windows of a slow rise), z and `rising` only where a window never came back."""
    bin_points = max(1, math.ceil(window_points / thresholds.trend_points))
    interval, plain, _, ends_nonfinite = known
    binned = bin_medians(steps, loss, bin_points, plain=plain)
    m = max(3, round(window_points / bin_points))
    if binned.values.size < m:
        return None
    part = max(1, m // 4)
    n_windows = binned.values.size - m + 1
    # correlated bins make a window's S wander further than the test's null allows: the
    # z is divided by sqrt F(m), the variance factor of m correlated points (Yue-Wang)
    memory = known[2].of_bins(bin_points)
    widen = inflation(memory, m)
    after_bins = 0 if ends_nonfinite else math.ceil(thresholds.divergence_after_frac * m)
    (windows, first_mean, last_mean, after_min, never_back, z, judged), max_z = _rising_windows(
        binned,
        m,
        part,
        z_bar * widen,
        facts.spikes,
        2 * interval,
        every_window=every_window,
        after_bins=after_bins,
    )
    z = z / widen
    max_z /= widen
    if not every_window:
        z = _slow_z(binned.values, m, windows, n_windows) / widen
        rose = z >= z_bar
        windows, first_mean, last_mean, after_min, never_back, z, judged = (
            column[rose]
            for column in (windows, first_mean, last_mean, after_min, never_back, z, judged)
        )
    judged |= z >= thresholds.divergence_end_z

    def at_windows(values: np.ndarray) -> _AtWindows:
        return _AtWindows(windows, values)

    return _Scan(
        window_points,
        bin_points,
        binned,
        m,
        part,
        n_windows,
        max_z,
        at_windows(z),
        at_windows(first_mean),
        at_windows(last_mean),
        at_windows(after_min),
        # a window the loss came back from is judged by that, however near the end
        windows[~never_back],
        windows[judged & never_back],
        windows[~judged & never_back],
        memory,
        widen,
    )


def _rising_windows(
    binned: Binned,
    m: int,
    part: int,
    z_bar: float,
    spikes: list[SpikeEvent],
    lead_steps: float,
    *,
    every_window: bool,
    after_bins: int,
) -> tuple[list[np.ndarray], float]:
    """The windows that rose, with their first and last part means, the minimum after
    them, whether they never came back, their z (NaN without `every_window`) and whether
    `after_bins` bins follow them (else whether the loss comes back cannot be told); and
    the largest z of all (NaN without `every_window`).

    The windows are taken a chunk at a time (`window_chunks`): a long log has millions,
    and of each only the few that rose are kept."""
    # the chunked z needs finite medians; otherwise the all-windows path's NaN sums, once
    whole_z = None
    if every_window and not np.isfinite(binned.values).all():
        whole_z = mann_kendall_windows(binned.values, m)
    kept: list[tuple[np.ndarray, ...]] = []
    max_z: list[float] = []
    for chunk in window_chunks(binned.values, m, part):  # loop over chunks of windows
        never_back = chunk.after_min > chunk.first_mean
        rising = chunk.last_mean > chunk.first_mean
        rising &= ~_spike_held(binned, m, chunk.start, chunk.stop, spikes, lead_steps)
        if every_window:
            z = _chunk_z(binned.values, m, chunk.start, chunk.stop, whole_z)
            max_z.append(z.max())
            rising &= z >= z_bar
        else:
            # a slow rise is sought only among windows that rose and never came back: z is
            # computed there alone (a healthy log has a handful), after the chunks
            rising &= never_back
            z = np.full(rising.size, np.nan)
        at = np.flatnonzero(rising)
        # bins logged after each window: none after the last one, where "never came
        # back" would hold of nothing
        judged = binned.values.size - (chunk.start + np.arange(rising.size) + m) >= after_bins
        stats = (chunk.first_mean, chunk.last_mean, chunk.after_min, never_back, z, judged)
        kept.append((chunk.start + at, *(column[at] for column in stats)))
    columns = [np.concatenate(column) for column in zip(*kept, strict=True)]
    return columns, float(np.max(max_z)) if max_z else math.nan


def _spike_held(
    binned: Binned,
    m: int,
    start: int,
    stop: int,
    spikes: list[SpikeEvent],
    lead_steps: float,
) -> np.ndarray:
    """Which of the windows start..stop-1 hold a spike's onset, or end on the few points of
    a level shift before the spike rule flagged it: that spike's story (§2), not a trend."""
    held = np.zeros(stop - start, dtype=bool)
    opens, closes = binned.steps[start:stop], binned.end_steps[start + m - 1 : stop + m - 1]
    for spike in spikes:  # loop over spikes, each a pass over the chunk's windows
        held |= (opens <= spike.onset_step) & (closes >= spike.onset_step - lead_steps)
    return held


def _chunk_z(
    values: np.ndarray, m: int, start: int, stop: int, whole_z: np.ndarray | None
) -> np.ndarray:
    """Mann-Kendall z of the windows start..stop-1 (`whole_z` sliced, when given)."""
    if whole_z is not None:
        return whole_z[start:stop]
    return mann_kendall_between(values, m, start, stop)


def _slow_z(values: np.ndarray, m: int, windows: np.ndarray, n_windows: int) -> np.ndarray:
    """Mann-Kendall z of `windows` alone: their own pairs when few (m * m a window against
    m for all), else every window's z a chunk at a time, read at them."""
    if windows.size * m < n_windows:
        return mann_kendall_at(values, m, windows)
    if not np.isfinite(values).all():
        return mann_kendall_windows(values, m)[windows]
    z = np.empty(windows.size)
    for start in range(0, n_windows, CHUNK_WINDOWS):  # loop over chunks of windows
        stop = min(n_windows, start + CHUNK_WINDOWS)
        inside = (windows >= start) & (windows < stop)
        if inside.any():
            z[inside] = mann_kendall_between(values, m, start, stop)[windows[inside] - start]
    return z


def _is_a_jump(spike: SpikeEvent, steps: np.ndarray, loss: np.ndarray, final_level: float) -> bool:
    """Whether a spike before a rise is a jump the rise is measured from, or the rise itself.

    A spike the loss came back from, or one whose first point already holds
    half the rise up to the end of the log (a level shift), is a jump. A steep
    ramp crosses the spike bar a few points in, with a first excess far below
    what it climbs to: that spike is the ramp's start, and the onset fit must
    look back across it to where the ramp began.
    """
    if spike.recovered:
        # a point or two the loss came back from is noise the ramp fit clips away, wherever
        # it falls; a longer excursion would bend the fit, so the rise is measured from it
        return spike.points > WILD_POINTS
    first = loss[min(int(np.searchsorted(steps, spike.onset_step)), loss.size - 1)]
    climb = final_level - spike.mu
    return climb <= 0 or first - spike.mu >= JUMP_SHARE_OF_RISE * climb


JUMP_SHARE_OF_RISE = 0.5
WILD_POINTS = 2  # excursions this short are clipped by the ramp fit (a 5-point running median)


def _window_points(
    steps: np.ndarray, interval: float, thresholds: Thresholds
) -> tuple[int | None, str, bool]:
    """Points per trend window, its description, and whether the log forced it shorter."""
    n = steps.size
    window = thresholds.divergence_window_steps
    per_window = window / interval if interval and interval > 0 else 0
    if per_window >= thresholds.min_points_per_window:
        points, text = round(per_window), f"{window}-step windows ({round(per_window)} points)"
    else:
        points = thresholds.widened_window_points
        text = (
            f"window widened to {points} points = {points * interval:,.0f} steps: "
            f"one point per {interval:,.0f} steps"
        )
    if n >= points:
        return points, text, False
    if n >= thresholds.widened_window_points:
        shorter = max(thresholds.widened_window_points, n // 2)
        span = int(steps[-1] - steps[0])
        return (
            shorter,
            (
                f"log too short for a {window}-step window ({n} points over {span} steps): "
                f"trend tested over {shorter}-point windows instead"
            ),
            True,
        )
    return (
        None,
        (
            f"insufficient data: {n} finite loss points; a trend window needs "
            f"{min(points, thresholds.widened_window_points)}"
        ),
        False,
    )


def _causes(
    view: SeriesView, start: int, end: int, thresholds: Thresholds, restarted: tuple = ()
) -> list[RiseCause]:
    """Q4.2 -> Q4.3 -> Q4.4 for the window [start, end], in the tree's order (an LR that is
    higher at the end only by a planned restart inside the window is not rising)."""
    causes: list[RiseCause] = []
    if view.has("lr") and not any(start <= r.step <= end for r in restarted):
        s, lr = view.points("lr")
        inside = (s >= start) & (s <= end) & np.isfinite(lr)
        if inside.sum() >= 2:
            lr_start, lr_end = float(lr[inside][0]), float(lr[inside][-1])
            lr_steps = [int(s[inside][0]), int(s[inside][-1])]
            past_warmup = start >= warmup_end(*view.finite_points("lr"), thresholds)
            if lr_end > lr_start * (1 + thresholds.lr_rise_frac):
                # outside warmup a rising LR is a schedule bug (Q4.2); inside it, the
                # loss turning up while the LR still climbs says the peak LR is too high
                causes.append(
                    RisingLr(
                        lr_start=lr_start,
                        lr_end=lr_end,
                        within_warmup=not past_warmup,
                        lr_start_step=lr_steps[0],
                        lr_end_step=lr_steps[1],
                    )
                )
    for name in view.param_norm_columns():
        s, norm = view.points(name)
        inside = (s >= start) & (s <= end) & np.isfinite(norm) & (norm > 0)
        if inside.sum() >= 2:
            low, high = float(norm[inside].min()), float(norm[inside].max())
            at = s[inside]
            if high / low > thresholds.weight_norm_ratio:
                causes.append(
                    WeightNormMove(
                        series=name,
                        min=low,
                        max=high,
                        direction="grows" if norm[inside][-1] > norm[inside][0] else "collapses",
                        min_step=int(at[int(np.argmin(norm[inside]))]),
                        max_step=int(at[int(np.argmax(norm[inside]))]),
                        steps=[int(at[0]), int(at[-1])],
                    )
                )
                break
    if view.has("grad_norm"):
        s, grad = view.points("grad_norm")
        inside = (s >= start) & (s <= end) & np.isfinite(grad)
        values = grad[inside]
        if values.size >= 4:
            quarter = max(1, values.size // 4)
            early, late = float(np.mean(values[:quarter])), float(np.mean(values[-quarter:]))
            at = s[inside]
            if early > 0 and late > early * (1 + thresholds.grad_norm_rise_frac):
                causes.append(
                    RisingGradNorm(
                        grad_norm_start=early,
                        grad_norm_end=late,
                        # the grad norm's mean over the first and last quarter of the points
                        grad_norm_start_steps=[int(at[0]), int(at[quarter - 1])],
                        grad_norm_end_steps=[int(at[-quarter]), int(at[-1])],
                    )
                )
    return causes


def cause_words(c: Mapping[str, Any]) -> str:
    """A divergence cause's numbers, each with what it is (for the path and the post-mortem)."""
    if c["cause"] == LR_INCREASING.code and "lr_start_step" in c:
        return (
            f"LR {c['lr_start']:.4g} at step {c['lr_start_step']} -> {c['lr_end']:.4g} at step "
            f"{c['lr_end_step']}" + (", still in warmup" if c.get("within_warmup") else "")
        )
    if c["cause"] == "weight-norm" and "steps" in c:
        return (
            f"{c['series']} {c['direction']}: between {c['min']:.4g} (step {c['min_step']}) and "
            f"{c['max']:.4g} (step {c['max_step']}) over steps {c['steps'][0]}-{c['steps'][1]}"
        )
    if c["cause"] == GRAD_NORM_RISING.code and "grad_norm_start_steps" in c:
        a, b = c["grad_norm_start_steps"], c["grad_norm_end_steps"]
        return (
            f"grad norm rose from {c['grad_norm_start']:.4g} (the mean over steps {a[0]}-{a[1]}) "
            f"to {c['grad_norm_end']:.4g} (the mean over steps {b[0]}-{b[1]})"
        )
    return ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in c.items() if k != "cause"
    )
