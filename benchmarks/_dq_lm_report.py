"""Summaries, targets and the Markdown section of the LM families (issue #36).

Works on the plain records of `_dq_lm_score` (as the JSON keeps them), like `_dq_report`
does for the main grid. The targets are the main grid's, prefixed `L`, judged per
logging interval (one noise family), plus the issue's own: events next to an epoch
boundary or a schedule change (LE1), healthy LM runs (LF1-LF3) and linear rank drifts (LD1).
"""

from __future__ import annotations

from collections import Counter

from _dq_lm_score import (
    LM_FAMILY,
    LM_INTERVALS,
    OTHER_SHAPES,
    TARGET_SHAPES,
)
from _dq_report import Target, evaluate, judged_target, summarize

MULTI_KINDS = ("bump3pt", "bump10pt", "shift")
NEAR_FEATURE = ("epoch", "schedule")


def lm_summaries(results: list[dict]) -> tuple[list[dict], list[dict]]:
    """Event and rank cells (with their place), and healthy rows, from the LM records."""
    cells, healthy = [], []
    for r in results:
        if not r.get("lm"):
            continue
        if r["mode"] in ("lm-event", "lm-rank"):
            cell = summarize(r)
            cell["place"] = r["place"]
            if r["case"]["kind"] == "rank-drift":
                rel = [x["e"] / x["L"] for x in r["records"] if x.get("d")]
                cell["onset_frac_of_length"] = rel
            cells.append(cell)
        else:
            healthy.append(_healthy_row(r))
    return sorted(cells, key=lambda c: c["key"]), sorted(healthy, key=lambda h: h["key"])


def _healthy_row(result: dict) -> dict:
    recs = [r for r in result["records"] if "x" not in r]
    row = {
        "key": result["key"],
        "mode": result["mode"],
        "case": result["case"],
        "shape": result["place"],
        "runs": len(result["records"]),
        "crashes": len(result["records"]) - len(recs),
        "points": sum(r["points"] for r in recs),
        "verdicts": dict(Counter(r["v"] for r in recs).most_common()),
        "cpu_s": result["cpu_s"],
    }
    if result["mode"] == "lm-rank-healthy":
        row["rank_findings"] = sum(r["rank"] for r in recs)
        return row
    sums = {k: Counter() for k in ("raw", "net", "where", "cw")}
    for r in recs:
        for k, counter in sums.items():
            counter.update(r[k])
    row.update({k: dict(v.most_common()) for k, v in sums.items()})
    row["noise_events"] = sum(r["ne"] for r in recs)
    row["last5"] = sum(r["last5"] for r in recs)
    row["last5_raw"] = sum(r["last5_raw"] for r in recs)
    row["examples"] = [e for r in recs for e in r["ex"]][:6]
    return row


# --- targets ------------------------------------------------------------------------------


def _sel(kinds, k_min=0.0, h_min=0.0, pts_min=0, places=None, sigma=None):
    def select(cell: dict) -> bool:
        c = cell["case"]
        return (
            c["kind"] in kinds
            and (cell["k"] != cell["k"] or cell["k"] >= k_min - 1e-9)  # NaN k: no size
            and (c["h"] is None or c["h"] != c["h"] or c["h"] >= h_min - 1e-9)
            and (cell["points_covered"] or 0) >= pts_min
            and (places is None or cell["place"] in places)
            and (sigma is None or abs(c["sigma"] - sigma) < 1e-9)
        )

    return select


def _onset_events(cell: dict) -> bool:
    return (
        _sel(MULTI_KINDS, 5, 0.05, 3)(cell)
        or _sel(("spike+grad",), 5)(cell)
        or _sel(("spike",), 0, 0.6)(cell)
    )


LM_TARGETS = (
    Target("LR1", "R1 on the LM families: events over ≥ 3 logged points (bumps, shifts) at ≥ 5σ "
           "and ≥ 5%, every place: recall ≥ 95%", _sel(MULTI_KINDS, 5, 0.05, 3), "recall", 0.95),
    Target("LR2", "R2: one-point spikes with a grad-norm surge (50x) at ≥ 5σ: recall ≥ 95%",
           _sel(("spike+grad",), 5), "recall", 0.95),
    Target("LR3", "R3: one-point spikes without a cause, +60% and +100%: recall ≥ 95%",
           _sel(("spike",), 0, 0.6), "recall", 0.95),
    Target("LR4a", "R4a: events over ≥ 3 points at ≥ 8σ (and ≥ 5%): recall ≥ 99%",
           _sel(MULTI_KINDS, 8, 0.05, 3), "recall", 0.99),
    Target("LR4b", "R4b: spikes with a cause at ≥ 8σ: recall ≥ 99%",
           _sel(("spike+grad",), 8), "recall", 0.99),
    Target("LR4c", "R4c: spikes without a cause, +60% and +100%: recall ≥ 99%",
           _sel(("spike",), 0, 0.6), "recall", 0.99),
    Target("LS1", "S1: a shift (≥ 5σ, ≥ 5%) is a persistent spike at its first step (±2 "
           "points): ≥ 95%", _sel(("shift",), 5, 0.05), "persistent", 0.95),
    Target("LS2", "S2: …with no divergence/plateau starting before it: ≤ 5%",
           _sel(("shift",), 5, 0.05), "early_div", 0.05, higher_is_better=False),
    Target("LE1", "Events within 100 steps after an epoch boundary or a schedule change, ≥ 5σ "
           "and ≥ 5% over ≥ 3 logged points: recall ≥ 95%",
           _sel(MULTI_KINDS, 5, 0.05, 3, NEAR_FEATURE), "recall", 0.95),
    Target("LF1", "Healthy runs with AR(1) noise, warmups, cosine/linear/WSD decay, epoch drops: "
           "≤ 1 warning/error finding per 10^5 logged points (findings the noise-made events "
           "explain excused; raw rate beside)", None, "lm_fa", 1.0, higher_is_better=False),
    Target("LF2", "…and none in the last 5% of a run (warning/error findings there, excused as "
           "in LF1)", None, "lm_last5", 0.0, higher_is_better=False),
    Target("LF3", "Healthy runs with a +3-4% curriculum step (under the bar) or a mixture hump: "
           "≤ 1 warning/error finding per 10^5 logged points", None, "lm_fa_other", 1.0,
           higher_is_better=False),
    Target("LO1", "O1: onset within 2 logged points for the events of LR1-LR3 (p95 |error|)",
           _onset_events, "onset_pts", 2.0, higher_is_better=False),
    Target("LO2", "O2: accelerating ramps (+25%, +50% by the end): ≥ 95% detected with onset "
           "within 5% of the ramp's length", _sel(("ramp",)), "within_frac", 0.95,
           tolerance=0.05),
    Target("LO3", "O3: rank level shift ≥ 50% in a cohort of 8 with a 15% spread: ≥ 95% within "
           "max(10 steps, one logging interval)", _sel(("rank-shift",), 0, 0.5),
           "within_steps", 0.95, tolerance=10.0),
    Target("LD1", "Linear rank drift reaching 3-5σ of the spread by its end, cohort of 8: ≥ 95% "
           "detected with onset within 10% of the drift's length", _sel(("rank-drift",)),
           "within_frac", 0.95, tolerance=0.10),
)  # fmt: skip


def _fa(target: Target, healthy: list[dict], interval: int) -> dict:
    shapes = OTHER_SHAPES if target.measure == "lm_fa_other" else TARGET_SHAPES
    rows = [
        h
        for h in healthy
        if h["mode"] == "lm-healthy" and h["case"]["interval"] == interval and h["shape"] in shapes
    ]
    points = sum(h["points"] for h in rows)
    if target.measure == "lm_last5":
        value = sum(h["last5"] for h in rows)
        extra = {"raw": sum(h["last5_raw"] for h in rows)}
    else:
        net = sum(sum(h["net"].values()) for h in rows)
        raw = sum(sum(h["raw"].values()) for h in rows)
        value = 1e5 * net / points if points else None
        extra = {
            "findings": net,
            "raw": 1e5 * raw / points if points else None,
            "noise_events": 1e5 * sum(h["noise_events"] for h in rows) / points if points else None,
        }
    ok = value is not None and value <= target.bar + 1e-12
    return {"value": value, "n": points, "pass": ok, **extra}


def lm_check_targets(cells: list[dict], healthy: list[dict]) -> list[dict]:
    out = []
    for target in LM_TARGETS:
        scopes = {}
        for interval in LM_INTERVALS:
            if target.measure.startswith("lm_"):
                result = _fa(target, healthy, interval)
            else:
                result = evaluate(target, cells, healthy, interval, LM_FAMILY)
            if result["n"]:
                scopes[f"{interval}/{LM_FAMILY}"] = result
        out.append(judged_target(target, scopes))
    return out
