"""What caused a loss spike, when the log shows it (Q2.4): the grad norm's surge, an LR jump,
a batch seen again, a restart, read at the spike's rows from the other series aligned to the
loss's steps."""

from __future__ import annotations

from functools import cached_property
from typing import overload

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.core.records import dataclass
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.spike import (
    CAUSE_CODES,
    LongTailToken,
    LrDiscontinuity,
    LrRestart,
    OptimizerReset,
    RepeatedBatch,
    SpikeCause,
)
from stabilitycli.detect.level import LevelAt
from stabilitycli.detect.level_floor import asked_rows
from stabilitycli.detect.lr_plan import LrPlan
from stabilitycli.detect.pointwise import Pointwise, Ratio, RelativeChange
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.windows import plan_window, window_max_at


@dataclass
class CauseContext:
    # computed at the rows read (the flagged points' windows), not over the whole log
    grad_ratio: Ratio | None  # grad norm / its trailing mean, at loss steps
    grad_norm: np.ndarray | None
    grad_baseline: np.ndarray | Pointwise | None
    lr_rel_jump: RelativeChange | np.ndarray | None
    lr: np.ndarray | None
    batch_id: np.ndarray | None
    restart_steps: np.ndarray
    loss: np.ndarray
    plan: LrPlan | None = None
    ignored: frozenset[str] = frozenset()
    # the grad norm's own level and steps, to say what its baseline at a row was
    grad_level: LevelAt | None = None
    grad_steps: np.ndarray | None = None
    loss_steps: np.ndarray | None = None

    def grad_basis(self, row: int) -> str:
        """What the grad-norm baseline at a loss row is (see `LevelAt.basis`)."""
        base = self.grad_level
        if base is None or self.grad_steps is None or self.loss_steps is None:
            return "mean"
        at = int(np.searchsorted(self.grad_steps, self.loss_steps[row]))
        return base.basis(at) if at < base.size else "mean"

    @cached_property
    def suffix_max(self) -> np.ndarray:
        """max finite loss from each index to the end (only an unrecovered spike asks)."""
        return suffix_max(self.loss)

    def maybe_cause(
        self, candidates: np.ndarray, steps: np.ndarray, thresholds: Thresholds
    ) -> np.ndarray:
        """Vectorised pre-screen: could any Q2.3 cause (or a restart) apply at these points?"""
        maybe = np.zeros(candidates.size, dtype=bool)
        lead = thresholds.cause_lead_steps
        bar = min(thresholds.grad_norm_spike_ratio, thresholds.grad_norm_outlier_ratio)
        # the grad norm's level only where the least value of its window leaves it a chance
        same_steps = self.grad_level if self.grad_baseline is self.grad_level else None
        asked = asked_rows(same_steps, steps, lead, candidates, bar)
        grad_max = lead_max(steps, self.grad_ratio, lead, candidates[asked])
        if grad_max is not None:
            maybe[asked] |= grad_max >= bar
        lr_max = lead_max(steps, self.lr_rel_jump, thresholds.lr_jump_cause_steps, candidates)
        if lr_max is not None:
            maybe |= lr_max > thresholds.lr_jump_ratio
        if self.batch_id is not None:
            maybe |= recently_seen(steps, self.batch_id, thresholds.duplicate_batch_window_steps)[
                candidates
            ]
        if self.plan is not None and self.plan.restarts:  # a bump after a planned restart
            planned = np.array([r.step for r in self.plan.restarts])
            at = steps[candidates]
            last = np.searchsorted(planned, at, side="right") - 1
            maybe |= (last >= 0) & (
                at - planned[np.maximum(last, 0)] <= thresholds.lr_jump_cause_steps
            )
        if self.restart_steps.size:
            restarts = np.sort(self.restart_steps)
            at = steps[candidates]
            first_after = np.searchsorted(
                restarts, at - thresholds.restart_spike_steps, side="left"
            )
            maybe |= (first_after < restarts.size) & (
                restarts[np.minimum(first_after, restarts.size - 1)] <= at
            )
        return maybe

    @staticmethod
    def build(
        view: SeriesView, loss_steps: np.ndarray, thresholds: Thresholds, facts: Facts
    ) -> CauseContext:
        grad_ratio = grad = grad_base = lr = batch = g_mean = g_steps = None
        lr_jump: RelativeChange | np.ndarray | None = None
        if view.has("grad_norm"):
            g_steps, g = view.points("grad_norm")
            # computed at the rows the causes read (the flagged points' lead windows), not
            # held whole: at 30M steps the whole mean was 240 MB for a few hundred reads
            plan = plan_window(
                g_steps,
                thresholds.spike_window_steps,
                thresholds.min_points_per_window,
                thresholds.widened_window_points,
            )
            # the grad norm falls fast in warmup too: its surge is measured against the
            # level it was on, not a trailing mean that lags above it
            g_mean = LevelAt(g_steps, g, thresholds.spike_window_steps, plan, thresholds)
            grad, grad_base = (
                align_at(g_steps, g, loss_steps),
                align_at(g_steps, g_mean, loss_steps),
            )
            # taken apart from the aligned series: where the grad norm was not logged both
            # are NaN, and so is their ratio
            grad_ratio = Ratio(grad, grad_base)
        if view.has("lr"):
            l_steps, l_values = view.points("lr")
            lr = align_at(l_steps, l_values, loss_steps)
            if lr is l_values:
                lr_jump = RelativeChange(l_values)
            else:  # the change from the LR's own point before, then looked up at the loss's
                lr_jump = align_at(l_steps, RelativeChange(l_values)[:], loss_steps)
        if view.has("batch_id"):
            b_steps, b = view.points("batch_id")
            batch = align_at(b_steps, b, loss_steps)
        restarts = np.array([r.resumed_from_step for r in view.restarts], dtype=np.int64)
        return CauseContext(
            grad_ratio,
            grad,
            grad_base,
            lr_jump,
            lr,
            batch,
            restarts,
            view.points("loss")[1],
            facts.lr_plan,
            facts.ignored,
            g_mean,
            g_steps,
            loss_steps,
        )


def lead_max(steps: np.ndarray, values, lead_steps: int, rows: np.ndarray) -> np.ndarray | None:
    """max of values (NaN and Inf as 0) over [t - lead_steps, t] at each of `rows`."""
    if values is None:
        return None
    return window_max_at(steps, values, lead_steps + 1, rows, non_finite_as=0.0)


def recently_seen(steps: np.ndarray, batch_id: np.ndarray, window_steps: int) -> np.ndarray:
    """Per point: was the same batch id logged within `window_steps` before it?"""
    previous = (
        pl.DataFrame({"step": steps, "batch": batch_id})
        .select(pl.col("step").shift(1).over("batch"))["step"]
        .fill_null(np.iinfo(np.int64).min // 2)
        .to_numpy()
    )
    return np.isfinite(batch_id) & (steps - previous <= window_steps)


def suffix_max(loss: np.ndarray) -> np.ndarray:
    finite = np.where(np.isfinite(loss), loss, -np.inf)
    return np.maximum.accumulate(finite[::-1])[::-1]


@overload
def align_at(src_steps: np.ndarray, values: np.ndarray, at_steps: np.ndarray) -> np.ndarray: ...
@overload
def align_at(
    src_steps: np.ndarray, values: Pointwise, at_steps: np.ndarray
) -> np.ndarray | Pointwise: ...
def align_at(src_steps, values, at_steps):
    """values of a series at `at_steps` (NaN where it was not logged at that step); a
    series computed where it is read stays so when the steps are the same."""
    if src_steps is at_steps or np.array_equal(src_steps, at_steps):
        return values  # logged at the same steps as the loss (the usual case): no lookup
    idx = np.searchsorted(src_steps, at_steps)
    idx_clip = np.minimum(idx, src_steps.size - 1)
    hit = (idx < src_steps.size) & (src_steps[idx_clip] == at_steps)
    return np.where(hit, values[idx_clip], np.nan)


def spike_causes(
    idx, peak_idx, steps, ctx: CauseContext, thresholds: Thresholds, onset: int, large: bool
) -> list[SpikeCause]:
    """Evident causes, most specific first (Q2.3 and the restart pattern)."""
    # index ranges by binary search: an event looks at a few rows, never the whole log.
    # Up to the peak: when a noise point just before the spike opens the event, the
    # batch that made the spike is logged after the onset, not before it
    lo = int(np.searchsorted(steps, onset - thresholds.cause_lead_steps))
    hi = max(idx, peak_idx) + 1
    causes: list[SpikeCause] = []
    recent = ctx.restart_steps[
        (ctx.restart_steps <= onset) & (ctx.restart_steps >= onset - thresholds.restart_spike_steps)
    ]
    if recent.size:
        causes.append(
            OptimizerReset(
                restart_step=int(recent[-1]),
                steps_after_restart=int(onset - recent[-1]),
            )
        )
    if ctx.batch_id is not None and np.isfinite(ctx.batch_id[idx]):
        first = int(np.searchsorted(steps, onset - thresholds.duplicate_batch_window_steps))
        same = np.flatnonzero(ctx.batch_id[first:idx] == ctx.batch_id[idx])
        if same.size:
            causes.append(
                RepeatedBatch(
                    batch_id=float(ctx.batch_id[idx]),
                    repeat_of_step=int(steps[first + same[-1]]),
                )
            )
    planned = (
        ctx.plan.restart_near(onset - thresholds.lr_jump_cause_steps, int(steps[hi - 1]))
        if ctx.plan is not None
        else None
    )
    if planned is not None:  # the LR rise there is the schedule's, not a bug
        causes.append(
            LrRestart(
                restart_step=planned.step,
                lr_before=planned.lr_before,
                lr=planned.lr_after,
                lead_steps=int(onset - planned.step),
                declared=planned.declared,
            )
        )
    elif ctx.lr_rel_jump is not None and ctx.lr is not None:  # build() sets both or neither
        # a step change of the LR keeps acting for as long as the LR stays up, so
        # it is looked for further back than the grad norm's 1-3 step lead
        lr_lo = int(np.searchsorted(steps, onset - thresholds.lr_jump_cause_steps))
        jumps = np.nan_to_num(ctx.lr_rel_jump[lr_lo:hi], nan=0.0)
        if jumps.size and jumps.max() > thresholds.lr_jump_ratio:
            at = lr_lo + int(np.argmax(jumps))
            still_up = ctx.lr[idx] >= thresholds.lr_jump_still_up_frac * ctx.lr[at]
            if still_up or at >= lo:
                jump = float(ctx.lr_rel_jump[at])
                causes.append(
                    LrDiscontinuity(
                        lr_step=int(steps[at]),
                        lr=float(ctx.lr[at]),
                        lr_before=float(ctx.lr[at] / (1 + jump)),
                        relative_jump=round(jump, 3),
                        lead_steps=int(onset - steps[at]),
                    )
                )
    # build() sets the three grad-norm series together
    if ctx.grad_ratio is not None and ctx.grad_norm is not None and ctx.grad_baseline is not None:
        # a large spike needs less of a grad-norm jump to be explained by its batch
        bar = thresholds.grad_norm_outlier_ratio if large else thresholds.grad_norm_spike_ratio
        ratios = np.nan_to_num(ctx.grad_ratio[lo:hi], nan=0.0)
        if ratios.size and ratios.max() >= bar:
            at = lo + int(np.argmax(ratios))
            causes.append(
                LongTailToken(
                    grad_norm_step=int(steps[at]),
                    grad_norm=float(ctx.grad_norm[at]),
                    grad_norm_baseline=float(ctx.grad_baseline[at]),
                    ratio=float(ctx.grad_ratio[at]),
                    lead_steps=int(onset - steps[at]),
                    bar=bar,
                    grad_norm_baseline_basis=ctx.grad_basis(at),
                )
            )
    return [c for c in causes if CAUSE_CODES.get(c["cause"]) not in ctx.ignored]
