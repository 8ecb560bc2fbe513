"""Warm restarts (healthy) against real LR bugs (issue #34 part 5), for detection_quality.py.

Healthy: cosine with warm restarts (SGDR; period 500, 1,000 or 2,000 steps, constant or
doubling), the loss bumping +2, 5 or 12% of its level after each restart and decaying over
~100 steps, logged every 1 and 10 steps; and step-decay and warmup-stable-decay schedules.
A false alarm is any warning/error `spike`, `lr-jump`, `lr-increasing` or `divergence`
finding, counted per 10^5 logged points.

LR bugs, each in an otherwise healthy run, at 30-80% of it, the loss answering with a bump:
the LR jumps x3 to a level never seen (in a plain cosine run, and off-period inside an SGDR
run), and a scheduler reset half-way down a cosine (at 47-60% of the run the LR, at 40-60%
of its peak, goes back to the peak and the cosine starts over: a rise past the +50% jump
bar; a reset from higher up is under the bar by definition); and in an SGDR run the loss
climbing +10% of its level over the 200 steps after a restart and staying there (recall: a
warning/error `spike` or `divergence` from that restart to half a period on). For the
others, recall is an `lr-jump` finding within one logged point of the bug.
"""

from __future__ import annotations

import time

import numpy as np

RUN_POINTS = 3000
PEAK = 3e-4
HEALTHY_KINDS = ("sgdr", "sgdr-tmult2", "step-decay", "wsd")
BUG_KINDS = ("jump-new-level", "jump-in-sgdr", "reset-mid-cosine", "blowup-after-restart")
BLOWUP_CODES = {"spike", "divergence"}
FALSE_ALARM_CODES = {"spike", "lr-jump", "lr-increasing", "divergence"}


def _loss(steps: np.ndarray, rng: np.random.Generator, sigma: float) -> np.ndarray:
    level = 2.0 + 8.0 * np.exp(-steps / (0.05 * steps[-1]))
    return level * (1 + sigma * rng.standard_normal(steps.size))


def _sgdr_lr(steps: np.ndarray, period: int, t_mult: int) -> tuple[np.ndarray, np.ndarray]:
    """The LR, and each step's offset into its cycle (0 in the first cycle's place)."""
    lengths = [period]
    while sum(lengths) <= steps[-1]:
        lengths.append(lengths[-1] * t_mult)
    starts = np.cumsum([0, *lengths])
    cycle = np.searchsorted(starts, steps, side="right") - 1
    into = steps - starts[cycle]
    lr = 1e-6 + 0.5 * (PEAK - 1e-6) * (1 + np.cos(np.pi * into / np.array(lengths)[cycle]))
    warm = max(100, steps[1] - steps[0])
    return np.where(steps < warm, PEAK * (steps + steps[1]) / warm, lr), np.where(
        cycle > 0, into, -1
    )


def _bumped(loss, into, bump, decay_steps):
    """The loss with +bump (of its level) after each restart, decaying over decay_steps."""
    return loss * (
        1 + np.where(into >= 0, bump * np.exp(-3 * np.maximum(into, 0) / decay_steps), 0)
    )


def healthy_run(kind, interval, period, bump, rng) -> dict[str, np.ndarray]:
    steps = np.arange(RUN_POINTS) * interval
    loss = _loss(steps, rng, 0.01)
    if kind.startswith("sgdr"):
        lr, into = _sgdr_lr(steps, period, 2 if kind == "sgdr-tmult2" else 1)
        return {"step": steps, "loss": _bumped(loss, into, bump, 100), "lr": lr}
    span = steps[-1]
    if kind == "step-decay":
        lr = PEAK * 0.1 ** np.floor(3 * steps / (span + 1))
    else:  # wsd: 2% warmup, stable, linear cooldown to 0 over the last 20%
        lr = np.minimum(PEAK * (steps + interval) / (0.02 * span), PEAK)
        lr = np.where(steps > 0.8 * span, PEAK * (span - steps) / (0.2 * span), lr)
    return {"step": steps, "loss": loss, "lr": lr}


def bug_run(kind, interval, period, rng) -> tuple[dict[str, np.ndarray], int]:
    """A run with one LR bug; its row."""
    steps = np.arange(RUN_POINTS) * interval
    loss = _loss(steps, rng, 0.01)
    at = int(rng.integers(int(0.3 * RUN_POINTS), int(0.8 * RUN_POINTS)))
    if kind == "blowup-after-restart":  # the loss climbs after a restart and stays up
        lr, into = _sgdr_lr(steps, period, 1)
        loss = _bumped(loss, into, 0.05, 100)
        restarts = np.flatnonzero(into == 0)
        inside = restarts[(restarts >= 0.3 * RUN_POINTS) & (restarts <= 0.8 * RUN_POINTS)]
        at = int(rng.choice(inside)) if inside.size else int(restarts[-1])
        after = steps[at:] - steps[at]
        loss[at:] *= 1 + 0.1 * np.minimum(after / 200, 1)
        return {"step": steps, "loss": loss, "lr": lr}, at
    if kind == "jump-in-sgdr":
        lr, into = _sgdr_lr(steps, period, 1)
        loss = _bumped(loss, into, 0.05, 100)
        while into[at] < 0.2 * period or into[at] > 0.8 * period:  # off the period
            at += 1
    else:
        lr, _ = _sgdr_lr(steps, int(steps[-1]) + 1, 1)  # one cosine over the whole run
        lr = PEAK * (0.1 + 0.9 * (lr / PEAK))
    if kind == "reset-mid-cosine":  # half-way down: the LR at 40-60% of its peak, so the
        # reset rises past the +50% jump bar
        at = int(rng.integers(int(0.47 * RUN_POINTS), int(0.6 * RUN_POINTS)))
        again = steps[at:] - steps[at]
        lr[at:] = PEAK * (0.1 + 0.45 * (1 + np.cos(np.pi * again / (steps[-1] + 1))))
    else:
        lr[at:] *= 3.0
    loss[at:] *= 1 + 0.05 * np.exp(-(steps[at:] - steps[at]) / 200)
    return {"step": steps, "loss": loss, "lr": lr}, at


def run_schedule_cases(seed: int, quick: bool) -> dict:
    import polars as pl

    from stabilitycli import analyze
    from stabilitycli.core.model import Severity

    rng = np.random.default_rng(seed)
    runs = 2 if quick else 6
    started = time.perf_counter()
    healthy: dict[str, dict] = {}
    for kind in HEALTHY_KINDS:
        for interval in (1, 10):
            periods = (500, 1000, 2000) if kind.startswith("sgdr") else (0,)
            bumps = (0.02, 0.05, 0.12) if kind.startswith("sgdr") else (0.0,)
            cell = healthy.setdefault(
                f"{kind}|{interval}", {"points": 0, "alarms": 0, "not_healthy": 0, "runs": 0}
            )
            for period in periods:
                for bump in bumps:
                    for _ in range(runs):
                        frame = pl.DataFrame(healthy_run(kind, interval, period, bump, rng))
                        result = analyze(frame)
                        cell["points"] += frame.height
                        cell["runs"] += 1
                        cell["alarms"] += sum(
                            f.code in FALSE_ALARM_CODES and f.severity >= Severity.WARNING
                            for f in result.findings
                        )
                        cell["not_healthy"] += result.verdict.code != "healthy"
    bugs: dict[str, dict] = {}
    for kind in BUG_KINDS:
        for interval in (1, 10):
            cell = bugs.setdefault(f"{kind}|{interval}", {"runs": 0, "found": 0, "not_healthy": 0})
            for period in (500, 1000):
                for _ in range(runs * 3):
                    columns, at = bug_run(kind, interval, period, rng)
                    result = analyze(pl.DataFrame(columns))
                    codes = BLOWUP_CODES if kind == "blowup-after-restart" else {"lr-jump"}
                    reach = period // 2 if kind == "blowup-after-restart" else interval
                    near = [
                        f
                        for f in result.findings
                        if f.code in codes
                        and f.severity >= Severity.WARNING
                        and -interval <= (f.step or 0) - columns["step"][at] <= reach
                    ]
                    cell["runs"] += 1
                    cell["found"] += bool(near)
                    cell["not_healthy"] += result.verdict.code != "healthy"
    return {"healthy": healthy, "bugs": bugs, "wall_s": time.perf_counter() - started}


def schedule_md(summary: dict) -> list[str]:
    lines = [
        "## Planned LR schedules against real LR bugs (issue #34)",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        "| healthy schedule | logged every | runs | logged points | false alarms "
        "(per 10^5 points) | verdict not healthy |",
        "|---|---|---|---|---|---|",
    ]
    for key, c in summary["healthy"].items():
        kind, interval = key.split("|")
        rate = 1e5 * c["alarms"] / c["points"] if c["points"] else 0.0
        lines.append(
            f"| {kind} | {interval} | {c['runs']} | {c['points']:,} | {c['alarms']} ({rate:.2f}) "
            f"| {c['not_healthy']} |"
        )
    lines += [
        "",
        "| LR bug | logged every | runs | recall | verdict not healthy |",
        "|---|---|---|---|---|",
    ]
    for key, c in summary["bugs"].items():
        kind, interval = key.split("|")
        lines.append(
            f"| {kind} | {interval} | {c['runs']} | {100 * c['found'] / c['runs']:.1f}% "
            f"| {c['not_healthy']} |"
        )
    lines += ["", f"Wall time of this section: {summary['wall_s']:.0f} s.", ""]
    return lines
