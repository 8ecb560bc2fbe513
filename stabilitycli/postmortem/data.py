"""The numbers a post-mortem needs (seed 003, spec 7), computed from a run.

`build(analysis, run, thresholds)` returns a `Postmortem`: plain data that the
Markdown renderer (`report/postmortem.py`) only formats. Everything here comes
from the `Analysis` (findings and their evidence) and the run's series; what
the data cannot say (which tokens were in the batch, the lesson) is left as
`None` and rendered as "needs a human", never guessed.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

import numpy as np

from stabilitycli.classify.questions import cause_texts
from stabilitycli.classify.remedies import remedies_for
from stabilitycli.classify.tree import log_shows
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Analysis, Finding
from stabilitycli.core.records import dataclass
from stabilitycli.core.settings import sentence
from stabilitycli.detect.kinds.divergence import DIVERGENCE
from stabilitycli.detect.kinds.nan import NAN, NAN_COUNT
from stabilitycli.detect.kinds.spike import RECURRING_SPIKES, SPIKE
from stabilitycli.detect.log_words import read_log_words
from stabilitycli.detect.overflow_ledger import ledger_of, scale_text
from stabilitycli.detect.series import SeriesView, build_view
from stabilitycli.detect.spike_words import sigma_text
from stabilitycli.detect.windows import median_interval, trailing_stats
from stabilitycli.frame import RunData
from stabilitycli.postmortem import verdicts
from stabilitycli.postmortem.hypotheses import (
    Hypothesis,
    grad_norm_name,
    nan_hypotheses,
    spike_hypotheses,
)
from stabilitycli.postmortem.incident import (
    Cost,
    Incident,
    below_words,
    cost_between,
    dtype_symptom,
    fmt,
    rise_from_words,
    round_up,
    series_at,
    trend_symptoms,
)

EMA_STEPS = 50  # the template's "pre-spike loss (50-step EMA)"


@dataclass
class Postmortem:
    run: str
    path: str
    verdict: str
    cause: str | None
    summary: str
    dtype: str | None
    dtype_origin: str
    first_step: int | None
    last_step: int | None
    incidents: list[Incident] = field(default_factory=list)
    remediation: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: str | None = None  # the thresholds not at their defaults, and where from


def build(analysis: Analysis, run: RunData, thresholds: Thresholds | None = None) -> Postmortem:
    """Fill every section the data can fill, one incident per spike / NaN / divergence."""
    thresholds = thresholds or Thresholds()
    view = build_view(run)
    src = analysis.source
    pm = Postmortem(
        run=src.run or src.path,
        path=src.path,
        verdict=analysis.verdict.code,
        cause=analysis.verdict.cause,
        summary=analysis.verdict.summary,
        dtype=src.dtype,
        dtype_origin=src.dtype_origin,
        first_step=src.first_step,
        last_step=src.last_step,
        remediation=list(analysis.verdict.remediation),
        settings=sentence(analysis.extras.get("settings")),
    )
    # the sections of the other verdicts (rank, fp16, plateau, too short) live in verdicts.py
    for finding in analysis.findings:
        if finding.kind is NAN:
            pm.incidents.append(_nan_incident(finding, view, analysis, thresholds))
    pm.incidents += verdicts.rank_incidents(analysis, view)
    ranked = verdicts.ranks_with_incidents(analysis)
    for finding in sorted(
        (f for f in analysis.findings if f.kind in (SPIKE, RECURRING_SPIKES)),
        key=lambda f: f.step or 0,
    ):
        if finding.kind is RECURRING_SPIKES:
            # the group of causeless one-point spikes is one event, told once
            pm.incidents.append(_recurring_incident(finding, view, thr=thresholds))
            continue
        explained = set(finding.evidence.get("explained_by_ranks") or [])
        if explained and explained <= ranked:
            continue  # one event, one account: the rank's section tells this spike of the mean
        pm.incidents.append(_spike_incident(finding, view, analysis, thresholds))
    for finding in analysis.findings:
        if finding.kind is DIVERGENCE:
            pm.incidents.append(_divergence_incident(finding, view, thresholds))
    pm.incidents += verdicts.incidents(analysis, view, thresholds)
    _remedies_from_the_table(pm, analysis, view, thresholds)
    pm.notes = [*src.warnings, *(f"{s.code}: {s.reason}" for s in analysis.skipped)]
    return pm


def _remedies_from_the_table(
    pm: Postmortem, analysis: Analysis, view: SeriesView, thr: Thresholds
) -> None:
    """Every incident's remediation from the one remedy table.

    The incident that is the verdict's event shows the verdict's remedies as they
    are (the terminal, JSON, JUnit and Markdown show the same list); any other
    incident gets the table's row for the verdict it would be on its own.
    """
    shows = log_shows(view.source, _scaler_summary(view))
    said = read_log_words(view)
    lead = next((i for i in pm.incidents if i.verdict == analysis.verdict.code), None)
    for inc in pm.incidents:
        if inc is lead:
            inc.remediation = list(analysis.verdict.remediation)
        elif inc.verdict is not None and inc.kind != "rank":
            event = {} if inc.start is None else {"start": f"step {inc.start}"}
            event |= said.remedy_words(inc.start, thr.remedy_clip_percentile)
            inc.remediation = remedies_for(inc.verdict, inc.cause, thr, shows, event)


def _scaler_summary(view: SeriesView) -> dict[str, Any] | None:
    """What the log shows of a loss scaler, as §3 summarises it (None: §3 does not apply)."""
    if view.source.dtype not in (None, "fp16"):
        return None
    ledger = ledger_of(view)
    scale = ledger.scale
    return {
        "has_scale": ledger.has_scale,
        "scale_drops": scale.drops if scale is not None else 0,
        "scale_rises": scale.rises if scale is not None else 0,
        "has_messages": ledger.has_messages,
    }


# ---------------------------------------------------------------- numbers


def ema_before(view: SeriesView, step: int, span_steps: int = EMA_STEPS) -> float | None:
    """Exponential moving average of the finite loss before `step`, span in steps.

    A log every k steps has span_steps / k points per span, so the smoothing
    covers the same stretch of training whatever the logging interval.
    """
    steps, loss = view.points("loss")
    keep = (steps < step) & np.isfinite(loss)
    if not keep.any():
        return None
    s, v = steps[keep], loss[keep]
    interval = median_interval(s)
    points = max(1.0, span_steps / interval) if interval and interval > 0 else 1.0
    import polars as pl

    # the recursive EMA (s0 = v0, s = a*v + (1-a)*s) over every finite point before the step
    ema = pl.Series(v).ewm_mean(alpha=2.0 / (points + 1.0), adjust=False)
    return float(ema[-1])


def first_logged_at_or_after(view: SeriesView, metric: str, step: int) -> tuple[int, float] | None:
    steps, values = view.points(metric)
    idx = int(np.searchsorted(steps, step))
    if idx >= steps.size:
        return None
    return int(steps[idx]), float(values[idx])


def _batch_symptom(view: SeriesView, step: int) -> Any:
    if not view.has("batch_id"):
        return None
    value = series_at(view, "batch_id", step)
    return (
        int(value) if value is not None and math.isfinite(value) and value == int(value) else value
    )


# ---------------------------------------------------------------- spikes


def _spike_incident(
    finding: Finding, view: SeriesView, analysis: Analysis, thr: Thresholds
) -> Incident:
    ev = finding.evidence
    onset, peak_step = int(ev["onset_step"]), int(ev["peak_step"])
    mu = float(ev["mu"])
    hyps = spike_hypotheses(finding, view, analysis, thr)
    grad = next((h.numbers for h in hyps if h.code == "long-tail-token" and h.numbers), {})
    after = first_logged_at_or_after(view, "loss", peak_step + thr.recovery_window_steps)
    recovered = bool(ev.get("recovered"))
    if after is None:
        recovery: Any = (
            f"did not recover (the log ends within {thr.recovery_window_steps} steps of the peak)"
        )
    elif recovered:
        recovery = f"{fmt(after[1])} (step {after[0]})"
    else:
        recovery = f"did not recover ({fmt(after[1])} at step {after[0]})"
    ema = ema_before(view, onset)
    lr = series_at(view, "lr", onset)
    symptoms: list[tuple[str, Any]] = [
        ("step where the spike began", onset),
        (
            "pre-spike loss (50-step EMA)",
            fmt(ema) if ema is not None else "no loss before the onset",
        ),
        (
            (
                # mu is where the falling curve was at the onset, not the window's mean
                f"baseline local level / sigma (the trend of steps {ev['baseline_first_step']}-"
                f"{ev['baseline_last_step']} at step {onset}, sigma around it)"
                if ev.get("baseline_basis") == "local-level"
                else f"baseline curve around step {onset} / sigma (the median of the points "
                f"logged over steps {ev['baseline_first_step']}-{ev['baseline_last_step']} "
                "either side of it)"
                if ev.get("baseline_basis") == "around"
                else f"baseline mu / sigma (trailing {thr.spike_window_steps} steps"
                + (
                    f": steps {ev['baseline_first_step']}-{ev['baseline_last_step']})"
                    if ev.get("baseline_first_step") is not None
                    else ")"
                )
            ),
            f"{fmt(mu)} / {sigma_text(ev, thr).removeprefix('sigma ')} "
            f"(threshold {fmt(float(ev['threshold']))})",
        ),
        (f"peak loss (step {peak_step})", f"{fmt(float(ev['peak']))} (z = {float(ev['z']):.1f})"),
        (f"loss {thr.recovery_window_steps} steps after the peak", recovery),
        (
            f"{grad_norm_name(view)} at the spike",
            _grad_text(grad) if grad else ("not logged" if not view.has("grad_norm") else None),
        ),
        ("LR at the spike", f"{lr:.4g}" if lr is not None else "not logged"),
        ("dtype regime", dtype_symptom(view)),
        ("batch index at the spike", _batch_symptom(view, onset)),
        ("unusual tokens in that batch", None),
    ]
    if view.has("tokens"):
        tokens = series_at(view, "tokens", onset)
        symptoms.insert(
            1, ("tokens consumed at the onset", f"{tokens:,.0f}" if tokens is not None else None)
        )
    supported = [h for h in hyps if h.status == "supported"]
    root = next((h.root_sentence for h in supported if h.root_sentence), None)
    causes = ev.get("causes") or []
    verification, expects = _spike_checks(view, ev, grad, thr, after, recovered)
    end = ev.get("recovery_step") if recovered else None
    return Incident(
        kind=SPIKE.code,
        title=f"Loss spike at step {onset} ("
        f"{'recovered' if recovered else 'did not recover'}"
        f"{'; divergent: the loss kept rising' if ev['spike_type'] == 3 else ''})"
        + (" - explained by a rank outlier" if ev.get("explained_by_ranks") else ""),
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=root,
        remediation=[],  # from the remedy table (build)
        verification=verification,
        expects=expects,
        cost=cost_between(view, onset, end),
        verdict="spike-recoverable" if recovered else "spike-persistent",
        cause=causes[0]["cause"] if causes else None,
        start=onset,
    )


def _steps_list(steps: list[int], shown: int = 20) -> str:
    """'3300, 3650, 4000' (the first `shown`), and 'and N more' for the rest."""
    head = ", ".join(str(int(s)) for s in steps[:shown])
    return head + (f", and {len(steps) - shown} more" if len(steps) > shown else "")


def _recurring_incident(finding: Finding, view: SeriesView, thr: Thresholds) -> Incident:
    """Many causeless one-point spikes that came straight back: one incident, as the finding
    tells them. Every number is the finding's evidence (`facts.recurring_spikes`)."""
    ev = finding.evidence
    count, steps = int(ev["count"]), [int(s) for s in ev["steps"]]
    first, last = steps[0], steps[-1]
    longest = int(ev["longest_recovery_steps"])
    share = float(ev["recovered_share"])
    plural = "" if longest == 1 else "s"
    checked = [name for metric, name, _ in _CAUSE_SERIES if view.has(metric)]
    missing = [name for metric, name, _ in _CAUSE_SERIES if not view.has(metric)]
    signs = [word for metric, _, word in _CAUSE_SERIES if view.has(metric)] + ["restart"]
    shown = f" (the first 20 of {count})" if count > 20 else ""
    symptoms: list[tuple[str, Any]] = [
        ("one-point loss spikes with no evident cause (count)", count),
        (f"steps where they began{shown}", _steps_list(steps)),
    ]
    if ev.get("ratio_min") is not None:
        symptoms.append(
            (
                "size: peak loss / the trailing mean before it (smallest – largest)",
                f"{float(ev['ratio_min']):.2f}x – {float(ev['ratio_max']):.2f}x",
            )
        )
    symptoms += [
        (
            "size: z against the trailing mean and sigma (smallest – largest)",
            f"{float(ev['z_min']):.1f} – {float(ev['z_max']):.1f}",
        ),
        (
            f"share back at baseline (at or below the trailing mean + {thr.recovery_sigma:g} "
            "sigma)",
            f"{share:.0%} of the {count}",
        ),
        (
            "longest recovery (from a spike's onset to the loss back at baseline)",
            f"{longest} step{plural}",
        ),
        (
            "evident cause before any of them",
            "none in the "
            + _and([*checked, "restarts"])
            + (f" (not logged: {_and(missing)})" if missing else ""),
        ),
        ("dtype regime", dtype_symptom(view)),
        ("batch ids at the spikes", _batch_ids(view, steps)),
        ("unusual samples in those batches", None),
    ]
    not_logged = (
        "no batch id is logged"
        if not view.has("batch_id")
        else "it logs their batch ids, not their contents"
    )
    root = (
        f"Each of the {count} spikes is one logged point high, has no {_or(signs)} before it, "
        f"and was back at baseline within {longest} "
        f"step{plural}: one batch raised the loss and the next ones undid it. That is what rare "
        "batches do (a few unusual samples: very long, repetitive, corrupt or out-of-domain "
        "text), not an optimisation problem, and nothing needs rolling back. The log shows when "
        f"each spike happened and how large it was; it does not show what was in those batches "
        f"({not_logged})."
    )
    hyps = [
        Hypothesis(
            "rare-batches",
            "rare batches: a few unusual samples raised the loss for one step",
            "possible",
            "each spike is one logged point high and came straight back, with nothing before "
            "it: what one batch does",
            "loss",
        ),
        Hypothesis(
            "optimizer-instability",
            f"an optimisation problem: a {_or(signs)} before the spikes",
            "ruled out",
            f"the cause checks on the {_and([*checked, 'restarts'])} found none before any of "
            "the spikes",
            " / ".join(m for m, _, _ in _CAUSE_SERIES if view.has(m)) or "restarts",
        ),
    ]
    verification = [
        f"at most {count} one-point loss spikes that reach the bar for an isolated point "
        f"(z >= {thr.spike_large_z:g} and a peak >= {thr.spike_large_ratio:g}x the trailing "
        f"mean), as stab analyze reports them (this log has {count}, at steps {first}–{last})"
    ]
    if not view.has("batch_id"):
        verification.append(
            "a batch id at every logged step (this log has none), so that the batch of each "
            "spike can be read back"
        )
    rollback = "no rollback" if share >= 1.0 else "a rollback for those that did not come back"
    cost = Cost(
        None,
        False,
        note=f"{rollback}: each of the {count} spikes was back at baseline within {longest} "
        f"step{plural} of its onset (the longest recovery)",
    )
    return Incident(
        kind=RECURRING_SPIKES.code,
        title=f"{count} recurring one-point loss spikes, steps {first}–{last} (recovered)",
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=root,
        remediation=[],  # from the remedy table (build): the verdict's own when it leads
        verification=verification,
        expects=[],  # no per-spike bound in the evidence: nothing for stab compare to check
        cost=cost,
        verdict="spike-recoverable",
        cause=None,
        start=first,
    )


# the series the spike cause checks read, their names and the cause each would show
_CAUSE_SERIES = (
    ("grad_norm", "grad norm", "grad-norm surge"),
    ("lr", "LR", "LR jump"),
    ("batch_id", "batch id", "repeated batch"),
)


def _and(names: list[str], word: str = "and") -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {word} " + names[-1]


def _or(names: list[str]) -> str:
    return _and(names, "or")


def _batch_ids(view: SeriesView, steps: list[int]) -> str:
    """'step 3300: id 17, ...' for the first 20 spikes; 'not logged' without a batch id."""
    if not view.has("batch_id"):
        return "not logged"
    pairs = [f"step {s}: id {_batch_symptom(view, s)}" for s in steps[:20]]
    more = f", and {len(steps) - 20} more" if len(steps) > 20 else ""
    return ", ".join(pairs) + more


def _grad_text(grad: dict) -> str:
    pair = grad.get("grad_norm_baseline_steps")
    over = f" over steps {pair[0]}-{pair[1]}" if pair else ""
    return (
        f"{fmt(grad['grad_norm'])} at step {grad['grad_norm_step']} "
        f"(baseline {fmt(grad['grad_norm_baseline'])}{over}, {grad['ratio']:.1f}x)"
    )


def _spike_checks(view, ev, grad, thr: Thresholds, after, recovered) -> tuple[list[str], list[str]]:
    onset = int(ev["onset_step"])
    bound = round_up(float(ev["threshold"]))
    text = [
        f"loss at step {onset} < {bound:g} (the pre-spike mu + {thr.spike_sigma:g} sigma; "
        f"the spike peaked at {fmt(float(ev['peak']))} at step {int(ev['peak_step'])})"
    ]
    expects = [f"loss@{onset}<{bound:g}"]
    if grad and math.isfinite(grad.get("grad_norm_baseline", math.nan)):
        lo, hi = onset - thr.cause_lead_steps, onset + thr.recovery_window_steps
        g_bound = round_up(thr.grad_norm_outlier_ratio * grad["grad_norm_baseline"])
        # "it was": the largest grad norm the run logged in that same span, and where
        g_steps, g_values = view.points("grad_norm")
        inside = (g_steps >= lo) & (g_steps <= hi) & np.isfinite(g_values)
        was = ""
        if inside.any():
            k = int(np.argmax(np.where(inside, g_values, -np.inf)))
            was = f"; it was {fmt(float(g_values[k]))} at step {int(g_steps[k])}"
        text.append(
            f"max grad norm in [{lo}, {hi}] < {g_bound:g} ({thr.grad_norm_outlier_ratio:g}x its "
            f"pre-spike mean {fmt(grad['grad_norm_baseline'])}{was})"
        )
        expects.append(f"max(grad_norm)[{lo}:{hi}]<{g_bound:g}")
    if not recovered and after is not None:
        level = round_up(float(ev["mu"]) + thr.recovery_sigma * float(ev["sigma"]))
        text.append(
            f"loss at step {after[0]} < {level:g} (back to baseline within "
            f"{thr.recovery_window_steps} steps; "
            f"it was {fmt(after[1])})"
        )
        expects.append(f"loss@{after[0]}<{level:g}")
    return text, expects


# ---------------------------------------------------------------- NaN


def _nan_incident(
    finding: Finding, view: SeriesView, analysis: Analysis, thr: Thresholds
) -> Incident:
    ev = finding.evidence
    first = int(ev["first_step"])
    hyps = nan_hypotheses(finding, view, analysis, thr)
    grad = series_at(view, "grad_norm", first)
    scale = series_at(view, "loss_scale", first)
    origin = ev.get("origin_evidence") or {}
    symptoms: list[tuple[str, Any]] = [
        ("first non-finite step", first),
        (
            "non-finite points",
            f"{ev['count']} of {ev['points']}"
            + (
                f" ({ev[NAN_COUNT]} NaN, {ev.get('pos_inf', 0)} +Inf, {ev.get('neg_inf', 0)} -Inf)"
                if NAN_COUNT in ev
                else ""
            )
            + (f"; seen in {ev['series']}" if ev.get("series") != "loss" else ""),
        ),
        (
            "pre-NaN loss (50-step EMA)",
            fmt(e) if (e := ema_before(view, first)) is not None else "no finite loss before it",
        ),
        (
            "last finite loss"
            + (
                f" (step {ev['last_finite_step']})"
                if ev.get("last_finite_step") is not None
                else ""
            ),
            fmt(ev["last_finite_loss"]) if ev.get("last_finite_loss") is not None else "none",
        ),
        (
            "recovery",
            "did not recover"
            if not _finite_after(view, first)
            else "the loss is finite again later",
        ),
        (f"{grad_norm_name(view)} at that step", fmt(grad) if grad is not None else "not logged"),
        (
            "LR at that step",
            f"{lr:.4g}" if (lr := series_at(view, "lr", first)) is not None else "not logged",
        ),
        ("dtype regime", dtype_symptom(view)),
        (
            "first non-finite layer",
            f"{origin['layer']} (input {origin.get('input_layer') or 'none'} finite)"
            if origin
            else "no per-layer series logged",
        ),
        ("batch index at that step", _batch_symptom(view, first)),
        ("unusual tokens in that batch", None),
    ]
    if scale is not None:
        symptoms.insert(6, ("loss scale at that step", scale_text(scale)))
    supported = [h for h in hyps if h.status == "supported"]
    cause = analysis.verdict.cause if analysis.verdict.code == NAN.code else None
    root = next((h.root_sentence for h in supported if h.root_sentence), None)
    if root is None and cause:
        text = cause_texts(thr)[cause]
        root = text[:1].upper() + text[1:] + "."
    verification, expects = _nan_checks(view, first, thr)
    return Incident(
        kind=NAN.code,
        title=f"Non-finite loss from step {first}",
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=root,
        remediation=[],  # from the remedy table (build)
        verification=verification,
        expects=expects,
        cost=cost_between(
            view, first, None if not _finite_after(view, first) else _finite_after(view, first)
        ),
        verdict=NAN.code,
        cause=cause,
        start=first,
    )


def _finite_after(view: SeriesView, step: int) -> int | None:
    """The first step after `step` whose loss is finite again (None: never)."""
    steps, loss = view.points("loss")
    ok = (steps > step) & np.isfinite(loss)
    return int(steps[ok][0]) if ok.any() else None


def _nan_checks(view: SeriesView, first: int, thr: Thresholds) -> tuple[list[str], list[str]]:
    steps, loss = view.points("loss")
    stats = trailing_stats(
        steps, loss, thr.spike_window_steps, thr.min_points_per_window, thr.widened_window_points
    )
    idx = int(np.searchsorted(steps, first))
    mean = stats.mean[idx] if idx < steps.size else math.nan
    std = stats.std[idx] if idx < steps.size else math.nan
    if not (math.isfinite(mean) and math.isfinite(std)):
        return ([f"loss finite at step {first} and after (no baseline before it to bound it)"], [])
    bound = round_up(mean + thr.spike_sigma * max(std, thr.sigma_floor_frac * abs(mean)))
    last = int(view.steps[-1])
    # the logged finite points the pre-NaN mu and sigma are over
    if stats.widened:
        keep = np.zeros(steps.size, dtype=bool)
        keep[max(0, idx - thr.widened_window_points) : idx] = True
    else:
        keep = (steps >= first - thr.spike_window_steps) & (steps < first)
    keep &= np.isfinite(loss)
    over = f" of steps {int(steps[keep][0])}-{int(steps[keep][-1])}" if keep.any() else ""
    return (
        [
            f"loss at step {first} < {bound:g} (finite, "
            f"within the pre-NaN mu + {thr.spike_sigma:g} sigma{over})",
            f"max loss in [{first}, {last}] < {bound:g} "
            "(no NaN/Inf and no blow-up to the end of the log)",
        ],
        [f"loss@{first}<{bound:g}", f"max(loss)[{first}:{last}]<{bound:g}"],
    )


# ---------------------------------------------------------------- divergence


def _cause_words(c: dict) -> str:
    # imported here: importing a rule module at import time would reorder the rule registry
    from stabilitycli.detect.divergence import cause_words

    return cause_words(c)


def _divergence_incident(finding: Finding, view: SeriesView, thr: Thresholds) -> Incident:
    ev = finding.evidence
    start = int(ev["start_step"])
    causes = ev.get("causes") or []
    last = int(view.steps[-1])
    lr_a, lr_b = series_at(view, "lr", start), series_at(view, "lr", last)
    symptoms: list[tuple[str, Any]] = [
        ("rise began at step", start),
        *trend_symptoms(ev),
        (
            f"last finite loss (step {int(view.finite_points('loss')[0][-1])})",
            fmt(ev["final_loss"]) if ev.get("final_loss") is not None else None,
        ),
        ("rose at every logged step of the window", "yes" if ev.get("strictly_monotone") else "no"),
        (
            f"LR at step {start} (where the rise began) / step {last} (the end of the log)",
            f"{lr_a:.4g} -> {lr_b:.4g}" if lr_a is not None and lr_b is not None else "not logged",
        ),
        ("dtype regime", dtype_symptom(view)),
    ]
    hyps = [
        Hypothesis(
            code=c["cause"],
            title=cause_texts(thr).get(c["cause"], c["cause"]),
            status="supported",
            evidence=_cause_words(c),
            series=c["cause"].replace("-rising", "").replace("-increasing", "").replace("-", "_"),
            root_sentence=(
                f"From step {start} the loss rose from {rise_from_words(ev)} and never came "
                f"back; {cause_texts(thr).get(c['cause'], c['cause'])}."
            ),
        )
        for c in causes
    ]
    bound = round_up(float(ev["start_level"]))
    return Incident(
        kind=DIVERGENCE.code,
        title=f"Silent divergence from step {start}",
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=hyps[0].root_sentence if hyps else None,
        remediation=[],  # from the remedy table (build)
        verification=[f"loss at step {last} < {bound:g} ({below_words(ev)})"],
        expects=[f"loss@{last}<{bound:g}"],
        cost=cost_between(view, start, None),
        verdict=DIVERGENCE.code,
        cause=causes[0]["cause"] if causes else None,
        start=start,
    )
