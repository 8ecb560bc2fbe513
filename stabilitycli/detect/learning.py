"""Spec §8: a run that never learned, and a loss that collapsed to zero.

Both look at what the four families never ask: whether the loss went down at all, and
whether it went down impossibly fast.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity, Skip
from stabilitycli.core.quantity_schema import ABSENT
from stabilitycli.detect import windows
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.learning import (
    LOSS_COLLAPSE,
    NO_LEARNING,
    CollapseEvidence,
    NoLearningEvidence,
)
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.windows import median_interval
from stabilitycli.frame import plain_numpy

# the robust sigma of a normal sample from its median absolute deviation
_MAD_TO_SIGMA = 1.4826
# an LR whose first logged value is under this share of its peak was warming up
_WARMUP_START_SHARE = 0.5
# ...and warmup is over where it first reaches this share of the peak
_WARMUP_END_SHARE = 0.9


@rule(
    NO_LEARNING.rule,
    NO_LEARNING.section,
    "the loss never fell materially below its first window, sits at ln V, or the grad norm "
    "vanished while it stayed flat",
    emits=(NO_LEARNING,),
    reads=(
        "ce_loss_max_nats",
        "chance_tolerance_nats",
        "grad_vanish_frac",
        "grad_vanish_norm",
        "learning_min_decrease_frac",
        "learning_min_decrease_sigma",
        "learning_min_loss",
        "learning_start_max_frac",
        "learning_window_frac",
        "min_points_per_window",
        "vocab_size",
        "warmup_frac",
    ),
    needs=("spike_insufficient",),
)
def detect_no_learning(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A run that never learned: three tests, and how sure each one is.

    What it detects: (a) no material decrease: the median of the loss over the last
    {learning_window_frac:.0%} of the judged points is less than
    {learning_min_decrease_sigma:g} noise sigmas and less than
    {learning_min_decrease_frac:.0%} below the median over the first {learning_window_frac:.0%},
    nor that much above it (a material rise is the divergence and spike rules' business).
    The noise sigma is the robust sigma (1.4826 x MAD) of the loss's first differences
    divided by the square root of two: the point-to-point noise, which a slow trend barely
    moves, so a low-noise run is held to a low bar and a noisy one to a high one. The
    judged points start after warmup when an LR series shows one; a log whose first step
    is more than {learning_start_max_frac:.0%} of its last step, with no warmup logged, is
    an excerpt that starts late in a run: its first window says nothing about whether the
    run learned, and this test is not judged (said in the evidence). (b) chance level: the
    last window's median within {chance_tolerance_nats:g} nats of ln V, when V is known (the
    `vocab_size` setting, a manifest or an MLflow param; never guessed) and the loss reads
    as cross-entropy.
    (c) the grad norm below {grad_vanish_norm:g} on {grad_vanish_frac:.0%} of its points
    after the first window while the loss stays flat. A loss at or below
    {learning_min_loss:g} has learned its data and is never flagged; a log too short for the
    spike baseline is not judged.

    Severity: error when (b) or (c) holds: uniform guessing and a gradient that no longer
    reaches the weights have no benign reading. Warning when only (a) holds: a flat loss
    also fits a fine-tune from an already converged checkpoint or an LR set too low, which the
    log alone cannot tell from a broken run.

    Why it matters: a run that does not learn raises no NaN, no spike and no rise, so the
    four families call it healthy while it spends all of its compute for nothing.
    """
    result = RuleResult()
    if facts.spike_insufficient:
        result.skipped.append(
            Skip(NO_LEARNING.rule, "not judged: the log is too short for the spike baseline")
        )
        return result
    found = view.finite_or_skip(
        "loss", NO_LEARNING.rule, 4 * thresholds.min_points_per_window, result.skipped
    )
    if found is None:
        return result
    steps, loss = found
    if loss.min() <= 0:
        result.skipped.append(
            Skip(
                NO_LEARNING.rule,
                "not judged: the loss goes to or below 0, so it is no "
                "cross-entropy and its level says nothing",
            )
        )
        return result
    start, warmup_step, late = _judged_start(view, steps, thresholds)
    n = steps.size - start
    width = max(thresholds.min_points_per_window, math.ceil(thresholds.learning_window_frac * n))
    if n < 2 * width:
        result.skipped.append(
            Skip(
                NO_LEARNING.rule,
                f"not judged: {n} loss points after warmup, fewer than two windows of {width}",
            )
        )
        return result
    first, last = loss[start : start + width], loss[-width:]
    first_level = float(plain_numpy.median(first))
    last_level = float(plain_numpy.median(last))
    sigma = _diff_sigma(loss[start:])
    fall = first_level - last_level
    decrease_sigmas = fall / sigma if sigma > 0 else (math.inf if fall > 0 else 0.0)
    # flat: neither bar reached, either way; a material rise is the divergence rules' business
    sigma_bar = thresholds.learning_min_decrease_sigma * sigma
    frac_bar = thresholds.learning_min_decrease_frac * first_level
    flat = abs(fall) < frac_bar and (abs(fall) < sigma_bar or sigma == 0)
    no_decrease = late is None and flat
    at_chance, chance, vocab = _chance(view, last_level, thresholds)
    grad = _vanished_grad(view, int(steps[start + width]), thresholds)
    vanished = grad is not None and grad[0] >= thresholds.grad_vanish_frac and flat
    if last_level <= thresholds.learning_min_loss or not (no_decrease or at_chance or vanished):
        if late is not None:
            result.skipped.append(Skip(NO_LEARNING.rule, f"decrease not judged: {late}"))
        return result
    first_steps = [int(steps[start]), int(steps[start + width - 1])]
    last_steps = [int(steps[-width]), int(steps[-1])]
    words = [
        f"loss median {first_level:.4g} over steps {first_steps[0]}-{first_steps[1]}"
        + (f" (after warmup, which ends at step {warmup_step})" if warmup_step is not None else "")
        + f" -> {last_level:.4g} over steps {last_steps[0]}-{last_steps[1]}: "
        + f"{'a fall' if fall >= 0 else 'a rise'} of {abs(fall):.3g}"
        + (
            f" = {abs(decrease_sigmas):.2g} noise sigmas (sigma {sigma:.3g}, the robust sigma "
            "of the first differences / sqrt 2)"
            if math.isfinite(decrease_sigmas)
            else ""
        )
    ]
    if no_decrease:
        words.append(
            f"no material decrease (under {thresholds.learning_min_decrease_sigma:g} sigmas and "
            f"{thresholds.learning_min_decrease_frac:.0%} of the first level)"
        )
    if at_chance:
        words.append(
            f"the last median is within {thresholds.chance_tolerance_nats:g} nats of "
            f"ln({vocab:,}) = {chance:.4g}, the loss of uniform guessing"
        )
    if vanished and grad is not None:
        words.append(
            f"the grad norm sat below {thresholds.grad_vanish_norm:g} on {grad[0]:.0%} of its "
            f"points over steps {grad[2][0]}-{grad[2][1]} (median {grad[1]:.3g}) while the "
            "loss stayed flat"
        )
    if late is not None:
        words.append(f"decrease not judged: {late}")
    evidence = NoLearningEvidence(
        first_level=first_level,
        last_level=last_level,
        first_steps=first_steps,
        last_steps=last_steps,
        sigma=sigma,
        decrease_sigmas=None
        if late is not None or not math.isfinite(decrease_sigmas)
        else decrease_sigmas,
        no_decrease=no_decrease,
        start_not_judged=ABSENT if late is None else late,
        warmup_end_step=ABSENT if warmup_step is None else warmup_step,
        vocab_size=vocab or ABSENT,
        chance_level=chance if vocab else ABSENT,
        at_chance=at_chance if vocab else ABSENT,
        grad_norm_vanished_frac=ABSENT if grad is None else grad[0],
        grad_norm_median=ABSENT if grad is None else grad[1],
        grad_norm_steps=ABSENT if grad is None else grad[2],
        grad_norm_vanished=ABSENT if grad is None else vanished,
    )
    result.findings.append(
        NO_LEARNING.finding(
            "the run is not learning: " + "; ".join(words),
            severity=Severity.ERROR if at_chance or vanished else Severity.WARNING,
            step=first_steps[0],
            end_step=last_steps[1],
            metric="loss",
            evidence=evidence,
        )
    )
    return result


def _diff_sigma(values: np.ndarray) -> float:
    """The point-to-point noise: robust sigma of the first differences, / sqrt 2."""
    diff = np.diff(values)
    # both medians sort the differences where they lie (a median's own copy was a second
    # copy of the log): the first reorders them, which changes no deviation's value, and
    # the deviations then overwrite them. One copy of the log at a time, not three
    middle = plain_numpy.median(diff, overwrite_input=True)
    np.abs(np.subtract(diff, middle, out=diff), out=diff)
    mad = float(plain_numpy.median(diff, overwrite_input=True))
    return _MAD_TO_SIGMA * mad / math.sqrt(2)


def _judged_start(
    view: SeriesView, steps: np.ndarray, thresholds: Thresholds
) -> tuple[int, int | None, str | None]:
    """(first judged loss row, the step warmup ends or None, why the start cannot be judged
    or None)."""
    if view.has("lr"):
        lr_steps, lr = view.finite_points("lr")
        # warmup is the LR's first climb: it ends where the LR first stops rising, so an LR
        # that jumps later in the run (a schedule bug, a restart) is never taken for it
        stops = np.flatnonzero(lr[1:] <= lr[:-1])
        top = int(stops[0]) if stops.size else lr.size - 1
        peak = float(lr[top]) if lr.size else 0.0
        if lr.size >= 2 and peak > 0 and lr[0] < _WARMUP_START_SHARE * peak:
            end = int(lr_steps[int(np.argmax(lr[: top + 1] >= _WARMUP_END_SHARE * peak))])
            # an LR that rises through most of the log is no warmup (lr-increasing says so):
            # the run is judged from its first point
            if end <= steps[0] + thresholds.warmup_frac * (steps[-1] - steps[0]):
                return int(np.searchsorted(steps, end)), end, None
            return 0, None, None
    first, last = int(steps[0]), int(steps[-1])
    if first > thresholds.learning_start_max_frac * last:
        return (
            0,
            None,
            f"the log starts at step {first:,}, past {thresholds.learning_start_max_frac:.0%} "
            f"of its last step {last:,}, with no LR warmup logged: an excerpt from late in a "
            "run, whose first window says nothing of whether the run learned",
        )
    return 0, None, None


def _chance(view: SeriesView, level: float, thresholds: Thresholds) -> tuple[bool, float, int]:
    """(at the chance level, ln V, V); V 0 when unknown (then no chance test at all)."""
    vocab = thresholds.vocab_size or view.source.vocab_size or 0
    if vocab <= 1:
        return False, math.nan, 0
    chance = math.log(vocab)
    # a key found by its words may be any objective: no chance level for it
    ce = 0 < level < thresholds.ce_loss_max_nats and view.source.metric_origin.get("loss") != "name"
    return ce and abs(level - chance) <= thresholds.chance_tolerance_nats, chance, vocab


def _vanished_grad(
    view: SeriesView, from_step: int, thresholds: Thresholds
) -> tuple[float, float, list[int]] | None:
    """(share of grad-norm points below the bar, their median, [first, last] step) after
    the first window; None without a grad-norm series there."""
    if not view.has("grad_norm"):
        return None
    steps, grad = view.finite_points("grad_norm")
    # the steps are in order: the points from `from_step` on are the tail, a view of it
    first = int(np.searchsorted(steps, from_step, side="left"))
    if steps.size - first < 2:
        return None
    steps, grad = steps[first:], grad[first:]
    share = float(np.mean(grad < thresholds.grad_vanish_norm))
    return share, float(plain_numpy.median(grad)), [int(steps[0]), int(steps[-1])]


@rule(
    LOSS_COLLAPSE.rule,
    LOSS_COLLAPSE.section,
    "the loss fell {collapse_min_ratio:g}x within {collapse_max_points} logged points "
    "(or {collapse_max_steps} steps) to near zero",
    emits=(LOSS_COLLAPSE,),
    reads=(
        "collapse_level_points",
        "collapse_level_spread",
        "collapse_max_points",
        "collapse_max_steps",
        "collapse_min_ratio",
        "collapse_near_zero_loss",
    ),
)
def detect_loss_collapse(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A loss that falls by orders of magnitude within a few logged points to near zero.

    What it detects: a logged loss at or below {collapse_near_zero_loss:g} (or exactly 0.0)
    that is {collapse_min_ratio:g}x or more below the level before it, reached within
    {collapse_max_points} logged points, or within {collapse_max_steps} steps when the log
    holds more points than that in them (logged every step, a collapse over 30 steps spans
    30 points). The level is the median of up to
    {collapse_level_points} logged points before those, and must itself span less than
    {collapse_level_spread:g}x (max/min): a loss that was already falling by orders of
    magnitude is converging, however fast, and a classifier that creeps down to 1e-3 over
    hundreds of steps never has such a level. A log whose loss is ever negative is not
    judged: zero means nothing to an objective that crosses it. Works on any log length
    (a few points before the fall suffice).

    Why it matters: no model learns a real task that fast. The likely causes are a label
    that leaked into the input, a loss mask that drops every token, or a NaN that the
    logger wrote as 0; each leaves every later step training on nothing.
    """
    result = RuleResult()
    found = view.finite_or_skip("loss", LOSS_COLLAPSE.rule, 2, result.skipped)
    if found is None:
        return result
    steps, loss = found
    if loss.min() < 0:
        result.skipped.append(
            Skip(LOSS_COLLAPSE.rule, "not judged: the loss goes below 0, so zero is no floor")
        )
        return result
    interval = median_interval(steps)
    by_steps = thresholds.collapse_max_steps / interval if interval > 0 else 0.0
    k = max(thresholds.collapse_max_points, int(by_steps))
    b = thresholds.collapse_level_points
    hit = _first_collapse(loss, k, b, thresholds)
    if hit is None:
        return result
    j, base = hit
    # the last point still within an order of magnitude of the level is where the fall began
    lo = max(0, j - k)
    near_level = np.flatnonzero(loss[lo:j] * 10 >= base)
    before = lo + int(near_level[-1]) if near_level.size else max(0, j - 1)
    level_rows = (max(0, j - k - b + 1), j - k) if j > k else (0, 0)
    after = loss[j + 1 :]
    near_zero = int(np.sum(after <= thresholds.collapse_near_zero_loss))
    zeros = int(np.sum(loss[j:] == 0.0))
    ratio = base / float(loss[j]) if loss[j] > 0 else math.inf
    taken = j - before
    result.findings.append(
        LOSS_COLLAPSE.finding(
            f"the loss collapsed from {float(loss[before]):.4g} at step {steps[before]} to "
            f"{float(loss[j]):.3g} at step {steps[j]} ({taken} logged point(s); level before, the "
            f"median over steps {steps[level_rows[0]]}-{steps[level_rows[1]]}: {base:.4g}"
            + (f", a {ratio:.3g}x fall" if math.isfinite(ratio) else ", to exactly 0.0")
            + f"); {near_zero} of the {after.size} logged points after it sit at or below "
            f"{thresholds.collapse_near_zero_loss:g}"
            + (f" ({zeros} exactly 0.0)" if zeros else "")
            + ". Causes to check: a label leaking into the input, a loss mask that drops every "
            "token, a NaN logged as 0",
            step=int(steps[j]),
            metric="loss",
            evidence=CollapseEvidence(
                level_before=base,
                level_steps=[int(steps[level_rows[0]]), int(steps[level_rows[1]])],
                value_before=float(loss[before]),
                step_before=int(steps[before]),
                value=float(loss[j]),
                fall_ratio=ratio,
                points_taken=taken,
                points_after=int(after.size),
                points_after_near_zero=near_zero,
                exact_zeros=zeros,
            ),
        )
    )
    return result


def _first_collapse(
    loss: np.ndarray, k: int, b: int, thresholds: Thresholds
) -> tuple[int, float] | None:
    """The first point of a collapse and the level before it (see `detect_loss_collapse`),
    or None; the level, its max and min over the `b` points that end `k` points before
    each point, taken `windows.CHUNK_ROWS` points at a time with the `k + b - 1` before
    them. A median, a max and a min of the same points are the same numbers however the
    series is cut, and the scan stops at the first hit: three whole-log copies less."""
    chunk_rows = windows.CHUNK_ROWS  # read at call time: tests take small chunks
    for first in range(0, loss.size, chunk_rows):  # loop over chunks of points
        stop = min(loss.size, first + chunk_rows)
        chunk = loss[first:stop]
        # a collapse's point is near zero: a chunk with none has no hit, and its windows'
        # level, max and min (a rolling median of every point) are not needed
        if not (chunk <= thresholds.collapse_near_zero_loss).any():
            continue
        reach = max(0, first - k - b + 1)
        # the level window ends k points before the candidate point: the fall takes at most k
        here = pl.Series(loss[reach:stop])
        level = here.rolling_median(b, min_samples=1).shift(k)[first - reach :].to_numpy()
        top = here.rolling_max(b, min_samples=1).shift(k)[first - reach :].to_numpy()
        low = here.rolling_min(b, min_samples=1).shift(k)[first - reach :].to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            steady = top < thresholds.collapse_level_spread * low
            down = (chunk <= thresholds.collapse_near_zero_loss) & (
                chunk * thresholds.collapse_min_ratio <= level
            )
        # a log shorter than k+1 points has no level yet: compare with its first point
        short = np.arange(first, stop) <= k
        if short.any():
            level, steady = level.copy(), steady.copy()
            level[short], steady[short] = loss[0], True
            down[short] = (chunk[short] <= thresholds.collapse_near_zero_loss) & (
                chunk[short] * thresholds.collapse_min_ratio <= loss[0]
            )
        hits = np.flatnonzero(down & steady & (level > 0))
        if hits.size:
            return first + int(hits[0]), float(level[hits[0]])
    return None
