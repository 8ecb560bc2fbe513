"""Run one grid cell through `stabilitycli.analyze` and score each run against its truth.

Runs in the worker processes of benchmarks/detection_quality.py. A record is
small on purpose (the full JSON keeps one per run): whether the event was
detected, the onset error in steps, how many findings of the event's family
the run produced, the verdict, and the other warning/error codes.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from dataclasses import asdict

import numpy as np
from _dq_lm_truth import excused, noise_events
from _dq_synth import (
    BUMP_STEPS,
    NAN_KINDS,
    RAMP_KINDS,
    RANK_KINDS,
    SPIKE_KINDS,
    Case,
    RealNoise,
    Truth,
    level_curve,
    rank_run,
    single_run,
)

WARNING = 1  # stabilitycli.core.model.Severity: INFO 0, WARNING 1, ERROR 2

FAMILY_CODES = {
    "spike": ("spike",),
    "divergence": ("divergence",),
    "plateau": ("plateau",),
    "nan": ("nan",),
    "loss-scale": ("loss-scale-collapsed", "loss-scale-static", "fp16-overflow"),
    "rank": ("rank-outlier", "rank-nonfinite", "rank-silent", "straggler"),
}
CODE_FAMILY = {code: fam for fam, codes in FAMILY_CODES.items() for code in codes}

MATCH_POINTS = 10  # a detection may sit this many logged points before or after the event
SHIFT_MATCH_STEPS = 100  # a shift may be caught up to one baseline window late
RANK_MATCH_POINTS = 50  # the rank rule needs 10 points of persistence; its onset is the first
SHIFT_ONSET_POINTS = 2  # "reported at its first step": the onset target's tolerance

_REAL: RealNoise | None = None


def init_worker(real: RealNoise | None) -> None:
    global _REAL
    _REAL = real


def expected(kind: str) -> tuple[str, tuple[str, ...]]:
    """The family whose findings are judged for this kind, and the codes that detect it."""
    if kind in SPIKE_KINDS or kind in BUMP_STEPS or kind == "shift":
        return "spike", ("spike",)
    if kind in ("ramp", "ramp-short"):
        return "divergence", ("divergence",)
    if kind == "plateau":
        return "plateau", ("plateau",)
    if kind in NAN_KINDS:
        return "nan", ("nan",)
    if kind == "scale-collapse":
        return "loss-scale", ("loss-scale-collapsed",)
    if kind in RANK_KINDS:
        code = {"rank-shift": "rank-outlier"}.get(kind, kind)
        return "rank", (code,)
    raise ValueError(kind)


def match_window(kind: str, truth: Truth, interval: int) -> tuple[int, int]:
    slack = MATCH_POINTS * interval
    if kind in RAMP_KINDS:
        return truth.onset - truth.length // 2, truth.onset + truth.length
    if kind == "shift":
        return truth.onset - slack, truth.onset + max(slack, SHIFT_MATCH_STEPS)
    if kind in RANK_KINDS:
        return truth.onset - slack, truth.onset + RANK_MATCH_POINTS * interval
    if kind == "nan-tail":
        return truth.onset - slack, truth.onset + slack
    return truth.onset - slack, truth.end + slack


def _active(findings) -> list:
    return [f for f in findings if int(f.severity) >= WARNING]


def _info_near(findings, lo: int, hi: int) -> list[str]:
    codes = set()
    for f in findings:
        if int(f.severity) >= WARNING:
            continue
        # one blip finding stands for many points: its evidence lists (the first 20 of) them
        steps = f.evidence.get("steps") if f.code == "blip" else None
        candidates = steps or ([f.step] if f.step is not None else [])
        if any(lo <= s <= hi for s in candidates):
            codes.add(f.code)
    return sorted(codes)


def score(case: Case, truth: Truth, result) -> dict:
    family, codes = expected(case.kind)
    lo, hi = match_window(case.kind, truth, case.interval)
    active = _active(result.findings)
    in_family = [f for f in active if CODE_FAMILY.get(f.code) == family]
    hits = [
        f
        for f in in_family
        if f.code in codes
        and f.step is not None
        and lo <= f.step <= hi
        and (truth.rank is None or f.rank == truth.rank)
    ]
    best = min(hits, key=lambda f: (abs(f.step - truth.onset), f.step)) if hits else None
    record = {
        "d": best is not None,
        "e": None if best is None else int(best.step - truth.onset),
        "f": len(in_family),
        "v": result.verdict.code,
        "c": sorted({f.code for f in active if CODE_FAMILY.get(f.code) != family}),
        "pts": truth.points,
        # what stab said near the event below warning level (read for missed events)
        "i": _info_near(result.findings, lo, hi),
    }
    if case.kind in RAMP_KINDS:
        record["L"] = truth.length
    if best is not None and best.code == "spike":
        record["type"] = best.evidence.get("spike_type")
    if case.kind == "shift":
        near = (
            best is not None and abs(best.step - truth.onset) <= SHIFT_ONSET_POINTS * case.interval
        )
        record["persistent"] = bool(near and int(best.severity) > WARNING)
        earlier = [
            f
            for f in active
            if f.code in ("divergence", "plateau")
            and f.step is not None
            and f.step < truth.onset - SHIFT_ONSET_POINTS * case.interval
        ]
        record["early_div"] = bool(earlier)
        record["any_div"] = any(f.code in ("divergence", "plateau") for f in active)
    return record


def healthy_record(result, points: int, frame=None, sigma: float = 0.0) -> dict:
    """Findings by family; with the frame, also without those the noise-made events explain."""
    counts = Counter()
    net = Counter()
    other = Counter()
    spans, steps, interval = [], None, 1
    if frame is not None and not frame.is_empty():
        # the healthy grid's loss is level * (1 + sigma * noise): the generator's own draws
        steps = frame["step"].to_numpy()
        interval = int(steps[1] - steps[0]) if steps.size > 1 else 1
        level = level_curve(steps, steps.size * interval)
        spans = noise_events(frame["loss"].to_numpy() / level - 1.0, sigma)
    for f in _active(result.findings):
        family = CODE_FAMILY.get(f.code)
        if family is None:
            other[f.code] += 1
        else:
            counts[family] += 1
            if not (spans and excused(f.step, f.code, spans, steps, interval)):
                net[family] += 1
    blips = sum(int(f.evidence.get("count", 1)) for f in result.findings if f.code == "blip")
    return {
        "points": points,
        "v": result.verdict.code,
        "fam": dict(counts),
        "fam_net": dict(net),
        "ne": len(spans),
        "other": dict(other),
        "blips": blips,
    }


def seed_for(seed: int, key: str) -> np.random.SeedSequence:
    """A cell's seed depends on the cell, not on its place in the task list (quick = full)."""
    return np.random.SeedSequence([seed, zlib.crc32(key.encode())])


def run_task(task: dict) -> dict:
    """Generate and analyze every run of one cell; return its records and its cost."""
    from stabilitycli import analyze

    if task.get("lm"):
        from _dq_lm_score import run_lm_task

        return run_lm_task(task)

    case = Case(**task["case"])
    rng = np.random.default_rng(seed_for(task["seed"], task["key"]))
    build = rank_run if case.ranks else single_run
    records = []
    started = time.process_time()
    for _ in range(task["runs"]):
        frame, truth = build(case, task["points"], rng, _REAL)
        try:
            result = analyze(frame)
        except Exception as err:  # a crash is a result: the run counts as missed
            records.append({"x": f"{type(err).__name__}: {err}"[:300], "d": False, "f": 0})
            continue
        if truth is None:
            single = not case.ranks
            records.append(
                healthy_record(
                    result, frame.height, frame if single else None, case.sigma if single else 0
                )
            )
        else:
            records.append(score(case, truth, result))
    return {
        "key": task["key"],
        "case": asdict(case),
        "points": task["points"],
        "mode": task["mode"],
        "records": records,
        "cpu_s": time.process_time() - started,
    }
