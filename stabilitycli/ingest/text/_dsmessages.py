"""DeepSpeed's fp16 loss-scale messages, turned into one event per overflow.

DeepSpeed reports an fp16 overflow in several ways, depending on version and
optimizer, and usually *without* the step number:

* ZeRO / loss_scaler: `[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted
  loss scale: 65536, reducing to 32768` (or `..., but hysteresis is 2.
  Reducing hysteresis to 1`: a skipped step that keeps the scale);
* fused FP16 optimizer: `Grad overflow on iteration N` and `Reducing dynamic
  loss scale from A to B`, printed by EVERY rank, plus once `[Rank 0] Overflow
  detected. Skipping step. Attempted loss scale: A, reducing to B`;
* unfused optimizer: `[deepspeed] fp16 dynamic loss scale overflow! Skipping
  step. Attempted loss scale: A, reducing to B`, by every rank;
* scale growth: `Increasing dynamic loss scale from A to B`, by every rank.

How a step is given to each event (the caller supplies "anchors": the lines of
its format that carry a step, e.g. `step=N, skipped=K` or a Megatron iteration
line; an anchor is printed after its step finished, so a message printed
before an anchor belongs to a step in (previous anchor, that anchor]):

1. `Grad overflow on iteration N` names the step: DeepSpeed counts optimizer
   calls from 0 there, while `step=` and Megatron's iteration count from 1, so
   it is placed at step N+1 (iterations 0-9 are steps 1-10, which is what the
   following `step=10, skipped=10` line says).
2. A message without a step that repeats an event already placed by rule 1 in
   the same interval (same attempted and reduced scale) is that event.
3. Otherwise, when the two anchors around it are consecutive steps, the step is
   the later anchor's; when they are further apart and both carry a logger
   timestamp, the step is interpolated linearly in time between them (an
   estimate, good to a step or two: skipped steps run faster); without
   timestamps it is the later anchor's. Before the first anchor events are
   numbered 1, 2, 3... in order (warm-up overflows are consecutive); after the
   last anchor they follow it in order. The notes say which rule placed how many.

Copies of one message from several ranks are ONE event: messages that name no
rank fold when they repeat the same scales within a second (or with no
timestamp, with no anchor between them); a message that names a rank (`Rank
0`) and repeats is a new event (two engines - DeepSpeed-Chat's actor and
critic - overflowing one after the other).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import field

from stabilitycli.core.records import dataclass
from stabilitycli.ingest.text.textlog import INT64_MAX, whole

_NUM = r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan))(?![\d.])"
_SKIP_STEP = re.compile(
    r"(?:OVERFLOW!\s*Rank\s+(?P<rank>\d+)\s+Skipping step"
    r"|(?:\[Rank\s+(?P<rank2>\d+)\]\s*)?Overflow detected\.\s*Skipping step"
    r"|fp16 dynamic loss scale overflow!\s*Skipping step)"
    r"\.?\s*Attempted loss scale:\s*"
    + _NUM
    + r"(?:,\s*reducing to\s*"
    + _NUM
    + r"|,\s*but hysteresis is\s*\d+)",
    re.IGNORECASE,
)
_GRAD_OVERFLOW = re.compile(r"Grad overflow on iteration:?\s*(\d+)")
_REDUCING = re.compile(r"Reducing dynamic loss scale from\s*" + _NUM + r"\s*to\s*" + _NUM)
_INCREASING = re.compile(r"Increasing dynamic loss scale from\s*" + _NUM + r"\s*to\s*" + _NUM)
# DeepSpeed's exception when an overflow comes with the scale at its `min_loss_scale`
_AT_MINIMUM = re.compile(r"loss scale already at minimum", re.IGNORECASE)
ATTEMPTED_KEY = "loss_scale_attempted"
MINIMUM_KEY = "loss_scale_at_minimum"
# how rule 3 says a step is a message's order among the lines, not a step the log printed
_BY_ORDER = "order"
SAME_BURST_S = 1.0  # rank copies of one message are printed within milliseconds
TWIN_WINDOW_S = 5.0  # a rank-0 summary line and the per-rank lines of the same overflow


@dataclass
class Mention:
    """One message line (or one message inside a torn line)."""

    row: int
    kind: str  # "overflow", "grow" or "minimum" (the scale could not be lowered any more)
    step: int | None
    attempted: float | None
    reduced: float | None
    rank: int | None
    time: float | None
    hysteresis: bool = False
    # how `step` was found when the message came with one: its own iteration number, or
    # where the caller saw it (dictlog: "the progress bar on its line")
    placed_by: str = "iteration number"


@dataclass
class Event:
    step: int
    kind: str
    attempted: float | None
    reduced: float | None
    hysteresis: bool
    placed_by: str
    rows: list[int] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    time: float | None = None

    @property
    def scale_after(self) -> float | None:
        return self.attempted if self.hysteresis else self.reduced


@dataclass
class Anchor:
    row: int
    step: int
    time: float | None


def scan_line(row: int, line: str, time: float | None, state: dict) -> list[Mention]:
    """The loss-scale messages in one line (a torn line can hold two)."""
    out: list[Mention] = []
    for match in _SKIP_STEP.finditer(line):
        rank = match.group("rank") or match.group("rank2")
        attempted = float(match.group(3))
        reduced_text = match.group(4)
        hysteresis = reduced_text is None
        out.append(
            Mention(
                row,
                "overflow",
                None,
                attempted,
                attempted if hysteresis else float(reduced_text),
                whole(rank) if rank is not None else None,
                time,
                hysteresis,
            )
        )
    for match in _GRAD_OVERFLOW.finditer(line):
        iteration = whole(match.group(1))
        # past the 64-bit range the message keeps no step: it is placed by order, as one without
        step = iteration + 1 if iteration is not None and iteration < INT64_MAX else None
        state["iteration_step"] = step
        out.append(Mention(row, "overflow", step, None, None, None, time))
    for match in _REDUCING.finditer(line):
        out.append(
            Mention(
                row,
                "overflow",
                state.get("iteration_step"),
                float(match.group(1)),
                float(match.group(2)),
                None,
                time,
            )
        )
    for match in _INCREASING.finditer(line):
        out.append(
            Mention(row, "grow", None, float(match.group(1)), float(match.group(2)), None, time)
        )
    if _AT_MINIMUM.search(line):
        out.append(Mention(row, "minimum", None, None, None, None, time))
    return out


def _signature(m: Mention | Event) -> tuple:
    return (m.kind, m.attempted, m.reduced, m.hysteresis)


def place(mentions: list[Mention], anchors: list[Anchor]) -> list[Event]:
    """Group mentions into events and give every event a step (module doc)."""
    anchors = sorted(anchors, key=lambda a: a.row)
    explicit, stepless = _named_by_iteration(mentions)
    groups = _fold_rank_copies(stepless, [a.row for a in anchors])
    # Rules 2 and 3.
    events = list(explicit.values())
    last_in_interval: dict[int, tuple[int, int]] = {}  # interval -> (order, last step)
    for where, group in groups:
        prev = anchors[where - 1] if where > 0 else None
        nxt = anchors[where] if where < len(anchors) else None
        twin = _twin(explicit.values(), group, prev, nxt)
        if twin is not None:
            twin.rows.extend(group.rows)
            continue
        order, last = last_in_interval.get(where, (0, -1))
        order += 1
        step, how = _inferred_step(group, prev, nxt, order, last)
        last_in_interval[where] = (order, max(step, last))
        group.step, group.placed_by = step, how
        events.append(group)
    events.sort(key=lambda e: (e.step, e.rows[0]))
    return events


def _named_by_iteration(mentions: list[Mention]) -> tuple[dict[tuple, Event], list[Mention]]:
    """Rule 1: the events named by an iteration number (keyed by step and scales), and
    the mentions that name no step."""
    explicit: dict[tuple, Event] = {}
    bare: list[tuple[int, Mention]] = []  # `Grad overflow on iteration N` without its scales
    stepless: list[Mention] = []
    for m in mentions:
        if m.step is None:
            stepless.append(m)
        elif m.attempted is None:
            bare.append((m.step, m))
        else:
            key = (m.step, *_signature(m))
            event = explicit.get(key)
            if event is None:
                event = explicit[key] = Event(
                    m.step,
                    m.kind,
                    m.attempted,
                    m.reduced,
                    m.hysteresis,
                    m.placed_by,
                    time=m.time,
                )
            event.rows.append(m.row)
    _add_bare(explicit, bare)
    return explicit, stepless


def _add_bare(explicit: dict[tuple, Event], bare: list[tuple[int, Mention]]) -> None:
    """A bare `Grad overflow on iteration N` is the overflow its step already has, or one."""
    by_step: dict[int, list[Event]] = {}
    for event in explicit.values():
        by_step.setdefault(event.step, []).append(event)
    for step, m in bare:
        hits = [e for e in by_step.get(step, []) if e.kind == "overflow"]
        if hits:
            hits[0].rows.append(m.row)
        else:
            event = Event(
                step, "overflow", None, None, False, "iteration number", [m.row], time=m.time
            )
            by_step.setdefault(step, []).append(event)
            explicit[(step, "overflow", None, None, False)] = event


def _fold_rank_copies(stepless: list[Mention], anchor_rows: list[int]) -> list[tuple[int, Event]]:
    """Rank copies of step-less messages become one group each: (interval index, event),
    the interval being the index of the next anchor."""
    groups: list[tuple[int, Event]] = []
    for m in stepless:
        where = bisect.bisect_left(anchor_rows, m.row)
        group = _copied(m, where, groups)
        if group is not None:
            group.rows.append(m.row)
        else:
            group = Event(
                -1, m.kind, m.attempted, m.reduced, m.hysteresis, "", [m.row], time=m.time
            )
            groups.append((where, group))
        if m.rank is not None:
            group.ranks.add(m.rank)
    return groups


def _copied(m: Mention, where: int, groups: list[tuple[int, Event]]) -> Event | None:
    """The recent group `m` is a rank copy of: same interval and scales, another rank, the
    same burst of time."""
    for where_g, group in reversed(groups[-64:]):
        if where_g != where or _signature(group) != _signature(m):
            continue
        if m.rank is not None and m.rank in group.ranks:
            continue  # the same rank again: a second event
        if (
            m.time is not None
            and group.time is not None
            and abs(m.time - group.time) > SAME_BURST_S
        ):
            continue
        return group
    return None


def _twin(
    explicit: Iterable[Event], group: Event, prev: Anchor | None, nxt: Anchor | None
) -> Event | None:
    """Rule 2: the event placed by an iteration number that `group` repeats, nearest first."""
    lo_row = prev.row if prev else 0
    hi_row = nxt.row if nxt else 1 << 62
    twins = [
        e
        for e in explicit
        if lo_row < e.rows[0] < hi_row
        and _signature(e) == _signature(group)
        and (e.time is None or group.time is None or abs(e.time - group.time) <= TWIN_WINDOW_S)
    ]
    return min(twins, key=lambda e: abs(e.rows[0] - group.rows[0]), default=None)


def _inferred_step(
    group: Event, prev: Anchor | None, nxt: Anchor | None, order: int, last: int
) -> tuple[int, str]:
    """Rule 3: the step of the `order`-th event between two anchors, and how it was found;
    `last` is the latest step given in that interval so far."""
    if prev is None:
        if nxt is None:
            return order, f"{_BY_ORDER} in the file, numbered 1, 2, 3, ... (no line carries a step)"
        return min(nxt.step, order), (
            f"{_BY_ORDER} before the first step line, numbered 1, 2, 3, ... up to that line's step"
        )
    if nxt is None:
        return prev.step + order, f"{_BY_ORDER} after the last step line, numbered on from its step"
    if nxt.step - prev.step <= 1:
        return nxt.step, "the step line that follows"
    if (
        prev.time is not None
        and nxt.time is not None
        and group.time is not None
        and nxt.time > prev.time
    ):
        frac = (group.time - prev.time) / (nxt.time - prev.time)
        step = prev.step + round(frac * (nxt.step - prev.step))
        step = min(max(step, prev.step + 1), nxt.step)
        if step <= last < nxt.step:
            step = last + 1  # two events cannot share a step of one engine
        return step, "timestamp between the surrounding step lines"
    return nxt.step, "the step line that follows"


def order_numbered(events: list[Event]) -> dict[int, str]:
    """The steps rule 3 numbered by a message's order among the lines (no step line on one
    side of it), with how: numbers, not optimizer steps."""
    return {e.step: e.placed_by for e in events if e.placed_by.startswith(_BY_ORDER)}


def summary(mentions: list[Mention], events: list[Event], iteration_offset: int = 1) -> list[str]:
    """Notes saying how many messages made how many events, and how they were placed
    (`iteration_offset`: what was added to `Grad overflow on iteration N` to make its step)."""
    notes: list[str] = []
    overflow = [e for e in events if e.kind == "overflow"]
    n_msgs = sum(len(e.rows) for e in overflow)
    if overflow:
        hyst = sum(e.hysteresis for e in overflow)
        folded = n_msgs - len(overflow)
        text = (
            f"{len(overflow)} fp16 overflow (skipped-step) "
            f"events read from {n_msgs} DeepSpeed messages"
            + (
                f"; {folded} repeated copies of the same message (one per rank) folded"
                if folded
                else ""
            )
            + (f"; {hyst} of them kept the scale (hysteresis)" if hyst else "")
        )
        notes.append(text)
        how: dict[str, int] = {}
        for e in overflow:
            how[e.placed_by] = how.get(e.placed_by, 0) + 1
        if named := how.get("iteration number"):
            place = "N" if iteration_offset == 0 else f"N{iteration_offset:+d}"
            notes.append(
                f"{named} overflow event(s) placed by `Grad overflow on iteration N`, which counts "
                f"from 0 while the step lines count from 1: iteration N is placed at step {place}"
            )
        if set(how) != {"iteration number"}:
            parts = ", ".join(f"{n} by {k}" for k, n in sorted(how.items(), key=lambda kv: -kv[1]))
            notes.append(f"overflow messages carry no step; steps inferred: {parts}")
    floor = [e for e in events if e.kind == "minimum"]
    if floor:
        notes.append(
            f"the loss scaler said its scale was already at its minimum at step {floor[0].step} "
            "(`cannot decrease scale anymore`)"
        )
    grow = [e for e in events if e.kind == "grow"]
    if grow:
        notes.append(
            f"{len(grow)} loss-scale increases read from {sum(len(e.rows) for e in grow)} messages"
        )
    return notes


def frame_rows(events: list[Event], scale_key: str, overflow_key: str = "overflow") -> list[dict]:
    """One raw row per message line: every copy is a row used, merged by step later.

    `overflow` on each row is the number of overflow events at that step (1
    normally, 2 when two engines overflowed in the same step), and the scale
    is the one in force after the step's last event, so that merging the rows
    of one step gives the same answer whichever row comes last. The scale the
    step's first event started from (the attempted scale of an overflow, the old
    scale of an increase) is kept beside it as `loss_scale_attempted`: the
    first message of a log is the only place its highest scale is said.
    """
    count: dict[int, int] = {}
    scale: dict[int, float | None] = {}
    attempted: dict[int, float] = {}
    for e in events:  # sorted by (step, first row)
        if e.kind == "overflow":
            count[e.step] = count.get(e.step, 0) + 1
        if e.scale_after is not None:
            scale[e.step] = e.scale_after
        if e.attempted is not None:
            attempted.setdefault(e.step, e.attempted)
    rows = []
    for e in events:
        for row in e.rows:
            rows.append(
                {
                    "_row": row,
                    "_step": e.step,
                    overflow_key: float(count[e.step]) if e.kind == "overflow" else None,
                    scale_key: scale.get(e.step),
                    ATTEMPTED_KEY: attempted.get(e.step),
                    MINIMUM_KEY: 1.0 if e.kind == "minimum" else None,
                }
            )
    return rows
