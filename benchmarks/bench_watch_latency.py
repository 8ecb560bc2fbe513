"""How soon `stab watch` alerts an event, against the post-hoc judgment of the same run.

    python benchmarks/bench_watch_latency.py [--runs 4] [--points 1500] [--seed 38] [--tail]

Event runs of the detection benchmark (benchmarks/_dq_synth.py: a one-point spike, a level
shift, a NaN point, a NaN tail, a loss-scale collapse, a rank shifted, a rank gone NaN) and
healthy runs of the same curves are written as JSONL logs (one file, or one file a rank).
`stab analyze` on the whole log is the post-hoc judgment: an event is detected when it
finds it as detection_quality.py scores it, and its onset is that finding's step. The log
is then replayed into a growing file through the watch loop, with a fake clock whose sleep
appends the next chunk and whose CPU clock stands still (every poll with new records is
judged: what is measured is the points a rule needs, not the CPU throttle; with `--tail`,
only the first poll is judged whole and every later one by the tail judgment alone, until
the final judgment: what a long run gets between its throttled judgments). Chunks are
`--coarse` points, and one point from 5 points before the post-hoc onset to `--fine` points
after it, so that the alert's latency is read to the point.

Reported per kind, over the detected events:
- same step: the share whose first live alert carries the post-hoc onset step;
- p50/p95 points: logged points after the onset when the first alert came (its logged step);
- settled (spikes): points after the onset when the pending spike settled;
- early: alerts of the event's family before its match window (before the event);
- on the healthy runs: live alerts (warning and above) per run, withdrawn ones among them,
  against the post-hoc findings per run on the final log.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _dq_score import CODE_FAMILY, WARNING, expected, match_window, score  # noqa: E402
from _dq_synth import Case, rank_run, single_run  # noqa: E402

from stabilitycli.core.config import Thresholds  # noqa: E402
from stabilitycli.ingest.options import ReadOptions  # noqa: E402
from stabilitycli.pipeline import run as pipeline  # noqa: E402
from stabilitycli.watch.loop import Clock, WatchSettings  # noqa: E402
from stabilitycli.watch.session import WatchRequest, run_watch  # noqa: E402

SIGMA = 0.02  # noise std as a fraction of the loss level
KINDS = (  # (kind, h as a fraction of the level, ranks)
    ("spike", 1.0, 0),  # the loss doubles for one point (a +20% point is a blip, info)
    ("bump10", 0.5, 0),
    ("shift", 0.3, 0),
    ("nan-point", math.nan, 0),
    ("nan-tail", math.nan, 0),
    ("scale-collapse", math.nan, 0),
    ("rank-shift", 0.5, 16),
    ("rank-nonfinite", math.nan, 16),
    ("healthy", math.nan, 0),
    ("healthy-ranks", math.nan, 16),
)
LEAD_POINTS = 5  # one point a poll from this many points before the post-hoc onset


def write_log(frame, folder: Path) -> tuple[Path, list[list[str]], np.ndarray]:
    """The log's path, and its lines per logged step (a rank run: one file a rank)."""
    steps = np.unique(frame["step"].to_numpy())
    ranked = "rank" in frame.columns
    target = folder / ("ranks" if ranked else "metrics.jsonl")
    rows = frame.to_dicts()
    by_step: dict[int, list[tuple[Path, str]]] = {int(s): [] for s in steps}
    for row in rows:
        path = target / f"rank_{row['rank']:02d}.jsonl" if ranked else target
        # json writes NaN and Infinity as the trainers' json.dumps does
        by_step[int(row["step"])].append((path, json.dumps(row)))
    if ranked:
        target.mkdir()
    return target, [by_step[int(s)] for s in steps], steps


def chunk_bounds(n: int, onset_index: int | None, coarse: int, fine: int) -> list[int]:
    """Point indices where each poll's chunk ends: one point a poll around the onset."""
    lo = hi = n
    if onset_index is not None:
        lo, hi = max(0, onset_index - LEAD_POINTS), min(n, onset_index + fine)
    bounds = list(range(coarse, lo, coarse)) + list(range(lo, hi)) + list(range(hi, n, coarse))
    return [*sorted({b for b in bounds if 0 < b < n}), n]


def replay(
    lines: list[list[tuple[Path, str]]], bounds: list[int], target: Path, ranked: bool, tail: bool
):
    """Watch the log written chunk by chunk; (alerts, final analysis)."""
    writes, start = [], 0
    for end in bounds:
        chunk = [pair for step_lines in lines[start:end] for pair in step_lines]
        writes.append(chunk)
        start = end
    t = [0.0]

    def append(chunk) -> None:
        grouped: dict[Path, list[str]] = {}
        for path, line in chunk:
            grouped.setdefault(path, []).append(line)
        for path, text in grouped.items():
            with open(path, "a") as sink:
                sink.write("\n".join(text) + "\n")

    append(writes.pop(0))  # the job has logged its first chunk when the watch starts

    def sleep(seconds: float) -> None:
        t[0] += seconds
        if writes:
            append(writes.pop(0))

    spent = itertools.count()  # --tail: a judgment costs 1 s, so only the first is whole
    cpu = (lambda: float(next(spent))) if tail else (lambda: 0.0)
    clock = Clock(now=lambda: t[0], sleep=sleep, cpu=cpu)
    settings = WatchSettings(interval_s=1.0, idle_s=2.0, cpu_share=1e-9 if tail else 1.0)
    request = WatchRequest(str(target), ReadOptions(), Thresholds(), settings)
    alerts: list = []
    final = run_watch(request, alerts.append, lambda _line: None, clock)
    return alerts, final


def measure(case: Case, frame, truth, folder: Path, coarse: int, fine: int, tail: bool) -> dict:
    target, lines, steps = write_log(frame, folder)
    ranked = target.is_dir()
    complete = folder / "complete"
    complete.mkdir()
    whole, _, _ = write_log(frame, complete)
    for chunk in lines:  # the whole log first: its post-hoc judgment places the fine window
        for path, line in chunk:
            path = whole / path.relative_to(target) if ranked else whole
            with open(path, "a") as sink:
                sink.write(line + "\n")
    posthoc = pipeline.analyze(str(whole), Thresholds())
    if truth is None:
        bounds = chunk_bounds(len(steps), None, coarse, fine)
        alerts, _ = replay(lines, bounds, target, ranked, tail)
        active = [f for f in posthoc.findings if int(f.severity) >= WARNING]
        raised = [a for a in alerts if a.type == "alert" and int(a.severity) >= WARNING]
        withdrawn = [a for a in alerts if a.status == "withdrawn"]
        return {"healthy": True, "live": len(raised), "withdrawn": len(withdrawn),
                "posthoc": len(active), "codes": [_said(a) for a in raised]}  # fmt: skip
    record = score(case, truth, posthoc)
    if not record["d"]:
        return {"healthy": False, "detected": False}
    family, codes = expected(case.kind)
    lo, hi = match_window(case.kind, truth, case.interval)
    onset = truth.onset + record["e"]
    onset_index = int(np.searchsorted(steps, onset))
    bounds = chunk_bounds(len(steps), onset_index, coarse, fine)
    alerts, _ = replay(lines, bounds, target, ranked, tail)

    def ours(a) -> bool:
        return (a.code in codes and a.step is not None and lo <= a.step <= hi
                and (truth.rank is None or a.rank == truth.rank))  # fmt: skip

    def after(step: int) -> int:
        return int(np.searchsorted(steps, step, side="right")) - onset_index - 1

    first = next((a for a in alerts if a.type == "alert" and ours(a)), None)
    settled = next((a for a in alerts if ours(a) and a.status in ("recovered", "persistent")),
                   None)  # fmt: skip

    def before(f) -> bool:  # a finding or alert of the event's family, before the event
        return (int(f.severity) >= WARNING and CODE_FAMILY.get(f.code) == family
                and f.step is not None and f.step < lo)  # fmt: skip

    early = [a for a in alerts if a.type == "alert" and before(a)]
    return {
        "healthy": False,
        "detected": True,
        "live": first is not None,
        "same": first is not None and first.step == onset,
        "off": None if first is None else first.step - onset,
        "points": None if first is None else after(first.logged_step),
        "settled": None if settled is None else after(settled.logged_step),
        "early": len(early),
        "early_posthoc": len([f for f in posthoc.findings if before(f)]),
        "early_codes": [_said(a) for a in alerts if a.key in {e.key for e in early}],
    }


def _said(alert) -> str:
    """code@step/logged step:status, for the progress lines."""
    return f"{alert.code}@{alert.step}/{alert.logged_step}:{alert.status}"


def _pct(values: list[int], q: float) -> str:
    return f"{np.percentile(values, q):.0f}" if values else "—"


def table(results: dict[str, list[dict]]) -> str:
    out = [
        "| kind | runs | detected post hoc | alerted live | same step | p50 / p95 points after "
        "onset | spike settled p50 / p95 | early alerts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, records in results.items():
        if records and records[0]["healthy"]:
            continue
        found = [r for r in records if r["detected"]]
        live = [r for r in found if r["live"]]
        same = sum(r["same"] for r in live)
        points = [r["points"] for r in live]
        settled = [r["settled"] for r in found if r.get("settled") is not None]
        share = f"{same}/{len(found)} ({100 * same / len(found):.0f}%)" if found else "—"
        out.append(
            f"| {kind} | {len(records)} | {len(found)} | {len(live)} | {share} | "
            f"{_pct(points, 50)} / {_pct(points, 95)} | "
            f"{_pct(settled, 50) + ' / ' + _pct(settled, 95) if settled else '—'} | "
            f"{sum(r['early'] for r in found)} |"
        )
    out += ["", "| healthy runs | runs | live alerts / run | withdrawn | post-hoc findings / run |",
            "|---|---|---|---|---|"]  # fmt: skip
    for kind, records in results.items():
        if records and records[0]["healthy"]:
            n = len(records)
            live = sum(r["live"] for r in records)
            gone = sum(r["withdrawn"] for r in records)
            posthoc = sum(r["posthoc"] for r in records)
            out.append(f"| {kind} | {n} | {live / n:.2f} | {gone} | {posthoc / n:.2f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per kind")
    parser.add_argument("--points", type=int, default=1500, help="logged points per run")
    parser.add_argument("--coarse", type=int, default=50, help="points a poll away from onsets")
    parser.add_argument("--fine", type=int, default=150, help="one-point polls after an onset")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--kinds", default=",".join(k for k, _, _ in KINDS))
    parser.add_argument(
        "--tail",
        action="store_true",
        help="alert from the tail judgment alone: the first whole-run judgment, then only "
        "tails until the final one (what a long run gets between throttled judgments)",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    wanted = args.kinds.split(",")
    results: dict[str, list[dict]] = {}
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, h, ranks in KINDS:
            if kind not in wanted:
                continue
            case = Case(kind, "-", h, 0.05 if ranks else SIGMA, 1, "gamma", ranks)
            build = rank_run if ranks else single_run
            for i in range(args.runs):
                frame, truth = build(case, args.points, rng, None)
                folder = Path(tmp) / f"{kind}-{i}"
                folder.mkdir()
                record = measure(case, frame, truth, folder, args.coarse, args.fine, args.tail)
                results.setdefault(kind, []).append(record)
                print(kind, i, record, f"{time.monotonic() - began:.0f} s", file=sys.stderr)
    print(table(results))


if __name__ == "__main__":
    main()
