"""The overflow ledger: every fp16 overflow and loss-scale move of a run, read once.

A log tells of overflows in up to four ways, often several at once: an
overflow message (DeepSpeed `OVERFLOW! ... Attempted loss scale: A, reducing
to B`, kept by the readers as the `overflow` count and the scale before and
after), a skipped-step counter (Megatron's and DeepSpeed's count per log
interval), a non-finite grad norm, and the loss-scale series itself (a fall
from A to B between two logged points took at least log2(A/B) halvings, each
one overflow or more). Counted separately they disagree (a DeepSpeed interval
of ten overflow messages also says `skipped=10`); the ledger reconciles them
into entries that never count one overflow twice:

* `message` and `grad-norm` entries: one row each, its count exact;
* `skip-counter`: what a counter says beyond the entries already in its
  interval, at the counter's step (the steps inside the interval are unknown);
* `scale-fall`: halvings the scale series shows beyond the overflows already
  seen between the two scale points, at the later point.

An interval entry (a counter over more than one step, or a scale fall) makes
the total a lower bound: the log hides the events themselves, and the ledger
says "at least". Every count and sentence about overflows, halvings and the
scale's range in every output reads this object (`ledger_of`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stabilitycli.core.records import dataclass
from stabilitycli.detect import windows
from stabilitycli.detect.series import SeriesView
from stabilitycli.frame import plain_numpy

SOURCES = ("message", "grad-norm", "skip-counter", "scale-fall")
_MESSAGE, _GRAD, _COUNTER, _FALL = range(4)
ATTEMPTED = "loss_scale_attempted"  # the scale an overflowed step ran with (the readers' column)
AT_MINIMUM = "loss_scale_at_minimum"  # the scaler said it could not lower its scale any more
EVENTS_IN_JSON = 1000  # entries listed in the JSON ledger; the counts cover them all


@dataclass(frozen=True)
class ScaleHistory:
    """The loss scale over the log, the scale each overflow message attempted included."""

    first: float
    final: float
    max: float
    min: float
    max_step: int
    min_step: int
    drops: int  # falls between consecutive scale values
    halvings: int  # halvings those falls took (a 16x fall: 4)
    halvings_exact: bool  # False: some fall spans several halvings between two logged points
    rises: int
    fall_steps: np.ndarray  # int64, the step of each fall
    fall_to: np.ndarray  # the scale after each fall
    rise_steps: np.ndarray

    before_first_fall: float  # the scale the first fall started from

    def chain(self, limit: int = 6) -> str:
        """'64 -> 32 -> ... -> 2': the scale before the first fall and after each fall."""
        values = [self.before_first_fall, *self.fall_to.tolist()]
        shown = " -> ".join(scale_text(v) for v in values[:limit])
        return shown + (f" -> ... -> {scale_text(values[-1])}" if len(values) > limit else "")

    def halvings_text(self) -> str:
        return f"{'' if self.halvings_exact else 'at least '}{self.halvings}"


@dataclass(frozen=True)
class OverflowLedger:
    steps: np.ndarray  # int64, one per entry, sorted
    from_steps: np.ndarray  # int64, the first step an interval entry may stand for (= step)
    sources: np.ndarray  # int8 index into SOURCES
    counts: np.ndarray  # int64 overflows each entry stands for
    attempted: np.ndarray  # the scale the step ran with (NaN: not said)
    new: np.ndarray  # the scale after it (NaN: not said)
    span_steps: int
    has_scale: bool
    has_messages: bool
    has_counter: bool
    # counter intervals that read 0 while the scale fell inside them: the counter hides events
    hidden_intervals: int
    scale: ScaleHistory | None
    # steps where the scaler said its scale was already at its minimum (DeepSpeed's exception)
    at_minimum_steps: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def exact(self) -> bool:
        """The total is a count, not a lower bound (no interval hides events)."""
        return bool(self.step_known.all())

    @property
    def step_known(self) -> np.ndarray:
        """Per entry: its overflows are at its step (a message, a non-finite grad norm, a
        counter over one step), not somewhere in an interval."""
        return self.sources < _COUNTER

    def total_text(self) -> str:
        return f"{'' if self.exact else 'at least '}{self.total}"

    def by_source(self) -> dict[str, int]:
        sums = np.bincount(self.sources, weights=self.counts, minlength=len(SOURCES))
        return {name: int(n) for name, n in zip(SOURCES, sums, strict=True) if n}

    def sources_text(self) -> str:
        """'17 from overflow messages, 3 from a skipped-step counter'."""
        words = {
            "message": "overflow message(s)",
            "grad-norm": "non-finite grad norm(s)",
            "skip-counter": "skipped-step counters beyond the other evidence",
            "scale-fall": "loss-scale falls beyond the other evidence",
        }
        return ", ".join(f"{n} from {words[k]}" for k, n in self.by_source().items())

    def hidden_text(self) -> str:
        """Why the count is a lower bound, or ''."""
        parts = []
        if self.hidden_intervals:
            parts.append(
                f"the skipped-step counter read 0 in {self.hidden_intervals} log interval(s) "
                "where the loss scale fell: the interval hides those overflows"
            )
        if np.any(self.sources == _COUNTER):
            parts.append("a skipped-step counter counts per log interval, not per step")
        if self.scale is not None and not self.scale.halvings_exact:
            parts.append("a fall of the scale between two logged points is at least log2 of it")
        return "; ".join(parts)

    def per_row(self, row_steps: np.ndarray) -> np.ndarray:
        """Overflows at each of `row_steps` (0 where none)."""
        counts = np.zeros(row_steps.size)
        at = np.searchsorted(row_steps, self.steps)
        ok = at < row_steps.size
        ok[ok] &= row_steps[at[ok]] == self.steps[ok]
        np.add.at(counts, at[ok], self.counts[ok])
        return counts

    def to_dict(self) -> dict[str, Any]:
        shown = slice(0, EVENTS_IN_JSON)
        out: dict[str, Any] = {
            "overflows": self.total,
            "overflows_exact": self.exact,
            "by_source": self.by_source(),
            "hidden_intervals": self.hidden_intervals,
            "span_steps": self.span_steps,
            "events": [
                {
                    "step": int(s),
                    "from_step": int(f),
                    "source": SOURCES[int(k)],
                    "count": int(n),
                    "attempted_scale": _num(a),
                    "new_scale": _num(b),
                }
                for s, f, k, n, a, b in zip(
                    self.steps[shown].tolist(),
                    self.from_steps[shown].tolist(),
                    self.sources[shown].tolist(),
                    self.counts[shown].tolist(),
                    self.attempted[shown].tolist(),
                    self.new[shown].tolist(),
                    strict=True,
                )
            ],
            "events_listed": min(self.steps.size, EVENTS_IN_JSON),
            "at_minimum_steps": self.at_minimum_steps.tolist(),
            "scale": None,
        }
        if self.scale is not None:
            sc = self.scale
            out["scale"] = {
                "first": sc.first,
                "final": sc.final,
                "max": sc.max,
                "max_step": sc.max_step,
                "min": sc.min,
                "min_step": sc.min_step,
                "drops": sc.drops,
                "halvings": sc.halvings,
                "halvings_exact": sc.halvings_exact,
                "rises": sc.rises,
            }
        return out


def _num(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def scale_text(value: float) -> str:
    """A loss scale as logged: a whole scale in full (2097152, not 2.09715e+06)."""
    value = float(value)
    if np.isfinite(value) and value >= 1 and value == int(value):
        return str(int(value))
    return f"{value:g}"


def ledger_of(view: SeriesView) -> OverflowLedger:
    """The run's ledger, built on the first call and kept on the view."""
    cached = view.derived.get("overflow_ledger")
    if cached is None:
        cached = view.derived["overflow_ledger"] = _build(view)
    return cached


def _column(view: SeriesView, name: str, rows: np.ndarray) -> np.ndarray:
    if not view.has(name):
        return np.zeros(rows.size)
    # an Inf count is one overflow at least; NaN is "not said"
    return np.nan_to_num(view.columns[name][rows], nan=0.0, posinf=1.0)


def _direct(view: SeriesView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows with a message or a non-finite grad norm: (rows, counts, source), a chunk of rows
    at a time (a count per row is a float column as long as the log for a few overflows)."""
    rows, counts, kinds = [np.zeros(0, np.int64)], [np.zeros(0)], [np.zeros(0, np.int8)]
    has_grad = view.has("grad_norm")
    for first in range(0, view.steps.size, windows.CHUNK_ROWS):
        at = np.arange(first, min(view.steps.size, first + windows.CHUNK_ROWS))
        msg = _column(view, "overflow", at)
        bad = np.zeros(at.size)
        if has_grad:
            bad = view.logged["grad_norm"][at] & ~np.isfinite(view.columns["grad_norm"][at])
        # a non-finite grad norm on a message's row is that overflow, not another
        count = np.where(msg > 0, msg, bad.astype(float))
        hit = np.flatnonzero(count > 0)
        rows.append(at[hit])
        counts.append(count[hit])
        kinds.append(np.where(msg[hit] > 0, _MESSAGE, _GRAD).astype(np.int8))
    return np.concatenate(rows), np.concatenate(counts), np.concatenate(kinds)


def _counter_entries(
    view: SeriesView, steps: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What each skipped-step counter says beyond the entries in its interval:
    (counter steps, their values, residual counts, each counter's interval width in steps)."""
    c_steps, c_values = view.points("skipped_steps")
    ok = np.isfinite(c_values)
    c_steps, c_values = c_steps[ok], np.floor(np.maximum(c_values[ok], 0.0))  # whole skips
    # an entry at step s belongs to the first counter at or after s
    where = np.searchsorted(c_steps, steps)
    seen = np.bincount(where, weights=counts, minlength=c_steps.size + 1)[: c_steps.size]
    # the first counter's interval began before the log: taken as wide as the next one
    width = np.diff(c_steps, prepend=2 * c_steps[0] - c_steps[1] if c_steps.size > 1 else 0)
    return c_steps, c_values, np.maximum(c_values - seen, 0.0), width


def _timeline(view: SeriesView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scale in order: (steps, values, is_attempted). A message's attempted scale comes
    just before the scale it left at the same step."""
    s_steps, s_values = view.finite_points("loss_scale")
    if not view.has(ATTEMPTED):
        # the view's steps are sorted and unique: already in order, and the sort's copies
        # (five of the log's length at once) are not needed
        return s_steps, s_values, np.zeros(s_steps.size, bool)
    a_steps, a_values = view.finite_points(ATTEMPTED)
    steps = np.concatenate([a_steps, s_steps])
    values = np.concatenate([a_values, s_values])
    attempted = np.concatenate([np.ones(a_steps.size, bool), np.zeros(s_steps.size, bool)])
    order = np.lexsort((~attempted, steps))
    return steps[order], values[order], attempted[order]


def _halvings(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Halvings a fall from `before` to `after` took: at least one, log2 of the ratio."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log2(before / after)
    return np.where(np.isfinite(ratio) & (ratio > 1), np.rint(ratio), 1).astype(np.int64)


def _build(view: SeriesView) -> OverflowLedger:
    rows, counts, kinds = _direct(view)
    steps = view.steps[rows]
    # a message's scales: the one the step ran with and the one it left (NaN: not said)
    message = kinds == _MESSAGE
    attempted, new = (
        np.where(message, view.columns[name][rows], np.nan)
        if view.has(name)
        else np.full(rows.size, np.nan)
        for name in (ATTEMPTED, "loss_scale")
    )
    parts = [(steps, steps, counts, kinds, attempted, new)]
    has_counter = view.has("skipped_steps")
    c_steps, c_values = np.zeros(0, np.int64), np.zeros(0)
    if has_counter:
        c_steps, c_values, residual, width = _counter_entries(view, steps, counts)
        keep = residual > 0
        # a counter over one step is that step's own count: exact, like a message
        kind = np.where(width[keep] > 1, _COUNTER, _GRAD).astype(np.int8)
        nan = np.full(int(keep.sum()), np.nan)
        at = c_steps[keep]
        parts.append((at, at - width[keep] + 1, residual[keep], kind, nan, nan))
    e_steps, _, e_counts = _merge(parts)[:3]
    scale, fall_entries, hidden = None, None, 0
    if view.has("loss_scale"):
        scale, fall_entries, hidden = _scale_story(view, e_steps, e_counts, c_steps, c_values)
    if fall_entries is not None:
        parts.append(fall_entries)
    steps_all, from_all, counts_all, kinds_all, att_all, new_all = _merge(parts)
    span = int(view.steps[-1] - view.steps[0] + 1) if view.steps.size else 0
    return OverflowLedger(
        steps=steps_all,
        from_steps=from_all,
        sources=kinds_all,
        counts=counts_all.astype(np.int64),
        attempted=att_all,
        new=new_all,
        span_steps=span,
        has_scale=view.has("loss_scale"),
        has_messages=view.has("overflow"),
        has_counter=has_counter,
        hidden_intervals=hidden,
        scale=scale,
        at_minimum_steps=(
            view.points(AT_MINIMUM)[0] if view.has(AT_MINIMUM) else np.zeros(0, np.int64)
        ),
    )


def _merge(parts: list[tuple]) -> tuple[np.ndarray, ...]:
    joined = [np.concatenate([p[i] for p in parts]) for i in range(6)]
    order = np.argsort(joined[0], kind="stable")
    return tuple(a[order] for a in joined)


def _scale_story(
    view: SeriesView,
    e_steps: np.ndarray,
    e_counts: np.ndarray,
    c_steps: np.ndarray,
    c_values: np.ndarray,
) -> tuple[ScaleHistory | None, tuple | None, int]:
    """The scale's history, the overflows its falls show beyond the entries (as `scale-fall`
    entries), and the counter intervals that read 0 across a fall."""
    t_steps, t_values, t_attempted = _timeline(view)
    if not t_values.size:
        return None, None, 0
    fell = np.flatnonzero(t_values[1:] < t_values[:-1]) + 1
    rose = np.flatnonzero(t_values[1:] > t_values[:-1]) + 1
    halvings = _halvings(t_values[fell - 1], t_values[fell])
    # a message's own fall (attempted -> new at one step) is that message's halving
    own = t_attempted[fell - 1] & (t_steps[fell - 1] == t_steps[fell])
    exact = bool(np.all(own | (halvings == 1)))
    # overflows seen between the two points of each fall; the earlier point's own
    # overflow counts when it did not end a fall itself (a logger that records the scale a
    # step ran with shows the backoff one row after the overflow)
    cum = np.concatenate(([0.0], np.cumsum(e_counts)))
    lo, hi = t_steps[fell - 1], t_steps[fell]
    ended_fall = np.zeros(t_values.size, bool)
    ended_fall[fell] = True
    lo_open = np.where(ended_fall[fell - 1], lo, lo - 1)
    seen = (
        cum[np.searchsorted(e_steps, hi, "right")] - cum[np.searchsorted(e_steps, lo_open, "right")]
    )
    beyond = np.where(own, 0, np.maximum(halvings - seen, 0))
    keep = beyond > 0
    entries = (
        hi[keep],
        lo_open[keep] + 1,
        beyond[keep].astype(float),
        np.full(int(keep.sum()), _FALL, np.int8),
        t_values[fell - 1][keep],
        t_values[fell][keep],
    )
    hidden = 0
    if c_steps.size:
        # the counter intervals that hold a fall between logged points and read 0
        at = np.searchsorted(c_steps, hi[~own])
        at = plain_numpy.unique(at[at < c_steps.size])
        hidden = int(np.count_nonzero(c_values[at] == 0))
    # the last scale that is no attempted one, found without a copy of the scales
    plain = ~t_attempted
    final = t_values[plain.size - 1 - int(np.argmax(plain[::-1]))] if plain.any() else t_values[-1]
    history = ScaleHistory(
        first=float(t_values[0]),
        final=float(final),
        max=float(t_values.max()),
        min=float(t_values.min()),
        max_step=int(t_steps[int(np.argmax(t_values))]),
        min_step=int(t_steps[int(np.argmin(t_values))]),
        drops=int(fell.size),
        halvings=int(halvings.sum()),
        halvings_exact=exact,
        rises=int(rose.size),
        fall_steps=t_steps[fell],
        fall_to=t_values[fell],
        rise_steps=t_steps[rose],
        before_first_fall=float(t_values[fell[0] - 1]) if fell.size else float(t_values[0]),
    )
    return history, entries, hidden
