"""The learning-rate schedule as planned, read from the LR series itself (or declared).

Warmup, warm restarts (SGDR), step decays and a warmup-stable-decay cooldown are shapes a
schedule is written to have; the rules that judge the LR and the loss (lr-jump, lr-increasing,
spike) read this plan so that a planned rise is not called a schedule bug. Only restarts
change a verdict; the rest is said where the LR is described.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect import windows
from stabilitycli.detect.series import SeriesView

# a piecewise-constant LR is constant between its drops to this relative precision
_FLAT = 1e-3
# a WSD cooldown ends at or below this fraction of its stable level...
_COOLDOWN_END_FRAC = 0.1
# ...and takes at most this fraction of the run
_COOLDOWN_MAX_FRAC = 0.5
# a single restart comes after its cycle fell to this fraction of the peak or below
_CYCLE_DONE_FRAC = 0.25
# a step decay starts from at least this fraction of the LR's peak
_DECAY_MIN_FRAC = 0.01
# a restart's rise is quick: it takes at most this fraction of the cycle before it
_RISE_MAX_CYCLE_FRAC = 0.25


@dataclass(frozen=True)
class PlannedRestart:
    """One planned LR restart: the rise from `lr_before` (at `step_before`) to `lr_after`."""

    step: int  # the first logged point of the rise
    step_before: int  # the last logged point before it
    top_step: int  # where the rise tops out
    lr_before: float
    lr_after: float
    declared: bool  # named by the user (`planned_lr_restart_steps`), not only recognised


@dataclass(frozen=True)
class LrPlan:
    warmup_end_step: int | None = None
    warmup_peak: float | None = None
    restarts: tuple[PlannedRestart, ...] = ()
    period_steps: float | None = None  # the median gap between restart steps
    period_growth: float | None = None  # each gap this multiple of the one before (T_mult > 1)
    step_decays: tuple[tuple[int, float], ...] = ()  # (step, LR after / LR before)
    # (first falling step, last step, stable LR, LR at the last step)
    cooldown: tuple[int, int, float, float] | None = None
    intended: bool = False  # `lr_restarts_intended`: every rise after warmup is planned

    def restart_near(self, lo_step: int, hi_step: int) -> PlannedRestart | None:
        """The planned restart whose rise overlaps the steps [lo_step, hi_step]."""
        for restart in self.restarts:
            if restart.step <= hi_step and restart.top_step >= lo_step:
                return restart
        return None

    def after_restart(self, at_steps: np.ndarray, window: int) -> np.ndarray:
        """Per step: is it within `window` steps after a planned restart began (its rise, or
        a window that reaches back over it)?"""
        begins = np.array([r.step_before for r in self.restarts])
        tops = np.array([r.top_step for r in self.restarts])
        last = np.searchsorted(begins, at_steps, side="right") - 1
        return (last >= 0) & (at_steps <= tops[np.maximum(last, 0)] + window)

    def describes_more_than_warmup(self) -> bool:
        return bool(self.restarts or self.step_decays or self.cooldown)

    def describe(self) -> str:
        """'warmup to 0.0003 by step 100; warm restarts to 0.0003 at steps 1000, 2000 ...'."""
        parts = []
        if self.warmup_end_step is not None and self.warmup_peak is not None:
            parts.append(f"warmup to {self.warmup_peak:.3g} by step {self.warmup_end_step}")
        if self.restarts:
            tops = [r.lr_after for r in self.restarts if np.isfinite(r.lr_after)]
            shown = ", ".join(str(r.step) for r in self.restarts[:8])
            more = f", ... ({len(self.restarts) - 8} more)" if len(self.restarts) > 8 else ""
            period = (
                f"; period {self.period_steps:.0f} steps"
                + (f" growing {self.period_growth:.3g}x" if self.period_growth else "")
                if self.period_steps
                else ""
            )
            declared = sum(r.declared for r in self.restarts)
            origin = (
                " (declared)"
                if declared == len(self.restarts)
                else f" ({declared} declared)"
                if declared
                else ""
            )
            top = f" to {max(tops):.3g}" if tops else ""
            parts.append(f"warm restarts{top} at steps {shown}{more}{period}{origin}")
        if self.step_decays:
            shown = ", ".join(f"x{f:.3g} at step {s}" for s, f in self.step_decays[:6])
            parts.append(f"step decays {shown}")
        if self.cooldown:
            start, end, level, final = self.cooldown
            parts.append(f"cooldown {level:.3g} -> {final:.3g} over steps {start}-{end}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self) | {"summary": self.describe()}


def recognise_plan(view: SeriesView, thresholds: Thresholds) -> LrPlan | None:
    """The plan the LR series shows, with the restarts the user declared; None with neither."""
    declared = thresholds.planned_lr_restart_steps
    if not view.has("lr"):
        if not declared:
            return None
        nan = float("nan")
        return LrPlan(restarts=tuple(PlannedRestart(s, s, s, nan, nan, True) for s in declared))
    steps, lr = view.finite_points("lr")
    if lr.size < 3:
        return None
    rises = _rises(steps, lr, thresholds)
    warmup = _warmup(lr, thresholds)
    if warmup is not None:  # the ramp (plateaus of a rounded LR and all) is no restart
        rises = [warmup] + [r for r in rises if r[0] >= warmup[1]]
    candidates = [r for r in rises if r is not warmup and _quick(r, steps, rises)]
    resumes = [r.resumed_from_step for r in view.restarts]
    planned = _planned(candidates, steps, lr, thresholds, resumes)
    restarts = {
        int(steps[a + 1]): PlannedRestart(
            int(steps[a + 1]), int(steps[a]), int(steps[b]), float(lr[a]), float(lr[b]), False
        )
        for a, b in planned
    }
    for step in declared:  # the rise nearest a declared step, or the step alone
        restarts[step] = _declared(step, steps, lr, rises)
    ordered = tuple(restarts[s] for s in sorted(restarts))
    period, growth = _period([r.step for r in ordered], int(steps[0]), thresholds)
    return LrPlan(
        warmup_end_step=int(steps[warmup[1]]) if warmup else None,
        warmup_peak=float(lr[warmup[1]]) if warmup else None,
        restarts=ordered,
        period_steps=period,
        period_growth=growth,
        step_decays=_step_decays(steps, lr, thresholds),
        cooldown=_cooldown(steps, lr),
        intended=bool(thresholds.lr_restarts_intended),
    )


def _rises(steps: np.ndarray, lr: np.ndarray, thresholds: Thresholds) -> list[tuple[int, int]]:
    """(low row, top row) of every run of consecutive LR rises that adds up to more than
    `lr_jump_ratio` (a warmup's ramp, a restart, a jump)."""
    up = np.concatenate(([False], np.diff(lr) > 0, [False])).astype(np.int8)
    edges = np.diff(up)
    lows, tops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        big = lr[tops] > lr[lows] * (1 + thresholds.lr_jump_ratio)
    big |= (lr[lows] <= 0) & (lr[tops] > 0)
    return [(int(a), int(b)) for a, b in zip(lows[big], tops[big], strict=True)]


def _warmup(lr: np.ndarray, thresholds: Thresholds) -> tuple[int, int] | None:
    """(0, top row) of a ramp from the first point to the LR's first fall (a rounded LR
    repeats values on the way up), when it rises more than `lr_jump_ratio`."""
    fall = _first_change(lr, falling=True)
    top = fall if fall is not None else lr.size - 1
    top = int(np.argmax(lr[: top + 1] >= lr[top]))  # where it reached its level (WSD: early)
    rose = lr[top] > lr[0] * (1 + thresholds.lr_jump_ratio) or (lr[0] <= 0 < lr[top])
    return (0, top) if top > 0 and rose else None


def _quick(rise: tuple[int, int], steps: np.ndarray, rises: list[tuple[int, int]]) -> bool:
    """A restart's rise is short beside the cycle before it: a slow climb is no restart."""
    low, top = rise
    earlier = [t for _, t in rises if t < low]
    cycle_start = steps[earlier[-1]] if earlier else steps[0]
    return bool(steps[top] - steps[low] <= _RISE_MAX_CYCLE_FRAC * (steps[low] - cycle_start))


def _planned(
    candidates: list[tuple[int, int]],
    steps: np.ndarray,
    lr: np.ndarray,
    thresholds: Thresholds,
    resumes: list[int],
) -> list[tuple[int, int]]:
    """The rises that are restarts: all of them when intended; else two or more back to the
    same peak at a regular period, or a single one from the bottom of a cycle back to the
    run's earlier peak that then falls no faster than the first cycle fell (not at a resume,
    where a scheduler that lost its state restarts the same way; and not a whole schedule
    multiplied up, which falls faster)."""
    if thresholds.lr_restarts_intended or not candidates:
        return candidates
    tol = thresholds.lr_restart_peak_frac
    tops = np.array([lr[b] for _, b in candidates])
    if len(candidates) == 1:
        (low, top) = candidates[0]
        earlier = float(np.max(lr[: low + 1]))
        at_resume = any(steps[low] <= s <= steps[top] for s in resumes)
        same = abs(lr[top] - earlier) <= tol * earlier
        # the cycle before ran its course: a scheduler reset half-way down is no restart
        same &= bool(lr[low] <= _CYCLE_DONE_FRAC * earlier)
        peak = int(np.argmax(lr[: low + 1]))
        # a peak at the first point is one only where the log starts with the run: a log that
        # starts mid-schedule shows its first LR as a top it never rose to
        real = peak > 0 or steps[0] <= np.median(np.diff(steps[: low + 1]))
        shaped = real and _same_shape(peak, top, steps, lr, tol)
        return candidates if same and shaped and not at_resume else []
    # restarts to one peak, by cluster of tops: a bug that multiplies the schedule up
    # leaves regular restarts to a second peak after it, and those are planned too
    clusters: list[list[int]] = []
    for i in np.argsort(tops):
        if clusters and tops[i] <= tops[clusters[-1][0]] * (1 + 2 * tol):
            clusters[-1].append(int(i))
        else:
            clusters.append([int(i)])
    planned: list[tuple[int, int]] = []
    for members in clusters:
        group = sorted(candidates[i] for i in members)
        at = [int(steps[a + 1]) for a, _ in group]
        if len(group) >= 2 and _period(at, int(steps[0]), thresholds)[0] is not None:
            planned += group
    return sorted(planned)


def _same_shape(first: int, top: int, steps: np.ndarray, lr: np.ndarray, tol: float) -> bool:
    """Does the LR after `top` fall, relative to its top, no faster than it fell after the
    first peak? (A longer cycle, T_mult > 1, falls slower; a schedule multiplied up, which
    goes on from where it was, falls faster.)"""
    cycle = steps[top] - steps[first]
    offsets = np.array([0.1, 0.25, 0.5]) * cycle
    offsets = offsets[steps[top] + offsets <= steps[-1]]
    if not offsets.size:
        return False
    now = np.interp(steps[top] + offsets, steps, lr) / lr[top]
    then = np.interp(steps[first] + offsets, steps, lr) / lr[first]
    # twice the peak tolerance: a first cycle counted from step 0 under its warmup is a
    # little ahead of the restarted one
    return bool(np.all(now >= then - 2 * tol))


def _period(
    restart_steps: list[int], first_step: int, thresholds: Thresholds
) -> tuple[float | None, float | None]:
    """(period, growth) when the gaps between restarts (with two, and the gap from the run's
    start) are equal, or each a constant whole multiple of the one before (T_mult); else
    (None, None)."""
    if len(restart_steps) < 2:
        return None, None
    # from the run's start only with two restarts (one gap between them says nothing)
    points = restart_steps if len(restart_steps) >= 3 else [first_step, *restart_steps]
    gaps = np.diff(np.array(points, dtype=float))
    tol = thresholds.lr_restart_period_frac
    median = float(np.median(gaps))
    if median > 0 and np.all(np.abs(gaps - median) <= tol * median):
        return median, None
    # the first gap may hold the warmup too: growth is read from the gaps between restarts
    ratios = gaps[1:] / gaps[:-1]
    growth = float(np.round(np.median(ratios)))
    if growth >= 2 and np.all(np.abs(ratios - growth) <= tol * growth):
        return float(gaps[-1]), growth
    return None, None


def _declared(
    step: int, steps: np.ndarray, lr: np.ndarray, rises: list[tuple[int, int]]
) -> PlannedRestart:
    """A declared restart: the LR rise it names (within one logged point), else its step."""
    at = int(np.clip(np.searchsorted(steps, step), 1, steps.size - 1))
    for low, top in rises:
        if steps[low] <= step <= steps[top] or low <= at <= top + 1:
            return PlannedRestart(
                int(steps[low + 1]),
                int(steps[low]),
                int(steps[top]),
                float(lr[low]),
                float(lr[top]),
                True,
            )
    return PlannedRestart(step, int(steps[at - 1]), step, float(lr[at - 1]), float(lr[at]), True)


def _step_decays(
    steps: np.ndarray, lr: np.ndarray, thresholds: Thresholds
) -> tuple[tuple[int, float], ...]:
    """Drops by a factor of `1 + lr_jump_ratio` or more from a constant LR to a constant LR.

    Taken `windows.CHUNK_ROWS` changes at a time, each chunk with the change either side
    of it (is the LR flat before and after?): a chunk's temporaries, not a dozen copies
    of a long log, and the first 20 drops end the scan."""
    changes = max(0, lr.size - 1)  # ratio i: lr[i + 1] / lr[i]
    # a rounded LR near 0 (1e-06 printed) steps down by its last digit: not a decay
    material_lr = _DECAY_MIN_FRAC * np.max(lr) if lr.size else 0.0
    found: list[tuple[int, float]] = []
    chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
    for first in range(0, changes, chunk_rows):  # loop over chunks of changes
        stop = min(changes, first + chunk_rows)
        lo, hi = max(0, first - 1), min(changes, stop + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = lr[lo + 1 : hi + 1] / lr[lo:hi]
        flat = np.abs(ratio - 1) <= _FLAT
        flat_before = np.concatenate(([False], flat[:-1]))  # no change before the first
        flat_after = np.concatenate((flat[1:], [True]))  # nor after the last
        drop = (ratio <= 1 / (1 + thresholds.lr_jump_ratio)) & (ratio > 0)
        drop &= flat_before & flat_after & (lr[lo:hi] >= material_lr)
        inside = slice(first - lo, stop - lo)
        at = np.flatnonzero(drop[inside])[: 20 - len(found)]
        found += [(int(steps[first + i + 1]), round(float(ratio[inside][i]), 4)) for i in at]
        if len(found) == 20:
            break
    return tuple(found)


def _first_change(lr: np.ndarray, *, falling: bool, from_end: bool = False) -> int | None:
    """The first (`from_end`: the last) i where lr[i + 1] < lr[i] (`falling`; else
    lr[i + 1] >= lr[i]; NaN is neither), or None: the changes are taken a chunk at a time
    from that end, so a warmup's first fall or a cooldown's start costs a chunk, not three
    copies of a long log."""
    changes = max(0, lr.size - 1)
    chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
    starts = range(0, changes, chunk_rows)
    for first in reversed(starts) if from_end else starts:  # loop over chunks of changes
        step = np.diff(lr[first : min(changes, first + chunk_rows) + 1])
        hits = np.flatnonzero(step < 0 if falling else step >= 0)
        if hits.size:
            return first + int(hits[-1] if from_end else hits[0])
    return None


def _cooldown(steps: np.ndarray, lr: np.ndarray) -> tuple[int, int, float, float] | None:
    """The final fall of a warmup-stable-decay schedule: a constant LR, then a fall to near 0
    at the end of the log taking no more than half the run."""
    last = _first_change(lr, falling=False, from_end=True)
    if last is None:
        return None
    start = last + 1  # the fall runs from this row to the end
    level, final = float(lr[start]), float(lr[-1])
    fall_steps = steps[-1] - steps[start]
    span = steps[-1] - steps[0]
    if start >= lr.size - 2 or final > _COOLDOWN_END_FRAC * level or fall_steps <= 0:
        return None
    if fall_steps > _COOLDOWN_MAX_FRAC * span:
        return None
    # stable before it, for as long as the fall lasts
    stable = lr[(steps >= steps[start] - fall_steps) & (steps <= steps[start])]
    if stable.size < 2 or np.any(np.abs(stable / level - 1) > _FLAT):
        return None
    return int(steps[start]), int(steps[-1]), level, final
