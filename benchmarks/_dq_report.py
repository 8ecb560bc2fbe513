"""Summaries, target checks and the Markdown report of benchmarks/detection_quality.py.

Everything here works on the plain records the workers return (and that the
JSON keeps), so an old JSON can be re-summarised and compared with a new one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from _dq_synth import BUMP_STEPS, FAMILIES, RAMP_KINDS, Case

FAMILY_LABEL = {"gamma": "gamma", "student-t3": "t(3)", "real": "real"}
SINGLE_ORDER = (
    "spike",
    "spike+grad",
    "spike+lr",
    "bump3",
    "bump10",
    "bump30",
    "shift",
    "ramp",
    "ramp-short",
    "plateau",
    "nan-tail",
    "nan-point",
    "inf-point",
    "scale-collapse",
)
RANK_ORDER = ("rank-shift", "rank-nonfinite", "rank-silent")
KIND_TITLE = {
    "spike": "One-point spike, no cause",
    "spike+grad": "One-point spike with a cause: pre-clip grad-norm surge (50x) at the same point",
    "spike+lr": "One-point spike with a cause: LR doubles at the same point and stays up",
    "bump3": "Bump of 3 steps",
    "bump10": "Bump of 10 steps",
    "bump30": "Bump of 30 steps",
    "shift": "Permanent level shift",
    "ramp": "Slow ramp to the end of the run (divergence)",
    "ramp-short": "Ramp over 10% of the run, then holding the new level (divergence)",
    "plateau": "Small upward drift to the end of the run, below the 5% divergence bar (plateau)",
    "nan-tail": "Loss NaN from the onset to the end",
    "nan-point": "One NaN loss point",
    "inf-point": "One +Inf loss point",
    "scale-collapse": "fp16 loss scale halving at every point until below 1",
    "rank-shift": "One rank's level shift",
    "rank-nonfinite": "One rank going NaN (to the end)",
    "rank-silent": "One rank going silent (no rows after the onset)",
}


def _median(values) -> float | None:
    return float(np.median(values)) if len(values) else None


def _p95(values) -> float | None:
    return float(np.quantile(np.abs(values), 0.95)) if len(values) else None


def summarize(result: dict) -> dict:
    """One cell: recall, precision, onset errors, what else fired."""
    case = Case(**result["case"])
    # an LM event whose logged points fell under the spec's bar is no event to find (#36)
    below = sum(bool(r.get("below")) for r in result["records"])
    recs = [r for r in result["records"] if not r.get("below")]
    n = len(recs)
    tp = sum(bool(r.get("d")) for r in recs)
    fam = sum(r.get("f", 0) for r in recs)
    errs = [r["e"] for r in recs if r.get("d")]
    out = {
        "key": result["key"],
        "case": result["case"],
        "k": case.k,
        "n": n,
        "tp": tp,
        "family_findings": fam,
        "recall": tp / n if n else None,
        "precision": tp / fam if fam else None,
        "onset_steps": errs,
        "onset_median_pts": None if not errs else _median(errs) / case.interval,
        "onset_max_pts": None if not errs else max(abs(e) for e in errs) / case.interval,
        "points_covered": _median([r["pts"] for r in recs if "pts" in r]),
        "crashes": sum("x" in r for r in recs),
        "verdicts": dict(Counter(r.get("v", "crash") for r in recs).most_common()),
        "other_codes": dict(Counter(c for r in recs for c in r.get("c", [])).most_common()),
        "missed_as_info": dict(
            Counter(c for r in recs if not r.get("d") for c in r.get("i", [])).most_common()
        ),
        "cpu_s": result["cpu_s"],
        "below_bar": below,
        # with the events under the bar counted too: the recall the old truth measured
        "tp_all": sum(bool(r.get("d")) for r in result["records"]),
    }
    if case.kind in RAMP_KINDS:
        rel = [r["e"] / r["L"] for r in recs if r.get("d")]
        out["onset_frac_of_length"] = rel
        out["onset_median_frac"] = _median(rel)
        out["onset_max_frac"] = max((abs(v) for v in rel), default=None)
    if case.kind == "shift":
        for name in ("persistent", "early_div", "any_div"):
            out[name] = sum(bool(r.get(name)) for r in recs)
        out["types"] = dict(Counter(str(r.get("type")) for r in recs if r.get("d")))
    return out


def summarize_healthy(results: list[dict]) -> list[dict]:
    rows = []
    for result in results:
        case = Case(**result["case"])
        recs = result["records"]
        fam: Counter = Counter()
        net: Counter = Counter()
        other: Counter = Counter()
        for r in recs:
            fam.update(r.get("fam", {}))
            net.update(r.get("fam_net", r.get("fam", {})))
            other.update(r.get("other", {}))
        rows.append(
            {
                "key": result["key"],
                "case": result["case"],
                "runs": len(recs),
                "run_points": result["points"],
                "points": sum(r.get("points", 0) for r in recs),
                "steps": sum(r.get("points", 0) for r in recs) * case.interval,
                "families": dict(fam),
                "families_net": dict(net),
                "noise_events": sum(r.get("ne", 0) for r in recs),
                "other": dict(other.most_common()),
                "not_healthy": sum(r.get("v") != "healthy" for r in recs),
                "verdicts": dict(Counter(r.get("v", "crash") for r in recs).most_common()),
                "blips": sum(r.get("blips", 0) for r in recs),
                "crashes": sum("x" in r for r in recs),
                "cpu_s": result["cpu_s"],
            }
        )
    return rows


# --- targets ------------------------------------------------------------------------------


def _case(cell: dict) -> Case:
    return Case(**cell["case"])


def _multi_point(k_min: float) -> Callable[[dict], bool]:
    def select(cell: dict) -> bool:
        c = _case(cell)
        covered = cell["points_covered"] or 0
        return (
            (c.kind in BUMP_STEPS or c.kind == "shift")
            and covered >= 3
            and c.k >= k_min - 1e-9
            and c.h >= 0.05 - 1e-9
        )

    return select


def _caused(k_min: float) -> Callable[[dict], bool]:
    def select(cell: dict) -> bool:
        c = _case(cell)
        return c.kind in ("spike+grad", "spike+lr") and c.k >= k_min - 1e-9

    return select


R3_JUDGED_EXCESS = 0.6  # the smallest one-point size without a cause that R3 judges


def _above_bar(cell: dict) -> bool:
    # +50% sits exactly on the 1.5x bar, where a noisy baseline makes it a coin toss;
    # the target is judged on the sizes clearly above it (+60%, +100%; all >= 20 sigma)
    c = _case(cell)
    return c.kind == "spike" and c.h >= R3_JUDGED_EXCESS - 1e-9 and c.k >= 8


def _shift5(cell: dict) -> bool:
    c = _case(cell)
    return c.kind == "shift" and c.k >= 5 - 1e-9 and c.h >= 0.05 - 1e-9


def _onset_spikes(cell: dict) -> bool:
    return _multi_point(5)(cell) or _caused(5)(cell) or _above_bar(cell)


def _diverging_ramp(cell: dict) -> bool:
    c = _case(cell)
    return c.kind in ("ramp", "ramp-short")


def _rank_shift_target(cell: dict) -> bool:
    c = _case(cell)
    return c.kind == "rank-shift" and c.h >= 0.5 - 1e-9 and abs(c.sigma - 0.15) < 1e-9


@dataclass(frozen=True)
class Target:
    code: str
    text: str
    select: Callable[[dict], bool] | None
    measure: str  # recall | persistent | early_div | fa | onset_pts | within_frac | within_steps
    bar: float
    higher_is_better: bool = True
    run_points: int = 0  # healthy-run length a false-alarm target is judged on
    tolerance: float = 0.0  # onset tolerance of the "within" measures


TARGETS = (
    Target(
        "R1",
        "Recall ≥ 95%: events covering ≥ 3 logged points (bumps, shifts) at ≥ 5σ and "
        "≥ 5% of the level",
        _multi_point(5),
        "recall",
        0.95,
    ),
    Target(
        "R2",
        "Recall ≥ 95%: one-point spikes with a cause (grad-norm surge, LR jump) at ≥ 5σ",
        _caused(5),
        "recall",
        0.95,
    ),
    Target(
        "R3",
        "Recall ≥ 95%: one-point spikes without a cause above the materiality bar "
        "(z ≥ 6 and ≥ 1.5× the baseline: sizes +60%, +100%)",
        _above_bar,
        "recall",
        0.95,
    ),
    Target(
        "R4a",
        "Recall ≥ 99% at ≥ 8σ: events covering ≥ 3 logged points (and ≥ 5% of the level)",
        _multi_point(8),
        "recall",
        0.99,
    ),
    Target(
        "R4b",
        "Recall ≥ 99% at ≥ 8σ: one-point spikes with a cause",
        _caused(8),
        "recall",
        0.99,
    ),
    Target(
        "R4c",
        "Recall ≥ 99% at ≥ 8σ: one-point spikes without a cause above the bar",
        _above_bar,
        "recall",
        0.99,
    ),
    Target(
        "S1",
        "A level shift (≥ 5σ, ≥ 5%) is a spike at its first step (±2 points), not recovered "
        "(persistent): ≥ 95% of shifts",
        _shift5,
        "persistent",
        0.95,
    ),
    Target(
        "S2",
        "…and not a divergence or plateau starting before it: ≤ 5% of shifts",
        _shift5,
        "early_div",
        0.05,
        higher_is_better=False,
    ),
    Target(
        "F1a",
        "Healthy runs of 3,000 points (as long as the event runs): warning/error spike findings "
        "where the logged data does not meet the spec's bar ≤ 1 per 10^5 logged points (a "
        "finding at a point the noise itself made material is its detection, #36)",
        None,
        "fa",
        1.0,
        higher_is_better=False,
        run_points=3000,
    ),
    Target(
        "F1b",
        "Healthy runs of 50,000 points: as F1a, ≤ 1 per 10^5 logged points",
        None,
        "fa",
        1.0,
        higher_is_better=False,
        run_points=50_000,
    ),
    Target(
        "O1",
        "Onset within 2 logged points for the spikes, bumps and shifts of R1–R3 "
        "(95th percentile of |error| over detections)",
        _onset_spikes,
        "onset_pts",
        2.0,
        higher_is_better=False,
    ),
    Target(
        "O2",
        "Divergence onset within 5% of the ramp's length: ≥ 95% of the ramps are detected "
        "with |onset error| ≤ 5% of their length (a missed ramp is not on time)",
        _diverging_ramp,
        "within_frac",
        0.95,
        tolerance=0.05,
    ),
    Target(
        "O3",
        "Rank level shift ≥ 50% in a cohort with a 15% per-step spread: ≥ 95% of the shifts "
        "are detected with |onset error| ≤ max(10 steps, one logging interval) (a missed "
        "shift is not on time)",
        _rank_shift_target,
        "within_steps",
        0.95,
        tolerance=10.0,
    ),
)


def evaluate(
    target: Target, cells: list[dict], healthy: list[dict], interval: int, family: str
) -> dict:
    """One target in one (interval, noise family) scope, pooled over its cells."""
    if target.measure == "fa":
        rows = [
            h
            for h in healthy
            if h["case"]["interval"] == interval
            and h["case"]["family"] == family
            and not h["case"]["ranks"]
            and h["run_points"] == target.run_points
        ]
        points = sum(h["points"] for h in rows)
        raw = sum(h["families"].get("spike", 0) for h in rows)
        # #36: a finding at a point the noise itself made material is a detection; runs
        # saved before the truth labelling have only the raw count
        count = sum(h.get("families_net", h["families"]).get("spike", 0) for h in rows)
        made = sum(h.get("noise_events", 0) for h in rows)
        value = 1e5 * count / points if points else None
        extra = {
            "findings": count,
            "raw": 1e5 * raw / points if points else None,
            "noise_events": 1e5 * made / points if points else None,
        }
        return _verdict(target, value, n=points, extra=extra)
    chosen = [
        c
        for c in cells
        if c["case"]["interval"] == interval
        and c["case"]["family"] == family
        and target.select is not None
        and target.select(c)
    ]
    n = sum(c["n"] for c in chosen)
    if not chosen or n == 0:
        return {"value": None, "n": 0, "pass": None, "worst": None}
    tp = sum(c["tp"] for c in chosen)
    extra = {"tp": tp}
    if target.measure == "recall":
        value = tp / n
        below = sum(c.get("below_bar", 0) for c in chosen)
        if below:  # the raw recall beside, as the healthy runs' raw rate is (#36)
            extra["raw"] = sum(c.get("tp_all", c["tp"]) for c in chosen) / (n + below)
            extra["below_bar"] = below
        # a cell whose every run was under the bar has no recall (n 0): not a worst one
        worst = min((c for c in chosen if c["n"]), key=lambda c: c["recall"])
        extra["worst"] = f"{_cell_name(worst)}: {_pct(worst['recall'])}"
    elif target.measure == "persistent":
        value = sum(c["persistent"] for c in chosen) / n
    elif target.measure == "early_div":
        value = sum(c["early_div"] for c in chosen) / n
    elif target.measure == "onset_pts":
        errs = [e / c["case"]["interval"] for c in chosen for e in c["onset_steps"]]
        value = _p95(errs)
        extra["recall"] = tp / n
    elif target.measure in ("within_frac", "within_steps"):
        field = "onset_frac_of_length" if target.measure == "within_frac" else "onset_steps"
        # O3 (#36): on time within max(10 steps, one logging interval)
        errs = [(e, c["case"]["interval"]) for c in chosen for e in c[field]]
        value = sum(abs(e) <= _tolerance(target, i) + 1e-12 for e, i in errs) / n
        errs = [e for e, _ in errs]
        extra["recall"] = tp / n
        extra["p95"] = _p95(errs)
    else:
        raise ValueError(target.measure)
    return _verdict(target, value, n=n, extra=extra)


def _tolerance(target: Target, interval: int) -> float:
    if target.measure == "within_steps":
        return max(target.tolerance, interval)
    return target.tolerance


def _verdict(target: Target, value: float | None, n: int, extra: dict) -> dict:
    if value is None:
        ok = False
    elif target.higher_is_better:
        ok = value >= target.bar - 1e-12
    else:
        ok = value <= target.bar + 1e-12
    return {"value": value, "n": n, "pass": ok, **extra}


def check_targets(cells: list[dict], healthy: list[dict], intervals, families) -> list[dict]:
    out = []
    for target in TARGETS:
        scopes = {}
        for interval in intervals:
            for family in families:
                result = evaluate(target, cells, healthy, interval, family)
                if result["n"]:
                    scopes[f"{interval}/{family}"] = result
        out.append(judged_target(target, scopes))
    return out


def judged_target(target: Target, scopes: dict[str, dict]) -> dict:
    """A target with its per-scope results: it passes when every judged scope passes."""
    judged = [s for s in scopes.values() if s["pass"] is not None]
    return {
        "code": target.code,
        "text": target.text,
        "measure": target.measure,
        "bar": target.bar,
        "higher_is_better": target.higher_is_better,
        "scopes": scopes,
        "pass": bool(judged) and all(s["pass"] for s in judged),
        "failing": sum(not s["pass"] for s in judged),
        "judged": len(judged),
    }


# --- formatting -------------------------------------------------------------------------


def _pct(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    text = f"{100 * value:.{digits}f}"
    return ("100" if text.startswith("100") else text) + "%"


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def _cell_name(cell: dict) -> str:
    c = _case(cell)
    name = f"{c.kind} {c.size} σ={_pct(c.sigma, 0)}"
    return name + (f" ranks={c.ranks}" if c.ranks else "")


def format_measure(measure: str, value: float | None) -> str:
    if value is None:
        return "—"
    if measure in ("recall", "persistent", "early_div", "within_frac", "within_steps"):
        return _pct(value)
    if measure == "fa":
        return f"{value:.2f}/1e5"
    return _num(value)


def _worst_scope(target: dict) -> tuple[str, dict] | None:
    scopes = target["scopes"]
    if not scopes:
        return None

    def badness(item):
        value = item[1]["value"]
        if value is None:
            return math.inf
        return -value if target["higher_is_better"] else value

    return max(scopes.items(), key=badness)


def target_summary_md(targets: list[dict]) -> list[str]:
    lines = [
        "| target | requirement | worst scope (every/noise) | measured there | bar "
        "| scopes failing | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in targets:
        worst = _worst_scope(t)
        where, value = ("—", None) if worst is None else (worst[0], worst[1]["value"])
        bar = ("≥ " if t["higher_is_better"] else "≤ ") + format_measure(t["measure"], t["bar"])
        lines.append(
            f"| {t['code']} | {t['text']} | {where} | {format_measure(t['measure'], value)} "
            f"| {bar} | {t['failing']} of {t['judged']} | {'PASS' if t['pass'] else 'FAIL'} |"
        )
    return lines


def target_matrix_md(targets: list[dict], intervals, families) -> list[str]:
    scopes = [(i, f) for i in intervals for f in families]
    head = " | ".join(f"every {i}, {FAMILY_LABEL[f]}" for i, f in scopes)
    lines = [f"| target | {head} |", "|---|" + "---|" * len(scopes)]
    for t in targets:
        cells = []
        for i, f in scopes:
            s = t["scopes"].get(f"{i}/{f}")
            if s is None:
                cells.append("n/a")
                continue
            mark = "PASS" if s["pass"] else "FAIL"
            detail = f" (n={s['n']})"
            if t["measure"] == "fa":
                detail = (
                    f" (raw {s['raw']:.2f}, noise-made events {s['noise_events']:.2f})"
                    if s.get("raw") is not None
                    else ""
                )
            if t["measure"] == "onset_pts":
                detail = f" (recall {_pct(s['recall'], 0)}, n={s['n']})"
            elif t["measure"].startswith("within"):
                p95 = s.get("p95")
                shown = (
                    "—"
                    if p95 is None
                    else (_pct(p95, 0) if t["measure"] == "within_frac" else _num(p95, 0))
                )
                detail = f" (recall {_pct(s['recall'], 0)}, p95 error {shown}, n={s['n']})"
            cells.append(f"{format_measure(t['measure'], s['value'])} {mark}{detail}")
        lines.append(f"| {t['code']} | " + " | ".join(cells) + " |")
    return lines


def _onset_text(cell: dict) -> str:
    if cell["case"]["kind"] in RAMP_KINDS:
        med, mx = cell.get("onset_median_frac"), cell.get("onset_max_frac")
        if med is None:
            return "—"
        return f"{100 * med:+.1f}/{100 * mx:.1f}%L"
    med, mx = cell["onset_median_pts"], cell["onset_max_pts"]
    if med is None:
        return "—"
    return f"{med:+.3g}/{mx:.3g}"


def kind_table_md(kind: str, cells: list[dict], families) -> list[str]:
    mine = [c for c in cells if c["case"]["kind"] == kind]
    if not mine:
        return []
    rank = bool(mine[0]["case"]["ranks"])
    by_key: dict[tuple, dict[str, dict]] = {}
    for c in mine:
        case = _case(c)
        row = (
            (case.ranks, case.sigma, _size_order(case), case.interval)
            if rank
            else (case.sigma, _size_order(case), case.interval)
        )
        by_key.setdefault(row, {})[case.family] = c
    fam_head = " | ".join(f"{FAMILY_LABEL[f]} R | P | onset" for f in families)
    if rank:
        head = f"| ranks | spread | size | ×σ | every | {fam_head} |"
        width = 5
    else:
        head = f"| size | ×σ | % of level | noise σ | every | pts | {fam_head} |"
        width = 6
    lines = [head, "|" + "---|" * (width + 3 * len(families))]
    for row in sorted(by_key):
        group = by_key[row]
        any_cell = next(iter(group.values()))
        case = _case(any_cell)
        k = "—" if math.isnan(case.k) else _num(case.k)
        h = "—" if math.isnan(case.h) else _pct(case.h, 0 if case.h >= 0.1 else 1)
        if rank:
            prefix = (
                f"| {case.ranks} | {_pct(case.sigma, 0)} | {case.size} | {k} | {case.interval} |"
            )
        else:
            pts = _num(any_cell["points_covered"], 0)
            prefix = (
                f"| {case.size} | {k} | {h} | {_pct(case.sigma, 0)} | {case.interval} | {pts} |"
            )
        parts = []
        for f in families:
            c = group.get(f)
            if c is None:
                parts.append("— | — | —")
                continue
            parts.append(f"{_pct(c['recall'], 0)} | {_pct(c['precision'], 0)} | {_onset_text(c)}")
        lines.append(prefix + " " + " | ".join(parts) + " |")
    lines += ["", _kind_footer(mine)]
    return lines


def _size_order(case: Case) -> float:
    return case.h if math.isfinite(case.h) else -1.0


def _kind_footer(cells: list[dict]) -> str:
    n = sum(c["n"] for c in cells)
    verdicts: Counter = Counter()
    other: Counter = Counter()
    missed: Counter = Counter()
    crashes = sum(c["crashes"] for c in cells)
    for c in cells:
        verdicts.update(c["verdicts"])
        other.update(c["other_codes"])
        missed.update(c["missed_as_info"])
    missed_n = sum(c["n"] - c["tp"] for c in cells)
    text = f"{n} runs. Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.most_common(6))
    if other:
        text += ". Other warning/error codes (runs): " + ", ".join(
            f"{k} {v}" for k, v in other.most_common(6)
        )
    if missed_n:
        text += f". Missed events: {missed_n}"
        if missed:
            text += "; info findings at them: " + ", ".join(
                f"{k} {v}" for k, v in missed.most_common(4)
            )
    if crashes:
        text += f". analyze() raised in {crashes} runs"
    return text + "."


def shift_table_md(cells: list[dict], families) -> list[str]:
    mine = sorted(
        (c for c in cells if c["case"]["kind"] == "shift"),
        key=lambda c: (c["case"]["sigma"], c["case"]["h"], c["case"]["interval"]),
    )
    if not mine:
        return []
    fam_head = " | ".join(f"{FAMILY_LABEL[f]} persistent | earlier div." for f in families)
    lines = [
        f"| size | noise σ | every | {fam_head} |",
        "|---|---|---|" + "---|---|" * len(families),
    ]
    rows: dict[tuple, dict] = {}
    for c in mine:
        case = _case(c)
        rows.setdefault((case.h, case.sigma, case.interval, case.size), {})[case.family] = c
    for (_, sigma, interval, size), group in rows.items():
        parts = []
        for f in families:
            c = group.get(f)
            if c is None:
                parts.append("— | —")
                continue
            parts.append(
                f"{_pct(c['persistent'] / c['n'], 0)} | {_pct(c['early_div'] / c['n'], 0)}"
            )
        lines.append(f"| {size} | {_pct(sigma, 0)} | {interval} | " + " | ".join(parts) + " |")
    return lines


def _t3_tail(excess_sigmas: float) -> float:
    """P(eps >= x) for eps Student-t(3) scaled to unit variance (closed form for df 3)."""
    u = excess_sigmas  # t = x * sqrt(3), and the closed form is in t / sqrt(3)
    return 0.5 - (math.atan(u) + u / (1.0 + u * u)) / math.pi


def t3_bar_note(sigmas: tuple[float, ...], bar_ratio: float) -> list[str]:
    """Why F1 and R3 cannot both hold under t(3) noise: the noise alone makes points
    that meet the spec's one-point bar, at a rate computed here, not measured."""
    judged = R3_JUDGED_EXCESS
    target = next(t.bar for t in TARGETS if t.code == "F1a")
    rows = [
        (sigma, _t3_tail((bar_ratio - 1.0) / sigma), _t3_tail(judged / sigma)) for sigma in sigmas
    ]
    pooled_bar = sum(r[1] for r in rows) / len(rows) * 1e5
    pooled_judged = sum(r[2] for r in rows) / len(rows) * 1e5
    cells = "; ".join(
        f"σ = {_pct(sigma, 0)}: {at_bar * 1e5:.2f} per 10^5 points at ≥ {bar_ratio:g}×, "
        f"{at_judged * 1e5:.2f} at ≥ {1 + judged:g}×"
        for sigma, at_bar, at_judged in rows
    )
    return [
        "**F1 against R3 under t(3) noise.** With `loss = level·(1 + σ·ε)` and ε a unit-variance "
        "t(3) draw, the noise alone puts a single point at or above the spec's one-point "
        f"materiality bar ({bar_ratio:g}× its level; z ≥ 6 is then far exceeded) with the "
        f"probability `P(ε ≥ ({bar_ratio:g} - 1)/σ)` (closed form for 3 degrees of freedom): "
        f"{cells}. Pooled over the noise levels as F1 pools them: {pooled_bar:.2f} per 10^5 "
        f"at the bar and {pooled_judged:.2f} at +{judged:.0%}, against F1's "
        f"{target:g} per 10^5. Such a point is, by the spec, a spike, and R3 asks that "
        f"a one-point spike of +{judged:.0%} without a cause be found in ≥ 95% of runs in "
        "the same noise: no rule that judges a lone point by its size can meet both in the "
        "t(3) scopes, and stab keeps the spec's bar (R3) there. Issue #36 decided it: the "
        "generator knows its draws, such a point is labelled an event, and F1 counts only "
        "the findings where the logged data does not meet the bar (the target matrix gives "
        "the raw rate and the noise-made events per 10^5 beside).",
    ]


def healthy_table_md(rows: list[dict]) -> list[str]:
    single = [r for r in rows if not r["case"]["ranks"]]
    ranked = [r for r in rows if r["case"]["ranks"]]
    fams = ("spike", "divergence", "plateau", "nan", "loss-scale")
    lines = [
        "| noise | every | noise σ | run length | runs | logged points | steps | "
        + " | ".join(fams)
        + " | other warning/error | verdict not healthy | blips (info) per 1e5 |",
        "|---|---|---|---|---|---|---|" + "---|" * (len(fams) + 3),
    ]
    for r in sorted(
        single,
        key=lambda r: (
            FAMILIES.index(r["case"]["family"]),
            r["run_points"],
            r["case"]["interval"],
            r["case"]["sigma"],
        ),
    ):
        per = 1e5 / r["points"]
        counts = " | ".join(
            f"{r['families'].get(f, 0)} ({r['families'].get(f, 0) * per:.2f})" for f in fams
        )
        other = ", ".join(f"{k} {v}" for k, v in r["other"].items()) or "0"
        lines.append(
            f"| {FAMILY_LABEL[r['case']['family']]} | {r['case']['interval']} "
            f"| {_pct(r['case']['sigma'], 0)} | {r['run_points']:,} | {r['runs']} "
            f"| {r['points']:,} | {r['steps']:,} "
            f"| {counts} | {other} | {r['not_healthy']} | {r['blips'] * per:.0f} |"
        )
    if ranked:
        lines += [
            "",
            "Healthy per-rank cohorts (every step; rank-family warning/error findings):",
            "",
            "| noise | ranks | spread | runs | rank-points | rank findings | per 1e5 rank-points "
            "| verdict not healthy |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(
            ranked,
            key=lambda r: (
                FAMILIES.index(r["case"]["family"]),
                r["case"]["ranks"],
                r["case"]["sigma"],
            ),
        ):
            count = r["families"].get("rank", 0)
            lines.append(
                f"| {FAMILY_LABEL[r['case']['family']]} | {r['case']['ranks']} "
                f"| {_pct(r['case']['sigma'], 0)} | {r['runs']} | {r['points']:,} | {count} "
                f"| {1e5 * count / r['points']:.2f} | {r['not_healthy']} |"
            )
    return lines


def compare_md(old: list[dict], new: list[dict]) -> list[str]:
    """The scopes whose value moved since a previous run, and the targets that flipped."""
    before = {t["code"]: t for t in old}
    lines = ["| target | scope | before | after | change |", "|---|---|---|---|---|"]
    same = 0
    for t in new:
        o = before.get(t["code"])
        if o is None:
            continue
        for scope, s in t["scopes"].items():
            prev = o["scopes"].get(scope)
            if prev is None:
                continue
            if prev["value"] == s["value"] and prev["pass"] == s["pass"]:
                same += 1
                continue
            flip = ""
            if prev["pass"] != s["pass"]:
                flip = "now PASS" if s["pass"] else "now FAIL"
            lines.append(
                f"| {t['code']} | {scope} | {format_measure(t['measure'], prev['value'])} "
                f"| {format_measure(t['measure'], s['value'])} | {flip} |"
            )
    if len(lines) == 2:
        return [f"No target value changed ({same} scopes compared)."]
    return [*lines, "", f"{same} other scopes unchanged."]
