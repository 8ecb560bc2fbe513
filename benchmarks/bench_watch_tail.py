"""How soon `stab watch` alerts an event on a LONG run, and what it costs, with and without the
bounded-tail judgment.

    python benchmarks/bench_watch_tail.py [--cases 64x36000,1x200000] [--polls 60]

A run of R ranks (one JSON line a step and rank) has already logged N steps when the watch
starts; it then logs 10 steps a second (20 steps a 2 s poll) for `--polls` polls. From
`--event-poll` polls in, the loss of every rank is 4 higher for good (a persistent spike, as
bench_watch.py's writer makes it), or, with `--event nan`, rank 3 logs NaN from then on.
The clock is simulated (its sleep appends the next 2 s of lines) and the CPU clock is the
process's own, so the `--cpu-share` throttle acts as in a real watch; the CPU share is
the CPU the watch spent (polls, judgments; not the writing) over the simulated wall time.

Reported per case and mode (`tail`: the tail judgment between whole-run judgments, as
`stab watch` runs; `whole only`: the whole-run judgment alone, as before it):
- the polls after the poll whose lines held the decisive point when the event was first
  alerted (0: at that poll, within one poll interval), and when a hook-worthy settled alert
  came (the persistent spike: onset + 50 steps);
- the watch's CPU share over the whole watch, and after its first poll (the backlog read
  and the first whole-run judgment of the N steps are a one-off cost);
- the whole-run and tail judgments made, with their mean CPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stabilitycli.core.config import Thresholds  # noqa: E402
from stabilitycli.ingest.options import ReadOptions  # noqa: E402
from stabilitycli.watch.loop import Clock, WatchSettings, WatchStats  # noqa: E402
from stabilitycli.watch.session import WatchRequest, run_watch  # noqa: E402

RATE = 10  # steps a second
INTERVAL = 2.0


class Writer:
    """The run's files, and the lines of steps [a, b) appended to them."""

    def __init__(self, folder: Path, ranks: int, event_step: int, event: str):
        self.ranks, self.event_step, self.event = ranks, event_step, event
        self.rng = np.random.default_rng(0)
        self.target = folder / ("ranks" if ranks > 1 else "metrics.jsonl")
        if ranks > 1:
            self.target.mkdir()
        self.paths = [
            self.target / f"rank_{r:02d}.jsonl" if ranks > 1 else self.target for r in range(ranks)
        ]

    def write(self, a: int, b: int) -> None:
        steps = np.arange(a, b)
        loss = (
            2.0
            + 1.5 * np.exp(-steps / 4000)[:, None]
            + self.rng.normal(0, 0.01, (b - a, self.ranks))
        )
        after = steps >= self.event_step
        if self.event == "spike":
            loss[after] += 4.0
        else:
            loss[after, min(3, self.ranks - 1)] = np.nan
        for r, path in enumerate(self.paths):
            rank = f', "rank": {r}' if self.ranks > 1 else ""
            text = "".join(
                f'{{"step": {s}{rank}, "loss": {v!r}, "lr": 0.0003}}\n'.replace("nan", "NaN")
                for s, v in zip(steps.tolist(), loss[:, r].tolist(), strict=True)
            )
            with open(path, "a") as sink:
                sink.write(text)


def measure(ranks: int, logged: int, polls: int, event_poll: int, event: str, tail: bool):
    per_poll = int(RATE * INTERVAL)
    event_step = logged + event_poll * per_poll
    with tempfile.TemporaryDirectory() as tmp:
        writer = Writer(Path(tmp), ranks, event_step, event)
        writer.write(0, logged)
        state = {"poll": 0, "next": logged, "writing_cpu": 0.0, "cpu_end": None, "t": 0.0}

        def sleep(seconds: float) -> None:
            if state["poll"] == 0:  # the backlog read and its first judgment are behind
                state["steady"] = (time.process_time(), state["t"], state["writing_cpu"])
            state["t"] += seconds
            state["poll"] += 1
            if state["poll"] <= polls:
                began = time.process_time()
                writer.write(state["next"], state["next"] + per_poll)
                state["next"] += per_poll
                state["writing_cpu"] += time.process_time() - began
            elif state["cpu_end"] is None:
                state["cpu_end"] = (time.process_time(), state["t"])

        alerts: list[tuple[int, object]] = []
        clock = Clock(now=lambda: state["t"], sleep=sleep, cpu=time.process_time)
        settings = WatchSettings(interval_s=INTERVAL, idle_s=3 * INTERVAL, tail=tail)
        request = WatchRequest(str(writer.target), ReadOptions(), Thresholds(), settings)
        stats = WatchStats()
        began = time.process_time()
        run_watch(request, lambda a: alerts.append((state["poll"], a)), lambda _l: None, clock,
                  stats=stats)  # fmt: skip
    cpu_end, wall = state["cpu_end"]
    cpu = cpu_end - began - state["writing_cpu"]
    cpu0, wall0, writing0 = state["steady"]
    steady = (cpu_end - cpu0 - (state["writing_cpu"] - writing0)) / (wall - wall0)
    # the poll that wrote the event's step is poll `event_poll + 1` (poll 0 read the backlog)
    written = event_poll + 1
    code = "spike" if event == "spike" else "rank-nonfinite"
    first = next((p for p, a in alerts if a.code == code and a.type == "alert"), None)
    settled = next(
        (p for p, a in alerts if a.code == code and not a.provisional and a.status != "withdrawn"),
        None,
    )
    settle_written = written + (50 // per_poll if event == "spike" else 0)
    s = stats
    return {
        "first": None if first is None else first - written,
        "settled": None if settled is None else settled - settle_written,
        "cpu_share": cpu / wall,
        "steady_share": steady,
        "whole": s.judgments,
        "tails": s.tail_judgments,
        "whole_cpu": (s.judge_cpu_s - s.tail_cpu_s) / max(s.judgments, 1),
        "tail_cpu": s.tail_cpu_s / max(s.tail_judgments, 1),
        "alerts": [f"{a.code}@{a.step}:{a.status}@poll{p}" for p, a in alerts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="64x36000,1x200000", help="RANKSxSTEPS,...")
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--event-poll", type=int, default=30)
    parser.add_argument("--event", default="spike", choices=("spike", "nan"))
    parser.add_argument("--modes", default="tail,whole")
    args = parser.parse_args()
    print(
        "| ranks | steps logged before | mode | first alert, polls after | settled alert, polls "
        "after | CPU share (after the first judgment) | whole-run judgments (mean CPU s) "
        "| tail judgments (mean CPU s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        ranks, logged = map(int, case.split("x"))
        for mode in args.modes.split(","):
            r = measure(ranks, logged, args.polls, args.event_poll, args.event, mode == "tail")
            print(r["alerts"], file=sys.stderr)
            print(
                f"| {ranks} | {logged:,} | {'tail' if mode == 'tail' else 'whole only'} | "
                f"{r['first']} | {r['settled']} | {100 * r['cpu_share']:.1f}% "
                f"({100 * r['steady_share']:.1f}%) | "
                f"{r['whole']} ({r['whole_cpu']:.2f}) | {r['tails']} ({r['tail_cpu']:.3f}) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
