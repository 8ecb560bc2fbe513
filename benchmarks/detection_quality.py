"""How well do stab's rules find what they are meant to find? (issue #11, item 1)

    python benchmarks/detection_quality.py                  # full grid, writes docs/detection.md
    python benchmarks/detection_quality.py --quick          # smoke pass, prints only
    python benchmarks/detection_quality.py --seed 7 --json /tmp/dq.json
    python benchmarks/detection_quality.py --compare /tmp/dq-before.json --json /tmp/dq-after.json

Synthetic runs with exactly one injected event each (spikes with and without a
cause, bumps, level shifts, ramps, plateaus, NaN, loss-scale collapse, one bad
rank in cohorts of 4-1024) under three noise families (gamma and Student-t(3)
batch noise, and the block-resampled residual noise of the healthy real logs
in ../shared/real-logs/), logged every 1, 10 and 50 steps, go through
`stabilitycli.analyze` as polars frames. Recall, precision and onset error per
event kind, size, interval and noise family, the false-alarm rate on healthy
runs (10^6 logged points per noise family and interval), and a PASS/FAIL
line per target of the issue. It measures the rules as they are: it tunes
nothing. To measure a given commit, point PYTHONPATH at an export of it:

    git archive <commit> stabilitycli | tar -x -C /tmp/stab-at-commit
    PYTHONPATH=/tmp/stab-at-commit python benchmarks/detection_quality.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _dq_learning import learning_headline, learning_md, run_learning
from _dq_lm_md import lm_md
from _dq_lm_report import lm_check_targets, lm_summaries
from _dq_lm_score import LM_PROFILES, lm_tasks
from _dq_report import (
    KIND_TITLE,
    RANK_ORDER,
    SINGLE_ORDER,
    check_targets,
    compare_md,
    healthy_table_md,
    kind_table_md,
    shift_table_md,
    summarize,
    summarize_healthy,
    t3_bar_note,
    target_matrix_md,
    target_summary_md,
)
from _dq_schedule import run_schedule_cases, schedule_md
from _dq_score import init_worker, run_task
from _dq_synth import (
    BLOCK_POINTS,
    FAMILIES,
    GAMMA_SHAPE,
    GRAD_SURGE,
    LR_JUMP,
    T_DF,
    Case,
    RealNoise,
    real_residuals,
)
from _paths import portable

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REAL_LOGS = ROOT.parent / "shared" / "real-logs"
DEFAULT_DOC = ROOT / "docs" / "detection.md"

SIGMAS = (0.01, 0.03)  # batch-noise std as a fraction of the loss level
INTERVALS = (1, 10, 50)
K_SIZES = (3, 5, 8, 12)  # event sizes in units of the noise sigma
NOCAUSE_SIZES = (0.25, 0.5, 0.6, 1.0)  # one-point spikes without a cause, fraction of the level
RAMP_SIZES = (0.10, 0.25, 0.50)  # total rise, fraction of the level
PLATEAU_SIZES = (0.02, 0.04)
RANK_SIZES = (0.25, 0.5, 1.0)
RANK_SPREADS = (0.05, 0.15)
RUN_POINTS = 3000
LONG_POINTS = 50_000  # long healthy runs: the spike rule's materiality depends on log length
RANK_POINTS = 300

PROFILES = {
    "full": {
        "runs": 30,
        "cohorts": {4: 10, 16: 10, 64: 10, 256: 5, 1024: 3},
        # per noise sigma, so 2 x 167 x 3,000 and 2 x 10 x 50,000 = 10^6 points per
        # noise family and interval at each length
        "healthy_runs": 167,
        "long_runs": 10,
        "healthy_cohorts": {16: 10, 256: 3},
        "learning_runs": 10,  # per cell of benchmarks/_dq_learning.py
    },
    "quick": {
        "runs": 4,
        "cohorts": {4: 3, 64: 3},
        "healthy_runs": 10,
        "long_runs": 1,
        "healthy_cohorts": {16: 2},
        "learning_runs": 2,
    },
}


def _pct_label(h: float) -> str:
    return f"+{100 * h:g}%"


def single_cases() -> list[Case]:
    cases = []
    for family in FAMILIES:
        for interval in INTERVALS:
            for sigma in SIGMAS:

                def add(kind: str, size: str, h: float) -> None:
                    cases.append(Case(kind, size, h, sigma, interval, family))  # noqa: B023

                add("spike", "6σ", 6 * sigma)
                for h in NOCAUSE_SIZES:
                    add("spike", _pct_label(h), h)
                for kind in ("spike+grad", "spike+lr", "bump3", "bump10", "bump30", "shift"):
                    for k in K_SIZES:
                        add(kind, f"{k}σ", k * sigma)
                for kind in ("ramp", "ramp-short"):
                    for h in RAMP_SIZES:
                        add(kind, _pct_label(h), h)
                for h in PLATEAU_SIZES:
                    add("plateau", _pct_label(h), h)
                for kind in ("nan-tail", "nan-point", "inf-point", "scale-collapse"):
                    add(kind, "—", math.nan)
    return cases


def rank_cases(cohorts) -> list[Case]:
    cases = []
    for family in FAMILIES:
        for interval in INTERVALS:
            for ranks in cohorts:
                for spread in RANK_SPREADS:
                    for h in RANK_SIZES:
                        cases.append(
                            Case("rank-shift", _pct_label(h), h, spread, interval, family, ranks)
                        )
                # the spread does not matter to a NaN or a missing rank
                for kind in ("rank-nonfinite", "rank-silent"):
                    cases.append(Case(kind, "—", math.nan, 0.15, interval, family, ranks))
    return cases


def build_tasks(profile: dict, seed: int) -> list[dict]:
    tasks = []

    def add(case: Case, runs: int, points: int, mode: str) -> None:
        key = (
            f"{mode}|{case.kind}|{case.size}|{case.sigma}|{case.interval}|{case.family}"
            f"|{case.ranks}|{points}"
        )
        cost = runs * (points * max(1, case.ranks) + 3000)  # + per-run overhead, in points
        tasks.append(
            {
                "key": key,
                "case": case.__dict__,
                "runs": runs,
                "points": points,
                "mode": mode,
                "seed": seed,
                "cost": cost,
            }
        )

    for case in single_cases():
        add(case, profile["runs"], RUN_POINTS, "event")
    for case in rank_cases(profile["cohorts"]):
        add(case, profile["cohorts"][case.ranks], RANK_POINTS, "event")
    for family in FAMILIES:
        for interval in INTERVALS:
            for sigma in SIGMAS:
                case = Case("healthy", "—", math.nan, sigma, interval, family)
                add(case, profile["healthy_runs"], RUN_POINTS, "healthy")
                add(case, profile["long_runs"], LONG_POINTS, "healthy")
        for ranks, runs in profile["healthy_cohorts"].items():
            for spread in RANK_SPREADS:
                case = Case("healthy-ranks", "—", math.nan, spread, 1, family, ranks)
                add(case, runs, RANK_POINTS, "healthy")
    # the most expensive cells first, so that two workers finish together
    tasks.sort(key=lambda t: -t["cost"])
    return tasks


def run_all(tasks: list[dict], jobs: int, real: RealNoise) -> list[dict]:
    total = sum(t["cost"] for t in tasks)
    done, shown, results = 0, -1, []
    started = time.perf_counter()
    cost_of = {t["key"]: t["cost"] for t in tasks}
    if jobs <= 1:
        init_worker(real)
        stream = map(run_task, tasks)
        pool = None
    else:
        # polars' thread pool does not survive fork(): spawn clean workers, one thread each
        # (two single-threaded workers on two cores beat two workers fighting over them)
        os.environ.setdefault("POLARS_MAX_THREADS", "1")
        context = multiprocessing.get_context("spawn")
        pool = context.Pool(jobs, initializer=init_worker, initargs=(real,))
        stream = pool.imap_unordered(run_task, tasks, chunksize=1)
    try:
        for result in stream:
            results.append(result)
            done += cost_of[result["key"]]
            tenth = int(10 * done / total)
            if tenth != shown:
                shown = tenth
                elapsed = time.perf_counter() - started
                print(
                    f"  {100 * done / total:3.0f}% of the work, {elapsed:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return results


def stab_identity() -> dict:
    """Which stabilitycli was measured: its path, a hash of its sources, its git state."""
    import stabilitycli

    package = Path(stabilitycli.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    out = {"path": str(package), "source_sha256": digest.hexdigest()[:16], "git": None}
    try:
        top = subprocess.run(
            ["git", "-C", str(package), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        dirty = subprocess.run(
            ["git", "-C", top[0], "status", "--porcelain", "--", str(package)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        out["git"] = {"commit": top[1], "dirty": bool(dirty)}
    except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
        pass
    return out


def describe_identity(ident: dict, label: str | None) -> str:
    text = f"`{ident['path']}` (sources sha256 `{ident['source_sha256']}`"
    if ident["git"]:
        state = "with uncommitted changes" if ident["git"]["dirty"] else "clean"
        text += f"; git {ident['git']['commit'][:12]}, {state}"
    else:
        text += "; not a git checkout"
    text += ")"
    return text + (f": {label}" if label else "")


def versions() -> str:
    import numpy
    import polars

    return (
        f"Python {platform.python_version()}, numpy {numpy.__version__}, "
        f"polars {polars.__version__}"
    )


METHOD = """\
## How it is measured

**Runs.** Each run is built in memory as a polars frame (`step`, `loss`,
`grad_norm`, `lr`; `loss_scale` for the loss-scale case; `rank` for per-rank
cases) and passed to `stabilitycli.analyze(frame)` with default thresholds.
Exactly one event is injected per run. A single-series run has {run_points:,}
logged points (so {run_points:,} steps when logging every step, {run_points_10:,}
every 10, {run_points_50:,} every 50); a logged value is the loss of that step
(sampled, as llm.c and nanoGPT log), not a mean over the logging interval.

**Curve and noise.** Loss level `2.0 + 8·exp(-step/τ)` with τ = 5% of the run,
so the fast drop is over before any event (events start at 30–80% of the run,
where every window the rules use is full). Noise is multiplicative:
`loss = level·(1 + σ·ε)`, with σ = 1% or 3% of the level (the healthy llm.c
GPT-2 log has 1.2%) and ε of unit variance from one of three families:
**gamma** (shape {gamma_shape:g}, skewness 1.0, the llm.c residual has 0.9),
**t(3)** (Student-t with {t_df} degrees of freedom, scaled to unit variance:
symmetric, heavy tails), and **real**: the residuals of the healthy real logs
(loss divided by a centred rolling median, minus 1, standardised per log) drawn
as {block}-point blocks (block bootstrap, so short-range structure survives).
A loss is floored at 5% of the level (t(3) could otherwise make it negative).
Grad norm is lognormal around a decaying baseline; the LR warms up over 2% of
the run and follows a cosine to 10%.

**Events.** Sizes are relative to the loss level and shown both as a multiple
of the noise σ (×σ) and as % of the level.

* *One-point spike*: the point's value is set to `level·(1 + h)`, `level` the
  noise-free curve (the size is exact; the spiked point is the event).
  *No cause*: h = 6σ, +25%, +50%, +60%, +100%; the spec's materiality bar is
  z ≥ 6 and ≥ 1.5× the baseline, so +50% sits exactly on the bar (a coin toss
  against a noisy baseline) and the target is judged at +60% and +100%.
  *With a cause*: h = 3, 5, 8, 12σ, plus a
  pre-clip grad norm {grad_surge:g}× its baseline at the same logged point, or
  an LR that jumps ×{lr_jump:g} at that point and stays up.
* *Bump* of 3, 10 or 30 steps and *permanent level shift*: `h·level` added on
  top of the noise from the onset (a logged step) for that many steps, or to
  the end; h = 3, 5, 8, 12σ. "pts" is the number of logged points the event
  covers: a 3-step bump logged every 10 steps is one point, so it is judged
  (by the spec) as a one-point event without a cause.
* *Ramp* (divergence): `h·level` rising linearly from the onset (35–50% of the
  run) to the end of the run, or over 10% of the run and then holding
  (*ramp-short*); h = +10, 25, 50%. *Plateau*: the same drift to the end with
  h = +2, 4%, under the 5% divergence bar, where stab's answer is `plateau`.
* *NaN*: NaN loss (and grad norm) from the onset to the end; one NaN point;
  one +Inf point.
* *Loss-scale collapse*: a dynamic scale from 65536 with a benign overflow
  every ~2,000 steps (halved, regrown after 1,000 clean steps); from the
  onset every logged point halves it until it is below 1. The truth onset is
  the first point below 1 (the spec's definition of a collapse).
* *Ranks*: cohorts of 4, 16, 64, 256 and 1024 ranks, {rank_points} logged
  points, each rank's loss `level·(1 + s·ε)` with its own noise draw and a
  per-step spread s = 5% or 15% of the level. One random rank, from a random
  onset at 40–70% of the run: its level shifts by +25, 50 or 100%, or its loss
  turns NaN to the end, or it stops reporting. The rank cases go through
  `analyze(frame)` as well (which runs the per-rank check first).

**Matching.** Only warning- and error-level findings count. Each event kind
has a family of finding codes: spikes, bumps and shifts → `spike`; ramps →
`divergence`; plateau → `plateau`; NaN → `nan`; loss scale →
`loss-scale-collapsed` (family: also `loss-scale-static`, `fp16-overflow`);
ranks → `rank-outlier`, `rank-nonfinite`, `rank-silent` (family: also
`straggler`), and a rank finding must name the injected rank. An event is
detected (a true positive) when a finding of its code has its `step` in the
match window; the closest one to the onset is the detection:

| event | match window (steps) |
|---|---|
| one-point spike, bump | [onset - 10 points, last point of the event + 10 points] |
| level shift | [onset - 10 points, onset + max(10 points, 100 steps)] |
| ramp, plateau | [onset - L/2, onset + L], L = the ramp's length in steps |
| NaN or Inf (one point, or to the end), loss-scale collapse | [onset ± 10 points] |
| rank events | [onset - 10 points, onset + 50 points] |

*Recall* = detected events / injected events. *Precision* = detected events /
all warning/error findings of the event's family in the same runs (a second
report of the same event, or any false alarm of that family anywhere in the
run, lowers it; "—" when there were none). *Onset error* = detection step -
injected onset, in logged points (ramps: as a fraction of the ramp length L,
"%L"), shown as median (signed) / max |error| over the detections. A level
shift is *persistent at its first step* when its detection is within 2 logged
points of the onset and at error level (not recovered); it *starts as a
divergence earlier* when any `divergence` or `plateau` finding starts more than
2 logged points before the onset.

**Targets** are judged per logging interval and noise family (9 scopes each),
pooling the noise levels (σ = 1%, 3%) and the sizes that meet the target's
condition; a target passes when every scope passes. O1 uses the 95th
percentile of |onset error| over the detections (recall is R1–R3's business);
O2 and O3, which have no recall target of their own, count an event as on time
only when it is detected within the tolerance. The healthy
false-alarm targets count warning/error `spike` findings per 10^5 logged
points over healthy runs (the same curve, noise, grad norm and LR, no event):
{healthy_runs} runs of {run_points:,} points and {long_runs} runs of
{long_points:,} points per noise σ, so {short_total:,} and {long_total:,} logged
points per noise family and interval (logged every 10 and every 50 steps, 10
and 50 times as many steps). Two lengths, to show that the rate per point does
not grow with the log (the spike rule once had a length-dependent materiality
test; it now judges an event by its accumulated excess over a fixed number of
logged points). Since #36 a spike finding within 10 logged points of a point the
noise itself made material by the spec's bar (the generator knows its draws:
z ≥ 6 and ≥ 1.5× the curve, or 3 points each over 3σ with a mean excess ≥ 5σ and
≥ 5%) is that event's detection, not a false alarm (`benchmarks/_dq_lm_truth.py`);
the matrix gives the raw rate and the noise-made events per 10^5 beside. O3 counts
a rank shift on time within max(10 steps, one logging interval) (#36).
"""

API_NOTES = """\
## What the library API made hard

* **Onset and persistence are spread over fields.** A spike's onset is
  `Finding.step`; whether it recovered is only the severity (error = not
  recovered) or `evidence["spike_type"]` / `evidence["recovered"]`. A typed
  field (or a documented evidence schema per code) would make matching less
  fragile.
* **Blips are one aggregated finding.** The info-level `blip` finding carries
  only its first step and `evidence["steps"][:20]`, so "what did stab say at a
  missed event" cannot always be answered for runs with more than 20 blips.
* **Sparse logs are judged in logged points, not steps.** The spike rule's
  sustained test sums the excess over 3 logged points whatever the interval,
  and its sigma in a sparse log is pooled over 10 windows' worth of points;
  the benchmark's grid is in logged points too (3,000 per run at every
  interval).
* **No notion of how a logger aggregates.** A log every 10 steps may hold the
  loss of every 10th step (sampled) or the mean of 10 steps (Hugging Face,
  Megatron). The rules cannot be told which; the benchmark models sampling.
* **The loss-scale collapse is dated where the scale crosses 1**, not where the
  run-away halving began; the benchmark uses the same definition for its truth.
* `analyze()` accepts a frame but the frame's `source.path` is `<frame>`; fine
  for a benchmark, noted for completeness. There is no public way to ask for
  one rule family only, so every run pays for all rules (about 20 ms per
  3,000-point run).
"""


def real_noise_md(sources: list[dict]) -> list[str]:
    lines = [
        "| source | points | logged every | σ (of level) | skewness | excess kurtosis "
        "| lag-1 autocorr. | max z | smoothing window |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sources:
        lines.append(
            f"| `{s['source']}` | {s['points']:,} | {s['interval']} | {100 * s['sigma_rel']:.2f}% "
            f"| {s['skew']:.2f} | {s['excess_kurtosis']:.2f} | {s['lag1_autocorr']:.2f} "
            f"| {s['max_z']:.1f} | {s['smooth_window_points']} points |"
        )
    return lines


def render(
    meta: dict,
    targets: list[dict],
    cells: list[dict],
    healthy: list[dict],
    real_sources: list[dict],
    comparison: list[str] | None,
    learning: dict | None = None,
    lm: dict | None = None,
) -> str:
    from stabilitycli.core.config import Thresholds  # the measured package's own bar

    grid_targets = [t for t in targets if not t["code"].startswith("L")]
    single = [c for c in cells if not c["case"]["ranks"]]
    ranked = [c for c in cells if c["case"]["ranks"]]
    passed = sum(t["pass"] for t in targets)
    out = [
        "# Detection quality of `stab` (issue #11, item 1; LM-shaped families: #36)",
        "",
        "Written by `benchmarks/detection_quality.py`; rerun it rather than editing this file.",
        "",
        f"* Command: `{meta['command']}`"
        + (
            " (this report re-rendered from the runs that command saved with --json)"
            if meta.get("resummarised_from")
            else ""
        ),
        f"* Seed: {meta['seed']} · date (UTC): {meta['date']} · machine: `nproc` = {meta['nproc']},"
        f" {meta['versions']}",
        f"* Measured: stabilitycli from {meta['stab']}",
        f"* Wall time: {meta['wall_s']:.0f} s with {meta['jobs']} worker process(es); "
        f"{meta['cpu_s']:.0f} CPU-s in generation + `analyze()`"
        + (
            f"; 1-minute load average {meta['load_avg'][0]:.1f} at the start and "
            f"{meta['load_avg'][1]:.1f} at the end"
            if meta.get("load_avg")
            else ""
        ),
        f"* Grid: {meta['cells']} event cells × {meta['runs_per_cell']} runs "
        f"({meta['event_runs']:,} event runs), {meta['healthy_points']:,} healthy logged points"
        + (f"; LM families (#36): {lm['runs']}" if lm else ""),
        "",
        f"**{passed} of {len(targets)} targets pass.**",
        "",
        "## Targets",
        "",
        *target_summary_md(targets),
        "",
    ]
    if lm:
        out += ["The LM targets (`L…`) per logging interval: the LM section below.", ""]
    if not cells:  # --families lm
        return "\n".join([*out, *lm_md(lm["targets"], lm["cells"], lm["healthy"], lm["cpu_s"])])
    out += [
        "Per logging interval and noise family (value, PASS/FAIL, events or points pooled):",
        "",
        *target_matrix_md(grid_targets, INTERVALS, FAMILIES),
        "",
        "How close O2 and O3 can come at all, measured by oracles told the level curve, the "
        "ramp's length or the rank's jump: `docs/onset-limits.md` "
        "(`benchmarks/onset_limits.py`). Why F1 and R3 cannot both hold under t(3) noise: "
        "after the healthy-run table below.",
        "",
    ]
    if comparison:
        out += ["## Compared with the previous run", "", *comparison, ""]
    out += [
        METHOD.format(
            run_points=RUN_POINTS,
            run_points_10=RUN_POINTS * 10,
            run_points_50=RUN_POINTS * 50,
            gamma_shape=GAMMA_SHAPE,
            t_df=T_DF,
            block=BLOCK_POINTS,
            grad_surge=GRAD_SURGE,
            lr_jump=LR_JUMP,
            rank_points=RANK_POINTS,
            long_points=LONG_POINTS,
            healthy_runs=meta["healthy_runs"],
            long_runs=meta["long_runs"],
            short_total=len(SIGMAS) * meta["healthy_runs"] * RUN_POINTS,
            long_total=len(SIGMAS) * meta["long_runs"] * LONG_POINTS,
        ),
        "## Healthy runs: false alarms",
        "",
        "Warning/error findings by family: count (per 10^5 logged points).",
        "",
        *healthy_table_md(healthy),
        "",
        *t3_bar_note(SIGMAS, Thresholds().spike_large_ratio),
        "",
        "## Events, single series",
        "",
        "R = recall, P = precision, onset = median (signed) / max |error| in logged points "
        "(ramps: % of the ramp length). Noise σ is the batch-noise std as % of the level.",
        "",
    ]
    for kind in SINGLE_ORDER:
        table = kind_table_md(kind, single, FAMILIES)
        if table:
            out += [f"### {kind}: {KIND_TITLE[kind]}", "", *table, ""]
        if kind == "shift":
            out += [
                "Shift reported as a persistent spike at its first step, and shifts with a "
                "divergence/plateau starting before them:",
                "",
                *shift_table_md(single, FAMILIES),
                "",
            ]
    if ranked:
        out += [
            "## Events, per-rank cohorts",
            "",
            "Onset in logged points as for single series; spread is the per-step spread of the "
            "ranks as % of the level, ×σ the shift in units of it.",
            "",
        ]
        for kind in RANK_ORDER:
            table = kind_table_md(kind, ranked, FAMILIES)
            if table:
                out += [f"### {kind}: {KIND_TITLE[kind]}", "", *table, ""]
    if meta.get("schedules"):
        out += schedule_md(meta["schedules"])
    if learning:
        out += [*learning_md(learning, healthy), ""]
    if lm:
        out += [*lm_md(lm["targets"], lm["cells"], lm["healthy"], lm["cpu_s"]), ""]
    out += [
        "## The real residual noise",
        "",
        *real_noise_md(real_sources),
        "",
        API_NOTES.format(run_points=RUN_POINTS),
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke pass (prints only)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, help="write every run's record and the summaries")
    parser.add_argument("--out", type=Path, help=f"Markdown report (full default: {DEFAULT_DOC})")
    parser.add_argument("--compare", type=Path, help="a previous --json to compare targets with")
    parser.add_argument("--real-logs", type=Path, default=DEFAULT_REAL_LOGS)
    parser.add_argument("--label", help="free text naming what was measured (e.g. a commit)")
    parser.add_argument(
        "--from-json",
        type=Path,
        help="re-summarise the runs of a previous --json with this script's targets (no new runs)",
    )
    parser.add_argument(
        "--families",
        choices=("all", "grid", "lm"),
        default="all",
        help="grid: the #11 grid (with #34's schedules and learning cases); lm: the LM-shaped "
        "families of #36 alone; all: both (the default, what writes docs/detection.md)",
    )
    args = parser.parse_args()
    if args.from_json:
        resummarise(args)
        return

    profile_name = "quick" if args.quick else "full"
    profile = PROFILES[profile_name]
    grid, with_lm = args.families in ("all", "grid"), args.families in ("all", "lm")
    # the committed report holds everything: a partial run prints unless told where to write
    out_path = args.out or (None if args.quick or args.families != "all" else DEFAULT_DOC)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    real = real_residuals(args.real_logs) if grid else RealNoise(np.empty(0), np.empty(0))
    tasks = build_tasks(profile, args.seed) if grid else []
    if with_lm:
        tasks = sorted(tasks + lm_tasks(LM_PROFILES[profile_name], args.seed), key=_by_cost)
    print(
        f"{len(tasks)} cells ({profile_name}), {args.jobs} worker(s), seed {args.seed}",
        file=sys.stderr,
    )
    results = run_all(tasks, args.jobs, real)
    # planned schedules against LR bugs (#34): in-process, a few seconds
    meta_schedule = run_schedule_cases(args.seed, args.quick) if grid else None
    learning = run_learning(profile["learning_runs"], args.seed) if grid else None
    wall = time.perf_counter() - started

    cells, healthy, targets, lm = summaries(results)
    comparison = compare_with(args.compare, targets)

    command = "python benchmarks/detection_quality.py" + "".join(
        " " + shlex.quote(a) for a in sys.argv[1:]
    )
    if os.environ.get("PYTHONPATH"):
        command = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} {command}"
    event_runs = sum(c["n"] for c in cells)
    meta = {
        "command": command,
        "seed": args.seed,
        "profile": profile_name,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "nproc": os.cpu_count(),
        "versions": versions(),
        "stab_identity": stab_identity(),
        "jobs": args.jobs,
        "wall_s": wall,
        # wall time means little on a shared machine without the load it ran under
        "load_avg": [load_start, os.getloadavg()[0]],
        "cpu_s": sum(r["cpu_s"] for r in results),
        "cells": len(cells),
        "runs_per_cell": f"{profile['runs']} (ranks: "
        + ", ".join(f"{k}: {v}" for k, v in profile["cohorts"].items())
        + ")",
        "event_runs": event_runs,
        "healthy_points": sum(h["points"] for h in healthy if not h["case"]["ranks"]),
        "healthy_runs": profile["healthy_runs"],
        "long_runs": profile["long_runs"],
        "schedules": meta_schedule,
    }
    meta["stab"] = describe_identity(meta["stab_identity"], args.label)
    meta["learning"] = learning
    meta["families"] = args.families
    try:
        text = render(meta, targets, cells, healthy, real.sources, comparison, learning, lm)
    except Exception:
        # the runs took minutes: keep them for --from-json whatever the report does
        emit("", None, args.json, meta, targets, cells, healthy, real.sources, results, lm)
        raise
    emit(text, out_path, args.json, meta, targets, cells, healthy, real.sources, results, lm)
    for t in targets:
        print(f"{t['code']}: {'PASS' if t['pass'] else 'FAIL'}", end="  ", file=sys.stderr)
    print(file=sys.stderr)
    for row in learning_headline(learning, healthy) if learning else []:
        print(
            f"{row['code']}: recall {100 * row['recall']:.1f}% of {row['events']}, "
            f"{1e5 * row['false_alarms'] / max(1, row['points']):.2f} false alarms per 10^5 "
            f"points ({row['false_alarms']} in {row['points']:,})",
            file=sys.stderr,
        )
    print(f"wall time {wall:.0f} s", file=sys.stderr)


def _by_cost(task: dict) -> float:
    return -task["cost"]  # the most expensive cells first, so that two workers finish together


def summaries(results: list[dict]):
    """Grid cells, grid healthy rows, every target (grid and LM), and the LM summaries."""
    cells = sorted((summarize(r) for r in results if r["mode"] == "event"), key=lambda c: c["key"])
    healthy = sorted(
        summarize_healthy([r for r in results if r["mode"] == "healthy"]), key=lambda h: h["key"]
    )
    targets = check_targets(cells, healthy, INTERVALS, FAMILIES) if cells else []
    lm = None
    mine = [r for r in results if r.get("lm")]
    if mine:
        lm_cells, lm_healthy = lm_summaries(mine)
        lm_targets = lm_check_targets(lm_cells, lm_healthy)
        lm = {
            "cells": lm_cells,
            "healthy": lm_healthy,
            "targets": lm_targets,
            "cpu_s": sum(r["cpu_s"] for r in mine),
            "runs": f"{len(mine)} cells, {sum(len(r['records']) for r in mine):,} runs",
        }
        targets = targets + lm_targets
    return cells, healthy, targets, lm


def compare_with(path: Path | None, targets: list[dict]) -> list[str] | None:
    if path is None:
        return None
    return compare_md(json.loads(path.read_text())["targets"], targets)


def emit(text, out_path, json_path, meta, targets, cells, healthy, real_sources, results, lm):
    print(text)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(portable(text) + "\n")
        print(f"wrote {out_path}", file=sys.stderr)
    if json_path is not None:
        payload = {
            "meta": meta,
            "targets": targets,
            "cells": cells,
            "healthy": healthy,
            "real_noise": real_sources,
            "lm": lm,
            "results": results,  # every run's record: --from-json re-summarises from these
        }
        json_path.write_text(json.dumps(_finite(payload)) + "\n")
        print(f"wrote {json_path}", file=sys.stderr)


def resummarise(args: argparse.Namespace) -> None:
    """Targets and tables again from saved runs: for changed targets, not changed rules."""
    saved = json.loads(args.from_json.read_text())
    results = saved["results"]
    for result in results:
        if result["case"]["h"] is None:  # JSON has no NaN
            result["case"]["h"] = math.nan
    cells, healthy, targets, lm = summaries(results)
    meta = saved["meta"]
    meta["resummarised_from"] = str(args.from_json)
    text = render(
        meta,
        targets,
        cells,
        healthy,
        saved["real_noise"],
        compare_with(args.compare, targets),
        meta.get("learning"),
        lm,
    )
    emit(text, args.out, args.json, meta, targets, cells, healthy, saved["real_noise"], results, lm)


def _finite(value):
    """NaN sizes (events without one) as null: strict JSON readers refuse NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


if __name__ == "__main__":
    main()
