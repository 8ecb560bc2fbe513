"""The LM families' grid, and one cell of it run and scored in a worker (issue #36).

Cells are dicts like the main grid's tasks (`key`, `cost`, `runs`, `points`, `mode`) with
`lm` set, so benchmarks/detection_quality.py runs both grids in one pool. Event runs are
scored by `_dq_score.score` (the main grid's match windows and onset errors), healthy runs
by every warning/error finding: its code, where in the run it falls, and whether the noise
itself made a material event there (`_dq_lm_truth`).
"""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
from _dq_lm_synth import LM_EVENT_PLACES, event_lm, healthy_lm, rank_lm
from _dq_lm_truth import below_bar, excused, noise_events, one_point_below_bar, place_of
from _dq_score import WARNING, score, seed_for
from _dq_synth import Case

LM_INTERVALS = (1, 10, 100)
LM_SIGMAS = (0.01, 0.03)
LM_FAMILY = "lm-ar1"
EVENT_POINTS = 4000
HEALTHY_POINTS = 20_000
RANK_POINTS = 4000
RANK_COHORT = 8
TARGET_SHAPES = ("cosine", "linear", "wsd", "epochs")  # the healthy target
OTHER_SHAPES = ("curriculum", "hump")
DRIFT_SIGMAS = (3.0, 4.0, 5.0)  # a drifting rank's rise by its last step, in its spread
DRIFT_SPREADS = (0.05, 0.15)
RANK_SHIFTS = (0.5, 1.0)  # O3's rank level shifts, in a 15% spread
# kind -> sizes as (label, h, in noise sigmas?)
LM_SIZES = {
    "spike": (("+60%", 0.6, False), ("+100%", 1.0, False)),
    "spike+grad": (("5σ", 5, True), ("8σ", 8, True)),
    "bump3pt": (("5σ", 5, True), ("8σ", 8, True)),
    "bump10pt": (("5σ", 5, True), ("8σ", 8, True)),
    "shift": (("5σ", 5, True), ("8σ", 8, True)),
    "ramp": (("+25%", 0.25, False), ("+50%", 0.5, False)),
    "nan-tail": (("—", math.nan, False),),
}
MULTI = ("bump3pt", "bump10pt", "shift")  # judged by the bar in the logged data
ONE_POINT = ("spike", "spike+grad")  # so are these, after an epoch drop
BASE_KIND = {"bump3pt": "bump3", "bump10pt": "bump10"}  # the main grid's match window
EXAMPLES_PER_RUN = 3

LM_PROFILES = {
    "full": {"runs": 20, "healthy_runs": 10, "rank_runs": 20, "healthy_rank_runs": 5},
    "quick": {"runs": 2, "healthy_runs": 2, "rank_runs": 3, "healthy_rank_runs": 1},
}


def lm_tasks(profile: dict, seed: int) -> list[dict]:
    tasks = []

    def add(mode: str, kind: str, size: str, h: float, place: str, sigma, interval, runs, points):
        ranks = RANK_COHORT if mode.startswith("lm-rank") else 0
        key = f"{mode}|{kind}|{size}|{place}|{sigma}|{interval}|{points}"
        case = Case(kind, size, h, sigma, interval, LM_FAMILY, ranks)
        tasks.append(
            {
                "lm": True,
                "key": key,
                "case": case.__dict__,
                "place": place,
                "runs": runs,
                "points": points,
                "mode": mode,
                "seed": seed,
                "cost": runs * (points * max(1, ranks) + 3000),
            }
        )

    for interval in LM_INTERVALS:
        for sigma in LM_SIGMAS:
            for kind, places in LM_EVENT_PLACES.items():
                for label, value, in_sigmas in LM_SIZES[kind]:
                    h = value * sigma if in_sigmas else value
                    for place in places:
                        add(
                            "lm-event",
                            kind,
                            label,
                            h,
                            place,
                            sigma,
                            interval,
                            profile["runs"],
                            EVENT_POINTS,
                        )
            for shape in TARGET_SHAPES + OTHER_SHAPES:
                add(
                    "lm-healthy",
                    "healthy",
                    "—",
                    math.nan,
                    shape,
                    sigma,
                    interval,
                    profile["healthy_runs"],
                    HEALTHY_POINTS,
                )
        for spread in DRIFT_SPREADS:
            for d in DRIFT_SIGMAS:
                add(
                    "lm-rank",
                    "rank-drift",
                    f"{d:g}σ",
                    d,
                    "drift",
                    spread,
                    interval,
                    profile["rank_runs"],
                    RANK_POINTS,
                )
        for h in RANK_SHIFTS:
            add(
                "lm-rank",
                "rank-shift",
                f"+{100 * h:g}%",
                h,
                "shift",
                0.15,
                interval,
                profile["rank_runs"],
                RANK_POINTS,
            )
        add(
            "lm-rank-healthy",
            "healthy-ranks",
            "—",
            math.nan,
            "cohort",
            0.15,
            interval,
            profile["healthy_rank_runs"],
            RANK_POINTS,
        )
    return tasks


def _active(findings) -> list:
    return [f for f in findings if int(f.severity) >= WARNING]


def healthy_lm_record(run, result, sigma: float) -> dict:
    steps = run.frame["step"].to_numpy()
    interval = int(steps[1] - steps[0])
    spans = noise_events(run.noise, sigma)
    raw: Counter = Counter()
    net: Counter = Counter()
    where: Counter = Counter()
    code_where: Counter = Counter()
    last5 = last5_raw = 0
    examples = []
    for f in _active(result.findings):
        place = place_of(f.step, run.shape, int(steps[-1]), interval)
        raw[f.code] += 1
        last5_raw += place == "last 5%"
        if excused(f.step, f.code, spans, steps, interval):
            continue
        net[f.code] += 1
        where[place] += 1
        code_where[f"{f.code}@{place}"] += 1
        last5 += place == "last 5%"
        if len(examples) < EXAMPLES_PER_RUN:
            examples.append([f.code, f.step, place, f.message[:200]])
    return {
        "points": int(steps.size),
        "v": result.verdict.code,
        "shape": run.shape.kind,
        "phi": round(run.phi, 3),
        "ne": len(spans),
        "raw": dict(raw),
        "net": dict(net),
        "where": dict(where),
        "cw": dict(code_where),
        "last5": last5,
        "last5_raw": last5_raw,
        "ex": examples,
    }


def drift_record(truth, result) -> dict:
    """A drifting rank: detected by a rank-outlier naming it from half its length before."""
    active = _active(result.findings)
    lo, hi = truth.onset - truth.length // 2, truth.end
    hits = [
        f
        for f in active
        if f.code == "rank-outlier" and f.rank == truth.rank and f.step is not None
        if lo <= f.step <= hi
    ]
    best = min(hits, key=lambda f: abs(f.step - truth.onset)) if hits else None
    return {
        "d": best is not None,
        "e": None if best is None else int(best.step - truth.onset),
        "L": truth.length,
        "f": sum(f.code == "rank-outlier" for f in active),
        "v": result.verdict.code,
        "pts": truth.points,
        "c": sorted({f.code for f in active if f.code != "rank-outlier"}),
    }


def run_lm_task(task: dict) -> dict:
    from stabilitycli import analyze

    case = Case(**task["case"])
    rng = np.random.default_rng(seed_for(task["seed"], task["key"]))
    records = []
    started = time.process_time()
    for _ in range(task["runs"]):
        run = truth = None
        if task["mode"] == "lm-healthy":
            run = healthy_lm(task["place"], task["points"], case.interval, case.sigma, rng)
            frame = run.frame
        elif task["mode"] == "lm-event":
            run = event_lm(
                case.kind, case.h, task["place"], task["points"], case.interval, case.sigma, rng
            )
            frame, truth = run.frame, run.truth
        else:
            frame, truth = rank_lm(
                case.kind, case.h, task["points"], case.interval, case.sigma, case.ranks, rng
            )
        try:
            result = analyze(frame)
        except Exception as err:  # a crash is a result: the run counts as missed
            records.append({"x": f"{type(err).__name__}: {err}"[:300], "d": False, "f": 0})
            continue
        if task["mode"] == "lm-healthy":
            records.append(healthy_lm_record(run, result, case.sigma))
        elif task["mode"] == "lm-rank-healthy":
            rank = sum(f.code.startswith("rank-") for f in _active(result.findings))
            records.append({"points": frame.height, "v": result.verdict.code, "rank": rank})
        elif case.kind == "rank-drift":
            records.append(drift_record(truth, result))
        else:
            base = Case(**{**task["case"], "kind": BASE_KIND.get(case.kind, case.kind)})
            record = score(base, truth, result)
            if run is not None:
                record["phi"] = round(run.phi, 3)
                why = (
                    below_bar(run, case.interval, case.sigma)
                    if case.kind in MULTI
                    else one_point_below_bar(run, case.kind, case.sigma)
                    if case.kind in ONE_POINT
                    else None
                )
                if why:  # not counted in recall (`_dq_report.summarize`): the log is under the bar
                    record["below"] = why
            records.append(record)
    return {
        "key": task["key"],
        "lm": True,
        "case": task["case"],
        "place": task["place"],
        "points": task["points"],
        "mode": task["mode"],
        "records": records,
        "cpu_s": time.process_time() - started,
    }
