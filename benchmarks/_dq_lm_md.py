"""The Markdown section of the LM families (issue #36) in docs/detection.md."""

from __future__ import annotations

from collections import Counter

from _dq_lm_score import (
    DRIFT_SIGMAS,
    DRIFT_SPREADS,
    EVENT_POINTS,
    HEALTHY_POINTS,
    LM_FAMILY,
    LM_INTERVALS,
    LM_SIGMAS,
    LM_SIZES,
    OTHER_SHAPES,
    RANK_COHORT,
    RANK_POINTS,
    TARGET_SHAPES,
)
from _dq_lm_synth import LM_EVENT_PLACES
from _dq_lm_truth import PLACES
from _dq_report import format_measure

PLACE_TEXT = {
    "warmup": "during warmup",
    "epoch": "≤ 100 steps after an epoch boundary",
    "schedule": "≤ 100 steps after a schedule change",
    "decay": "in the decay tail (the WSD cooldown, else the last 20%), before the last 7%",
    "hump": "on the rise of a mixture hump",
    "mid": "middle of the run (30-70%, control)",
}

METHOD = """\
Written by `benchmarks/_dq_lm_*.py` (the generator's docstring in `_dq_lm_synth.py` says
how a run is made). Run alone with `--families lm`. Event runs have {event_points:,} logged
points, healthy runs {healthy_points:,}, rank cohorts {ranks} ranks × {rank_points:,}
points; logged every {intervals} steps (sampled: a logged value is that step's loss), noise σ
{sigmas} of the level, half of its variance an AR(1) with φ drawn per run from 0.3-0.8
(between consecutive logged points) and half independent gamma batch noise (skewness 1).
One event per event run, placed {places}. Sizes as in the main grid: one-point spikes +60%
and +100% without a cause, 5σ and 8σ with a 50× grad-norm surge; bumps over 3 and 10 logged
points and persistent shifts (a curriculum switch above the bar) at 5σ and 8σ; accelerating
(quadratic) ramps rising +25% or +50% from the onset to the end; NaN to the end. Matching
and onset errors as in the main grid (ramps and drifts: in % of their length). Targets are
judged per logging interval, pooling both noise levels, the sizes that meet the condition
and every place.

**Truth labelling (#36's first decision).** The generator keeps its noise draws; a point
the noise alone made material by the spec's bar (z ≥ 6 over the noise-free curve and ≥ 1.5×
it, or 3 consecutive points each over 3σ with a mean excess ≥ 5σ and ≥ 5% of the level) is
an event, and a warning/error `spike` finding within 10 logged points of one is counted as
its detection, not as a false alarm (`_dq_lm_truth.py`). The healthy tables give both the
raw count and the count without those, and the noise-made events per 10^5 points. The
same bar the other way: an injected bump or shift whose own points drew noise that left it
under the bar in the log (their mean excess over the noise-free curve, a shift's over its
first 100 steps and at least 3 points, < 5σ or < 5%: an event of exactly 5σ does so about
half the time; within 3 logged points after an epoch drop, over the level before the
drop, as the log holds no level of the new epoch yet), is not counted in recall; the events
table shows them as "+k under the bar". So is a one-point spike (written without noise, h
over the curve) on the first logged point of a new epoch whose point, over the level before
the drop, is under 3σ (with a grad-norm surge) or under z 6 or 1.5× (without a cause): a 5σ
point of an epoch that dropped 8-25% sits under the old level and a +60% one at 1.2-1.5× it,
and the log, holding no point of the new level before it, cannot tell it from the last point
of the old epoch.
"""


def _scope_value(target: dict, interval: int) -> str:
    s = target["scopes"].get(f"{interval}/{LM_FAMILY}")
    if s is None:
        return "n/a"
    mark = "PASS" if s["pass"] else "FAIL"
    m = target["measure"]
    if m in ("lm_fa", "lm_fa_other"):
        raw, made = s.get("raw"), s.get("noise_events")
        return (
            f"{s['value']:.2f}/1e5 {mark} (raw {raw:.2f}, noise-made events {made:.2f}; "
            f"{s['n']:,} points)"
        )
    if m == "lm_last5":
        return f"{s['value']} {mark} (raw {s['raw']})"
    text = f"{format_measure(m, s['value'])} {mark}"
    if "recall" in s and m != "recall":
        text += f" (recall {100 * s['recall']:.0f}%, n={s['n']})"
    elif "raw" in s:
        text += (
            f" (n={s['n']}; raw {100 * s['raw']:.1f}% with the {s['below_bar']} "
            "under the bar counted)"
        )
    else:
        text += f" (n={s['n']})"
    if s.get("worst") and not s["pass"]:
        text += f"; worst {s['worst']}"
    return text


def lm_targets_md(targets: list[dict]) -> list[str]:
    lines = [
        "| target | requirement | "
        + " | ".join(f"every {i}" for i in LM_INTERVALS)
        + " | result |",
        "|---|---|" + "---|" * len(LM_INTERVALS) + "---|",
    ]
    for t in targets:
        cols = " | ".join(_scope_value(t, i) for i in LM_INTERVALS)
        lines.append(f"| {t['code']} | {t['text']} | {cols} | {'PASS' if t['pass'] else 'FAIL'} |")
    return lines


def _healthy_md(healthy: list[dict]) -> list[str]:
    lines = [
        "| shape | every | noise σ | runs | logged points | noise-made events | warning/error "
        "findings raw | without noise-made | per 10^5 | in the last 5% | verdict not healthy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = TARGET_SHAPES + OTHER_SHAPES
    rows = [h for h in healthy if h["mode"] == "lm-healthy"]
    for h in sorted(
        rows, key=lambda h: (order.index(h["shape"]), h["case"]["interval"], h["case"]["sigma"])
    ):
        net, raw = sum(h["net"].values()), sum(h["raw"].values())
        not_healthy = sum(v for k, v in h["verdicts"].items() if k != "healthy") + h["crashes"]
        lines.append(
            f"| {h['shape']} | {h['case']['interval']} | {100 * h['case']['sigma']:g}% "
            f"| {h['runs']} | {h['points']:,} | {h['noise_events']} | {raw} | {net} "
            f"| {1e5 * net / max(1, h['points']):.2f} | {h['last5']} | {not_healthy} |"
        )
    return lines


def _where_md(healthy: list[dict]) -> list[str]:
    """Warning/error findings of the healthy LM runs (noise-made events excused), by code
    and by where in the run they fall."""
    rows = [h for h in healthy if h["mode"] == "lm-healthy"]
    grid: dict[str, Counter] = {}
    by_interval: dict[str, Counter] = {}
    for h in rows:
        for key, count in h["cw"].items():
            code, place = key.split("@", 1)
            grid.setdefault(code, Counter())[place] += count
            by_interval.setdefault(code, Counter())[h["case"]["interval"]] += count
    if not grid:
        return ["No warning/error finding in any healthy LM run."]
    places = [p for p in PLACES if any(g[p] for g in grid.values())]
    lines = [
        "| code | " + " | ".join(places) + " | all | "
        + " | ".join(f"every {i}" for i in LM_INTERVALS) + " |",
        "|---|" + "---|" * (len(places) + 1 + len(LM_INTERVALS)),
    ]  # fmt: skip
    for code, counter in sorted(grid.items(), key=lambda kv: -sum(kv[1].values())):
        cells = " | ".join(str(counter[p]) for p in places)
        per = " | ".join(str(by_interval[code][i]) for i in LM_INTERVALS)
        lines.append(f"| `{code}` | {cells} | {sum(counter.values())} | {per} |")
    lines += ["", "By shape (runs' findings at each place):", ""]
    by_shape: dict[str, Counter] = {}
    for h in rows:
        by_shape.setdefault(h["shape"], Counter()).update(h["where"])
    lines += [
        "| shape | " + " | ".join(places) + " |",
        "|---|" + "---|" * len(places),
    ]
    for shape in TARGET_SHAPES + OTHER_SHAPES:
        c = by_shape.get(shape, Counter())
        lines.append(f"| {shape} | " + " | ".join(str(c[p]) for p in places) + " |")
    examples = [(h["shape"], h["case"]["interval"], e) for h in rows for e in h["examples"]]
    if examples:
        lines += [
            "",
            "Examples (shape, logged every, code, step, place: the finding's message):",
            "",
        ]
        seen: set[tuple] = set()
        for shape, interval, (code, step, place, message) in examples:
            if (code, place) in seen or len(seen) >= 12:
                continue
            seen.add((code, place))
            lines.append(f"* {shape}, every {interval}: `{code}` at {step} ({place}): {message}")
    return lines


def _events_md(cells: list[dict]) -> list[str]:
    lines = [
        "R = recall, onset = median (signed) / max |error| in logged points over the "
        "detections (ramps: % of the ramp's length); both noise levels pooled.",
        "",
        "| kind | size | place | "
        + " | ".join(f"every {i}: R | onset" for i in LM_INTERVALS) + " |",
        "|---|---|---|" + "---|---|" * len(LM_INTERVALS),
    ]  # fmt: skip
    for kind, places in LM_EVENT_PLACES.items():
        for label, _, _ in LM_SIZES[kind]:
            for place in places:
                parts = []
                for interval in LM_INTERVALS:
                    mine = _cells_of(cells, kind, label, interval, lambda c: c["place"] == place)  # noqa: B023
                    parts.append(_recall_onset(mine, kind == "ramp"))
                lines.append(f"| {kind} | {label} | {place} | " + " | ".join(parts) + " |")
    verdicts: Counter = Counter()
    for c in cells:
        if c["case"]["kind"] in LM_EVENT_PLACES:
            verdicts.update(c["verdicts"])
    lines += ["", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.most_common(8)) + "."]
    return lines


def _cells_of(cells: list[dict], kind: str, label: str, interval: int, keep) -> list[dict]:
    """The cells of one kind, size and logging interval that `keep` accepts."""
    return [
        c
        for c in cells
        if c["case"]["kind"] == kind
        and c["case"]["size"] == label
        and c["case"]["interval"] == interval
        and keep(c)
    ]


def _recall_onset(mine: list[dict], frac: bool) -> str:
    n = sum(c["n"] for c in mine)
    below = sum(c.get("below_bar", 0) for c in mine)
    under = f" (+{below} under the bar)" if below else ""
    if not n:
        return f"—{under} | —"
    tp = sum(c["tp"] for c in mine)
    if frac:
        errs = [e for c in mine for e in c.get("onset_frac_of_length", [])]
        onset = "—" if not errs else f"{100 * _med(errs):+.1f}/{100 * max(map(abs, errs)):.1f}%L"
    else:
        errs = [e / c["case"]["interval"] for c in mine for e in c["onset_steps"]]
        onset = "—" if not errs else f"{_med(errs):+.3g}/{max(map(abs, errs)):.3g}"
    return f"{100 * tp / n:.0f}% of {n}{under} | {onset}"


def _med(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _ranks_md(cells: list[dict], healthy: list[dict]) -> list[str]:
    lines = [
        f"Cohorts of {RANK_COHORT} ranks on the cosine LM curve, each rank with its own "
        "AR(1)-mix noise of the spread; one rank drifts up linearly from 40-75% of the run "
        "to the end, by 3, 4 or 5 spreads (σ) at its last step, or shifts its level.",
        "",
        "| kind | spread | size | " + " | ".join(f"every {i}: R | onset" for i in LM_INTERVALS)
        + " |",
        "|---|---|---|" + "---|---|" * len(LM_INTERVALS),
    ]  # fmt: skip
    combos = [("rank-drift", s, f"{d:g}σ") for s in DRIFT_SPREADS for d in DRIFT_SIGMAS]
    combos += [("rank-shift", 0.15, lab) for lab in ("+50%", "+100%")]
    for kind, spread, label in combos:
        parts = []
        for interval in LM_INTERVALS:
            mine = _cells_of(
                cells,
                kind,
                label,
                interval,
                lambda c: abs(c["case"]["sigma"] - spread) < 1e-9,  # noqa: B023
            )
            parts.append(_recall_onset(mine, kind == "rank-drift"))
        lines.append(f"| {kind} | {100 * spread:g}% | {label} | " + " | ".join(parts) + " |")
    rows = [h for h in healthy if h["mode"] == "lm-rank-healthy"]
    if rows:
        found = sum(h["rank_findings"] for h in rows)
        points = sum(h["points"] for h in rows)
        lines += [
            "",
            f"Healthy cohorts: {found} rank-family warning/error findings in {points:,} "
            f"rank-points ({len(rows)} cells).",
        ]
    return lines


def _ramp_bound_note() -> str:
    """What LO2 asks of an accelerating ramp, in the noise's own units (computed)."""
    sizes = [v for _, v, _ in LM_SIZES["ramp"]]
    rises = ", ".join(
        f"+{100 * h:g}% at σ = {100 * s:g}%: {h * 0.05**2 / s:.3f}σ"
        for h in sizes
        for s in LM_SIGMAS
    )
    return (
        "**LO2 on accelerating ramps.** A ramp rising `h·x²` (x the fraction of its length) "
        f"has risen h/400 by 5% of its length: {rises} of one logged point's noise. An onset "
        "error within 5% of the length asks a loss-only rule to date a change whose size "
        "there is a small fraction of σ, so LO2 measures how early the rule dates a ramp "
        "(the table's median onset, in % of the length) more than it can be met; a linear "
        "rank drift (LD1) rises 0.3-0.5σ by 10% of its length and can be dated by a change "
        "point fitted over the whole drift."
    )


def lm_md(targets: list[dict], cells: list[dict], healthy: list[dict], cpu_s: float) -> list[str]:
    passed = sum(t["pass"] for t in targets)
    places = "; ".join(f"{p}: {t}" for p, t in PLACE_TEXT.items())
    return [
        "## LM-shaped runs (issue #36)",
        "",
        METHOD.format(
            event_points=EVENT_POINTS,
            healthy_points=HEALTHY_POINTS,
            ranks=RANK_COHORT,
            rank_points=RANK_POINTS,
            intervals=", ".join(map(str, LM_INTERVALS)),
            sigmas=" and ".join(f"{100 * s:g}%" for s in LM_SIGMAS),
            places=places,
        ),
        f"{sum(c['n'] for c in cells):,} event runs, "
        f"{sum(h['points'] for h in healthy if h['mode'] == 'lm-healthy'):,} healthy logged "
        f"points; {cpu_s:.0f} CPU-s.",
        "",
        f"**{passed} of {len(targets)} LM targets pass.**",
        "",
        *lm_targets_md(targets),
        "",
        _ramp_bound_note(),
        "",
        "### Healthy LM runs",
        "",
        *_healthy_md(healthy),
        "",
        "### Healthy LM runs: false alarms by code and by place",
        "",
        "Warning/error findings without the noise-made events, pooled over noise levels. A "
        "finding falls at the first place that holds its step: the last 5% of the run, the "
        "first 100 steps, warmup, ≤ max(200 steps, 5 points) after an epoch boundary, a "
        "schedule change or the curriculum step, inside a hump, the decay tail (WSD cooldown, "
        "else the last 20%), elsewhere.",
        "",
        *_where_md(healthy),
        "",
        "### LM events",
        "",
        *_events_md(cells),
        "",
        "### Rank drifts and shifts in LM cohorts",
        "",
        *_ranks_md(cells, healthy),
    ]
