"""Steps for the DeepSpeed lines that print none (evaluation, reward, throughput), from the
step lines around them (see `deepspeed`)."""

from __future__ import annotations

from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.text import _dsmessages as dsm


def attach(rows: list[dict], anchors: list[dsm.Anchor], source: SourceInfo, *, later: bool) -> None:
    """Give step-less rows a step from the step lines around them.

    `later=False`: the step of the line before (evaluation and reward lines
    are printed after their step). `later=True`: rows printed while the
    steps between two step lines ran (per-micro-batch throughput) are spread
    evenly over (previous step, next step] in the order they were printed.
    """
    import bisect

    rows_of = [a.row for a in anchors]
    by_interval: dict[int, list[dict]] = {}
    for rec in rows:
        at = bisect.bisect_left(rows_of, rec["_row"])
        if not later:
            rec["_step"] = anchors[at - 1].step if at > 0 else 0
        else:
            by_interval.setdefault(at, []).append(rec)
    for at, group in by_interval.items():
        nxt = anchors[at].step if at < len(anchors) else None
        prev = anchors[at - 1].step if at > 0 else None
        if nxt is None:
            base = prev if prev is not None else 0
            for rec in group:
                rec["_step"] = base  # after the last step line: the last step
            continue
        lo = prev if prev is not None and prev < nxt else max(nxt - 1, 0)
        span, m = nxt - lo, len(group)
        for k, rec in enumerate(group, start=1):
            rec["_step"] = lo + max(1, -(-k * span // m))


def make_monotone(rows: list[dict], fixed: list[tuple[int, int]]) -> None:
    """Inferred steps never go backwards against the steps around them.

    `fixed` are (line, step) pairs that are not moved: the step lines and the
    overflow events (all copies of one event keep one step, so the event count
    per step stays right). Estimates made by different rules (order, time)
    could disagree by a step, and `finalize` would read a step going
    backwards as a resumed run: only step lines may show a real restart. So
    each inferred row is clamped between the fixed step before it and the
    fixed step after it.
    """
    import bisect

    fixed = sorted(fixed)
    lines = [f[0] for f in fixed]
    last = None
    for rec in sorted(rows, key=lambda r: r["_row"]):
        at = bisect.bisect_left(lines, rec["_row"])
        before = fixed[at - 1][1] if at > 0 else None
        after = fixed[at][1] if at < len(fixed) else None
        step = rec["_step"]
        if last is not None and last[0] == at:
            step = max(step, last[1])
        if before is not None and (after is None or before <= after):
            step = max(step, before)
        if after is not None and (before is None or before <= after):
            step = min(step, after)
        rec["_step"] = step
        last = (at, step)


def average_throughput(rows: list[dict]) -> None:
    """Per-micro-batch throughput: every row of a step carries that step's mean."""
    sums: dict[int, list[float]] = {}
    for rec in rows:
        acc = sums.setdefault(rec["_step"], [0.0, 0.0, 0])
        if rec["TFLOPs"] is not None and rec["Samples/sec"] is not None:
            acc[0] += rec["TFLOPs"]
            acc[1] += rec["Samples/sec"]
            acc[2] += 1
    for rec in rows:
        total_tflops, total_sps, n = sums[rec["_step"]]
        if n:
            rec["TFLOPs"], rec["Samples/sec"] = total_tflops / n, total_sps / n
