"""§4: silent divergence - a loss that rises for good, and why."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Finding, Skip
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
    running_sum_from,
    suffix_sum_from,
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
    criterion), that curve stands in for the straight fall. For the first
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
    start_step, trough_level, trough_end_step = _onset(
        steps,
        loss,
        binned,
        j,
        m,
        thresholds.trend_points,
        thresholds.divergence_falling_evidence,
        max(before, default=int(steps[0])),
    )
    start_step, trough_level, trough_end_step = _past_the_fall(
        steps, loss, start_step, trough_level, trough_end_step
    )
    step_words = _a_step(steps, loss, start_step, final_level, thresholds)
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
                "with no LR, weight-norm or grad-norm cause: a plateau, not divergence",
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
            + note,
            step=start_step,
            end_step=int(steps[-1]),
            metric="loss",
            evidence=evidence,
        )
    )
    return result


SHORT_STEP_SHARE = 0.6


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


def _onset(
    steps: np.ndarray,
    loss: np.ndarray,
    binned: Binned,
    j: int,
    m: int,
    fit_bins: int,
    falling_evidence: float,
    earliest_step: int,
) -> tuple[int, float, int]:
    """Where the rise of the first diverging window (bins j..j+m-1) began, the loss there
    (the median of one fine bin) and that bin's last step.

    The window that first passes the test can open long after the rise began
    (a slow ramp moves a short window only by chance), so the fit looks back
    to where the loss was lowest before the window ends, plus half a window of
    what came before it (never before `earliest_step`), and fits the bend
    there on finer bins (up to `fit_bins` of them, each a median).
    """
    floor_bin = int(np.searchsorted(binned.steps, earliest_step, side="left"))
    # the trough of a 5-bin running median: with one point per bin (a sparse log), a lone
    # low point (a heavy-tailed draw) would otherwise be the trough, and the fit would
    # look for the start after it
    trough_bin = floor_bin + int(np.argmin(_running_median(binned.values[floor_bin : j + m])))
    first_bin = max(floor_bin, min(trough_bin, j) - m // 2)
    lo = int(np.searchsorted(steps, binned.steps[first_bin], side="left"))
    hi = int(np.searchsorted(steps, binned.end_steps[j + m - 1], side="right"))
    bin_points = max(1, math.ceil((hi - lo) / fit_bins))
    fine = bin_medians(steps[lo:hi], loss[lo:hi], bin_points)
    # the rise begins where a "flat, then rising in a line" fit bends, not at the
    # region's first bin (it may open on a flat stretch or an earlier fall)
    at, falling_bracket = _hinge_onset(fine.values, falling_evidence)
    if falling_bracket is None:
        # level before: the ramp fit may start a whole window before the trough, since a
        # noise minimum can lie after the true start
        wide_bin = max(floor_bin, min(trough_bin, j) - m)
        fit_from = int(np.searchsorted(steps, binned.steps[wide_bin], side="left"))
        # ...but not in its first quarter window, so that a start has a level to rise from
        earliest_start = int(binned.steps[min(wide_bin + m // 4, j + m - 1)])
        latest_start = int(binned.end_steps[j + m - 1])
    else:
        # falling before: the turn lies between the two fits' bends, and the level part
        # of the ramp fit must not reach back into the fall
        fit_from = lo + int(np.searchsorted(steps[lo:hi], fine.steps[falling_bracket[0]]))
        earliest_start = int(steps[fit_from])
        latest_start = int(fine.end_steps[falling_bracket[1]])
    decay = _decay_before(steps, loss, int(np.searchsorted(steps, earliest_step)), fit_from)
    if decay is not None:
        # the run's own decay carries its level back to where it had fallen to e^-4 (not
        # into the fast early drop): a longer stretch before the rise pins its start
        reach_step = decay.step_down_to(DECAY_LOOKBACK)
        fit_from = min(fit_from, int(np.searchsorted(steps, reach_step, side="left")))
    start_step = _ramp_onset(steps[fit_from:], loss[fit_from:], earliest_start, latest_start, decay)
    if start_step is None:
        return int(fine.steps[at]), float(fine.values[at]), int(fine.end_steps[at])
    # the level the rise starts from: the median of one fine bin's worth of points from there
    first = int(np.searchsorted(steps, start_step, side="left"))
    last = min(steps.size, first + bin_points) - 1
    return start_step, float(np.median(loss[first : last + 1])), int(steps[last])


# a fitted onset the raw loss still falls from by this fraction of its level (in a strictly
# falling run of points) is moved to the bottom of that fall: the rise cannot start above it
ONSET_FALL_FRAC = 0.05
ONSET_FALL_POINTS = 3  # ...over at least this many falling steps: one noisy dip is no fall


def _past_the_fall(
    steps: np.ndarray, loss: np.ndarray, start: int, level: float, level_end: int
) -> tuple[int, float, int]:
    """The onset, moved to where the loss stops falling when the fit put it mid-fall.

    The ramp fit models decay plus rise, so on a short log its bend can lie a few
    points before the lowest one; a sentence "rose from step S" is then false for the
    points after S that are lower still.
    """
    i = int(np.searchsorted(steps, start, side="left"))
    if i >= loss.size - 1:
        return start, level, level_end
    falls = np.diff(loss[i:]) < 0
    run = int(np.argmin(falls)) if not falls.all() else falls.size  # strictly falling points
    bottom = i + run
    if run < ONSET_FALL_POINTS or not np.isfinite(loss[bottom]):
        return start, level, level_end
    if level - float(loss[bottom]) <= ONSET_FALL_FRAC * abs(level):
        return start, level, level_end
    return int(steps[bottom]), float(loss[bottom]), int(steps[bottom])


DECAY_FIT_BINS = 512  # the decay before the fit region is fitted to this many bin medians
DECAY_TIME_CONSTANTS = np.geomspace(1e-3, 3.0, 80)  # widths tried, as fractions of the stretch
# power laws (1 + t / w)^-p, as training curves follow; p = inf is the exponential exp(-t / w)
DECAY_POWERS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, math.inf)
DECAY_EVIDENCE = 4.0  # Akaike's 2 per parameter, for the decay's width and power
DECAY_LOOKBACK = math.exp(-4.0)  # the ramp fit reaches back to where the decay is down to this


@dataclass(frozen=True)
class _Decay:
    """A decay shape (1 + (step - from_step) / width)^-power, exp(-(step - from_step) / width)
    when the power is infinite: 1 at `from_step`, falling toward 0."""

    from_step: float
    width: float
    power: float

    def at(self, steps: np.ndarray) -> np.ndarray:
        """The shape at each of `steps`, in one new array (each step of the formula in
        place: the steps of a long ramp fit are millions)."""
        t = steps - self.from_step
        t /= self.width
        if math.isinf(self.power):
            np.negative(t, out=t)
            return np.exp(t, out=t)
        t += 1.0
        t **= -self.power  # `t ** p`, with its fast paths (p = -1: a reciprocal)
        return t

    def step_down_to(self, fraction: float) -> float:
        """The step where the shape has fallen to `fraction` of its value at from_step."""
        t = -math.log(fraction) if math.isinf(self.power) else fraction ** (-1 / self.power) - 1
        return self.from_step + t * self.width


def _decay_before(steps: np.ndarray, loss: np.ndarray, first: int, last: int) -> _Decay | None:
    """The shape of "a level plus a decay" fitted by least squares to the loss logged at
    indices first..last-1; None when the loss was not falling there.

    Training curves fall ever more slowly, so a straight fall fitted before
    the rise must be short, and a short stretch pins the level the rise
    starts from poorly. The shape (power and width) is tried on a grid (the
    level and the size of the decay are linear), on bin medians so that
    heavy-tailed noise cannot bend it and the cost does not grow with the log.
    """
    if last - first < 4:
        return None
    bins = bin_medians(
        steps[first:last], loss[first:last], math.ceil((last - first) / DECAY_FIT_BINS)
    )
    x = (bins.steps - bins.steps[0]).astype(float)
    if bins.values.size < 4 or not x[-1] > 0:
        return None
    widths = x[-1] * DECAY_TIME_CONSTANTS
    t = x[None, None, :] / widths[None, :, None]
    powers = np.array(DECAY_POWERS)[:, None, None]
    finite = np.isfinite(powers)
    shapes = np.where(finite, (1.0 + t) ** -np.where(finite, powers, 1.0), np.exp(-t))
    shapes = shapes.reshape(-1, x.size)
    centred = shapes - shapes.mean(axis=1, keepdims=True)
    spread = (centred * centred).sum(axis=1)
    along = centred @ (bins.values - bins.values.mean())
    # along > 0: the loss falls with the shape (a positive decay)
    explained = np.where(
        (spread > 0) & (along > 0), along**2 / np.where(spread > 0, spread, 1.0), -np.inf
    )
    if not np.isfinite(explained).any():
        return None
    # ...and only where it beats a straight line clearly (Akaike's criterion for its two
    # shape parameters): a short or noisy stretch says nothing about the curve's shape
    total = float(((bins.values - bins.values.mean()) ** 2).sum())
    x_centred = x - x.mean()
    line = float(x_centred @ bins.values) ** 2 / float(x_centred @ x_centred)
    left_by_line, left_by_decay = total - line, total - float(explained.max())
    if not (left_by_decay > 0 and left_by_line > left_by_decay) or (
        x.size * math.log(left_by_line / left_by_decay) < DECAY_EVIDENCE
    ):
        return None
    p, w = np.unravel_index(int(np.argmax(explained)), (len(DECAY_POWERS), widths.size))
    return _Decay(float(bins.steps[0]), float(widths[w]), DECAY_POWERS[p])


RAMP_START_CANDIDATES = 256  # first pass of the ramp fit: start steps tried on a grid
RAMP_END_CANDIDATES = 64  # end steps tried (the last one is the end of the log)


def _ramp_onset(
    steps: np.ndarray,
    loss: np.ndarray,
    earliest_start_step: int,
    latest_start_step: int,
    decay_shape: _Decay | None = None,
) -> int | None:
    """Where a "level, then a straight rise, then level again" least-squares fit over the
    logged points, from the fit region to the end of the log, starts its rise.

    The binned bend sees only the region up to the first window that rose,
    a small part of a slow ramp, and knows the bend only to within a bin; the
    whole rise (to the end of the log, or to where it levels off again) pins
    its start far better. The start is searched from `earliest_start_step` up
    to `latest_start_step` on a grid, then on every logged point around the
    best grid point; the end on `RAMP_END_CANDIDATES` steps. Heavy-tailed
    noise is clipped first, so one wild point cannot move the fit. Given
    `decay_shape`, the loss before the start is a level plus that decay (the
    run still improving), not a straight fall.
    """
    finite = np.isfinite(loss)
    if finite.all():  # the usual case (finite_points): no copy of the loss, one of the steps
        x, y = steps.astype(float), _clip_wild(loss.astype(float, copy=False))
    else:
        x, y = steps[finite].astype(float), _clip_wild(loss[finite].astype(float))
    del finite
    decay = None if decay_shape is None else decay_shape.at(x)
    starts = x[(x >= earliest_start_step) & (x < latest_start_step) & (x < x[-1])]
    if starts.size < 2 or x.size < 4:
        return None
    # ends only after the earliest start: the stretch before it can be long (a decay); the
    # steps are sorted (the view's), so those points are a slice, not a copy
    later = x[int(np.searchsorted(x, starts[0], side="left")) :]
    end_grid = np.quantile(later, np.linspace(0, 1, RAMP_END_CANDIDATES))
    ends = np.unique(np.concatenate([end_grid, x[-1:]]))
    start_at = np.linspace(0, starts.size - 1, RAMP_START_CANDIDATES).round().astype(int)
    grid = starts[np.unique(start_at)]
    best_ramp = _ramp_fitter(x, y, decay)
    best = best_ramp(grid, ends)
    if best is None:
        return None
    # then every logged point around the best grid pair: the end first, then the start
    start_spacing = starts.size // RAMP_START_CANDIDATES + 1
    end_spacing = later.size // RAMP_END_CANDIDATES + 1
    at = int(np.searchsorted(x, best[1]))
    near_ends = x[max(0, at - end_spacing) : at + end_spacing + 1]
    best = best_ramp(np.array([best[0]]), near_ends) or best
    at = int(np.searchsorted(starts, best[0]))
    near_starts = starts[max(0, at - start_spacing) : at + start_spacing + 1]
    best = best_ramp(near_starts, np.array([best[1]])) or best
    return int(best[0])


def _ramp_fitter(
    x: np.ndarray, y: np.ndarray, decay: np.ndarray | None = None
) -> Callable[[np.ndarray, np.ndarray], tuple[float, float] | None]:
    """best(starts, ends): the (start, end) pair of the best least-squares fit of "falling or
    level, then a straight rise, then level": y = a + s * min(0, x - start) + b * clip(x -
    start, 0, end - start) with s <= 0 < b, every pair at once from prefix and suffix sums
    (linear in the points: each call sums the columns once, a chunk of rows at a time, and
    reads the sums at its starts and ends alone); None when no pair rises.

    The slope before the start matters: a run is often still improving when it
    turns, and a level fitted to a fall sits too high, which pushes the start late.
    Given a `decay` column (the run's own decay curve at each point), it takes
    the place of the straight fall: y = a + c * decay + b * clip(...), c >= 0.
    """
    origin, scale = x[0], max(float(x[-1] - x[0]), 1.0)
    # steps in [0, 1]: the sums of squares below subtract large, nearly equal numbers
    x = x - origin
    x /= scale
    n = x.size
    y_mean = y.mean()
    if decay is not None:
        d_u, d_uu, d_uy = -decay.sum(), decay @ decay, -(decay @ y)

    def columns(lo: int, hi: int) -> list[np.ndarray]:
        """Rows lo..hi-1 of the summed columns: 1, x, x^2, y, x y (and decay, decay x)."""
        xs, ys = x[lo:hi], y[lo:hi]
        out = [np.ones(hi - lo), xs, xs * xs, ys, xs * ys]
        if decay is not None:
            out += [decay[lo:hi], decay[lo:hi] * xs]
        return out

    def tail(starts: np.ndarray, ends: np.ndarray) -> list[list[np.ndarray]]:
        """Each column's sums over the points after each of starts, and each of ends."""
        after = [np.searchsorted(x, t, side="right") for t in (starts, ends)]
        return _sums_at(columns, n, after, from_end=True)

    def best(starts: np.ndarray, ends: np.ndarray) -> tuple[float, float] | None:
        starts, ends = (starts - origin) / scale, (ends - origin) / scale
        k_before = np.searchsorted(x, starts, side="left")
        before = _sums_at(columns, n, [k_before], from_end=False)[0]
        p0, p1, p2, py, pxy = (v[:, None] for v in before[:5])
        after_starts, after_ends = tail(starts, ends)
        c0, c1, c2, cy, cxy = (v[:, None] for v in after_starts[:5])
        e0, e1, e2, ey, exy = (v[None, :] for v in after_ends[:5])
        t0, t1 = starts[:, None], ends[None, :]
        # the ramp column g = max(0, x - t0) - max(0, x - t1)
        g = (c1 - t0 * c0) - (e1 - t1 * e0)
        gg = (
            (c2 - 2 * t0 * c1 + t0**2 * c0)
            - 2 * (e2 - (t0 + t1) * e1 + t0 * t1 * e0)
            + (e2 - 2 * t1 * e1 + t1**2 * e0)
        )
        gy = (cxy - t0 * cy) - (exy - t1 * ey)
        # the fall column u = min(0, x - t0); it is zero wherever g is not
        u = -(t0 * p0 - p1)
        uu = t0**2 * p0 - 2 * t0 * p1 + p2
        uy = -(t0 * py - pxy)
        ug = np.zeros(1)
        if decay is not None:
            # the decay stands in for the straight fall, as u = -decay (so a fall is still
            # s <= 0); it reaches under the ramp, so the two columns overlap
            u, uu, uy = d_u, d_uu, d_uy
            d0, d1 = (v[:, None] for v in after_starts[5:])
            e_d0, e_d1 = (v[None, :] for v in after_ends[5:])
            ug = -((d1 - t0 * d0) - (e_d1 - t1 * e_d0))
        v_gg, c_gy = gg - g**2 / n, gy - g * y_mean
        v_uu, c_uy, v_ug = uu - u**2 / n, uy - u * y_mean, ug - u * g / n
        det = v_uu * v_gg - v_ug**2
        safe_det = np.where(det > 0, det, 1.0)
        fall = (v_gg * c_uy - v_ug * c_gy) / safe_det
        rise = (v_uu * c_gy - v_ug * c_uy) / safe_det
        with_fall = (det > 0) & (fall <= 0) & (rise > 0)
        level_only = (v_gg > 0) & (c_gy > 0)
        # with s > 0 the constrained optimum is s = 0: "level, then a rise"
        explained = np.where(
            with_fall,
            fall * c_uy + rise * c_gy,
            np.where(level_only, c_gy**2 / np.where(v_gg > 0, v_gg, 1.0), -np.inf),
        )
        explained = np.where(t1 > t0, explained, -np.inf)
        if not np.isfinite(explained).any():
            return None
        i, k = np.unravel_index(int(np.argmax(explained)), explained.shape)
        return float(starts[i] * scale + origin), float(ends[k] * scale + origin)

    return best


RAMP_CHUNK_ROWS = 1 << 18  # rows of the ramp fit's columns made at a time (2 MB each)


def _sums_at(
    columns: Callable[[int, int], list[np.ndarray]],
    n: int,
    at: list[np.ndarray],
    *,
    from_end: bool,
) -> list[list[np.ndarray]]:
    """For each index array of `at`, each column's `[0] + cumsum` (or, `from_end`, its
    `cumsum` from the end with a 0 after it) read at those indices (0..n).

    The columns of `n` rows are made and summed `RAMP_CHUNK_ROWS` rows at a time, the
    sum carried from chunk to chunk in the order the whole column's cumsum adds, so the
    numbers are the whole column's: a long ramp fit reads a few hundred of them, and
    would otherwise hold a dozen columns as long as the log."""
    out: list[list[np.ndarray]] = []
    carries: list[float] = []
    firsts = range(0, n, RAMP_CHUNK_ROWS)
    for lo in reversed(firsts) if from_end else firsts:  # loop over chunks of rows
        hi = min(n, lo + RAMP_CHUNK_ROWS)
        chunk = columns(lo, hi)
        if not out:
            out = [[np.zeros(k.size) for _ in chunk] for k in at]
            carries = [0.0] * len(chunk)
        for c, column in enumerate(chunk):
            if from_end:
                sums = suffix_sum_from(column, hi == n, carries[c])
                carries[c] = float(sums[0])
            else:
                sums = running_sum_from(column, lo, carries[c])
                carries[c] = float(sums[-1])
            for q, k in enumerate(at):
                inside = (k >= lo) & (k <= hi)
                out[q][c][inside] = sums[k[inside] - lo]
    return out


def _running_median(y: np.ndarray, points: int = 5) -> np.ndarray:
    """Centred running median over `points` finite values (fewer at the ends)."""
    series = pl.Series(y, dtype=pl.Float64)
    return series.rolling_median(points, center=True, min_samples=1).to_numpy()


def _running_median_rows(y: np.ndarray, lo: int, hi: int, points: int = 5) -> np.ndarray:
    """`_running_median(y, points)[lo:hi]`, from those rows and the few either side that
    their windows reach: each window's median is of its own values alone."""
    reach = points // 2
    first = max(0, lo - reach)
    piece = _running_median(y[first : min(y.size, hi + reach)], points)
    return piece[lo - first : hi - first]


def _clip_wild(y: np.ndarray) -> np.ndarray:
    """Each value pulled to within 4 robust sigmas of its 5-point running median.

    The running median is taken `RAMP_CHUNK_ROWS` rows at a time, twice (for the
    offsets, then to add the clipped offsets back to): the ramp fit of a long rise
    holds one offset column, not the median, its copies and the offsets at once."""
    if y.size < 5:
        return y
    off = np.empty(y.size)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        np.subtract(y[lo:hi], _running_median_rows(y, lo, hi), out=off[lo:hi])
    magnitude = np.abs(off)
    # the median partitions its own copy: `magnitude` is that copy
    spread = 1.4826 * float(np.median(magnitude, overwrite_input=True))
    del magnitude
    if not spread > 0:
        return y
    np.clip(off, -4 * spread, 4 * spread, out=off)
    for lo in range(0, y.size, RAMP_CHUNK_ROWS):  # loop over chunks of rows
        hi = min(y.size, lo + RAMP_CHUNK_ROWS)
        # the running median + the clipped offset
        np.add(_running_median_rows(y, lo, hi), off[lo:hi], out=off[lo:hi])
    return off


def _bend_fit(values: np.ndarray, flat_before: bool) -> tuple[int, float]:
    """Where a least-squares fit of two joined lines bends upward, and its squared error.

    y = a + b1 * x + b2 * max(0, x - k), with b1 = 0 ("level, then a rise") or
    b1 <= 0 ("falling, then a rise"); one small fit per candidate bend (a
    window holds at most `trend_points` bins).
    """
    m = values.size
    x = np.arange(m, dtype=float)
    best_k, best_sse = 0, np.inf
    for k in range(1, max(2, m - 2)):  # bins of one window, not rows
        hinge = np.maximum(0.0, x - k)
        design = np.column_stack([np.ones(m), hinge] if flat_before else [np.ones(m), x, hinge])
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        rising = coef[-1] > 0 if flat_before else (coef[1] <= 0 and coef[1] + coef[2] > 0)
        if not rising:
            continue
        sse = float(((design @ coef - values) ** 2).sum())
        if sse < best_sse:
            best_k, best_sse = k, sse
    return best_k, best_sse


def _hinge_onset(values: np.ndarray, falling_evidence: float) -> tuple[int, tuple[int, int] | None]:
    """Where the rise begins, and the bins between which it turns when the loss was
    falling before it (None when it was level).

    A level stretch before the rise is fitted by "level, then rise", and its
    bend is the onset, unless "falling, then rise" (training still improving,
    or recovering from a spike) fits clearly better: n * ln(SSE_level /
    SSE_falling) >= `falling_evidence` (Akaike's criterion for its one extra
    slope). Then the true turn lies between the two fits' bends, at the
    lowest loss there. Without that test, the lowest bin between the bends of
    a flat stretch is a noise minimum, often far before the turn. Checked on
    real runs: a weight-decay change at 1200 (found 1187), BigScience n16
    turning at iteration 31 (found 29).
    """
    (level_bend, level_sse), (falling_bend, falling_sse) = (
        _bend_fit(values, True),
        _bend_fit(values, False),
    )
    if np.isfinite(level_sse) and (
        not np.isfinite(falling_sse)
        or values.size * np.log(level_sse / max(falling_sse, 1e-300)) < falling_evidence
    ):
        return level_bend, None
    first, second = sorted((level_bend, falling_bend))
    return first + int(np.argmin(values[first : second + 1])), (first, second)


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
