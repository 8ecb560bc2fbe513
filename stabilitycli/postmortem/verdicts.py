"""Post-mortem sections for the verdicts that are not a spike, a NaN or a divergence.

A rank outlier (and the other per-rank findings), a collapsed or static loss
scale, fp16 overflow, a plateau and a log too short to judge each get an
`Incident` here, so that no verdict other than `healthy` leaves the post-mortem
empty. Every number comes from the finding's evidence (or, for insufficient
data, from the run's source counts and the verdict's own path), never from a
recomputation, and says what it is: a median over steps A–B, a mean over steps
A–B, the first step, a count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stabilitycli.classify.remedies import FP16_MAX
from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Analysis, Finding, Severity
from stabilitycli.detect.kinds.divergence import PLATEAU
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_STATIC,
)
from stabilitycli.detect.kinds.ranks import (
    RANK_KINDS,
    RANK_NONFINITE,
    RANK_OUTLIER,
    RANK_SILENT,
    STRAGGLER,
)
from stabilitycli.detect.kinds.spike import SPIKE
from stabilitycli.detect.overflow_ledger import ledger_of, scale_text
from stabilitycli.postmortem.hypotheses import Hypothesis
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

SCALE_KINDS = (LOSS_SCALE_COLLAPSED, LOSS_SCALE_STATIC, FP16_OVERFLOW)


def rank_incidents(analysis: Analysis, view) -> list[Incident]:
    """One section per rank finding; a spike of the mean that the rank explains is folded in."""
    out = []
    for f in analysis.findings:
        if f.kind in RANK_KINDS:
            inc = _rank_incident(f, view)
            for spike in analysis.findings:
                if spike.kind is SPIKE and f.rank in (
                    spike.evidence.get("explained_by_ranks") or []
                ):
                    ev = spike.evidence
                    inc.symptoms.append(
                        (
                            "what the mean over ranks shows",
                            f"a loss spike from step {ev['onset_step']} (peak "
                            f"{fmt(_num(ev['peak']))} at step {ev['peak_step']}), explained by "
                            "this rank: not an optimisation problem",
                        )
                    )
            out.append(inc)
    return out


def incidents(analysis: Analysis, view, thr: Thresholds) -> list[Incident]:
    """The sections for loss-scale, overflow, plateau and insufficient-data verdicts."""
    out: list[Incident] = []
    for f in analysis.findings:
        if f.kind in SCALE_KINDS:
            out.append(_scale_incident(f, view, thr))
    for f in analysis.findings:
        if f.kind is PLATEAU:
            out.append(_plateau_incident(f, view))
    if analysis.verdict.code == "insufficient-data":
        out.append(_insufficient_incident(analysis))
    return out


def ranks_with_incidents(analysis: Analysis) -> set[int]:
    return {f.rank for f in analysis.findings if f.kind in RANK_KINDS and f.rank is not None}


# ---------------------------------------------------------------- ranks


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _relative(ev: Mapping[str, Any]) -> str:
    """The relative rise of a divergence or plateau, `+12.3%`; a rise from a level of 0
    has none (its evidence holds None), and says so instead of printing `+nan%`."""
    rise = _num(ev.get("relative_rise"))
    return f"+{rise:.1%}" if math.isfinite(rise) else "no relative rise: from a level of 0"


def _rank_incident(f: Finding, view) -> Incident:
    ev = f.evidence
    kind = ev.get("kind")
    rank = f.rank
    who = f"rank {rank}" if rank is not None else "one of two ranks"
    onset = int(f.step) if f.step is not None else None
    metric = f.metric or "loss"
    last = int(view.steps[-1])
    recovered = ev.get("recovered_step")
    effect = ev.get("effect_steps")
    span = f"steps {effect[0]}–{effect[1]}" if effect else "its deviating steps"
    symptoms: list[tuple[str, Any]] = [
        ("rank", rank if rank is not None else "two ranks disagree; neither can be blamed"),
        ("first step out of line with the cohort", onset),
        ("ranks reporting", ev.get("ranks_reporting")),
    ]
    hyps: list[Hypothesis] = []
    remediation: list[str] = []
    verification: list[str] = []
    expects: list[str] = []
    if kind == "nonfinite":
        title = f"Rank {rank} went non-finite at step {onset}"
        symptoms += [
            (f"{who}'s {metric} at step {onset}", fmt(_num(ev.get("value")))),
            (f"cohort median of {metric} at step {onset}", fmt(_num(ev.get("cohort_median")))),
            ("what it did to the mean over ranks", "made it non-finite on its own"),
            (
                "most of the cohort non-finite from step",
                ev.get("cohort_nonfinite_step") or "never (only this rank)",
            ),
        ]
        root = (
            f"Rank {rank} produced a non-finite {metric} at step {onset} while the cohort was "
            "finite; the all-reduce spread it"
            + (
                f" to most ranks by step {ev['cohort_nonfinite_step']}."
                if ev.get("cohort_nonfinite_step")
                else "."
            )
        )
        hyps.append(
            Hypothesis(
                RANK_NONFINITE.code,
                f"{who} computed a NaN/Inf first",
                "supported",
                f"{who} non-finite at step {onset}; cohort median "
                f"{fmt(_num(ev.get('cohort_median')))} there",
                f"per-rank {metric}",
                root_sentence=root,
            )
        )
        expects.append(f"max({metric})[{onset}:{last}]<inf")
        verification.append(
            f"max {metric} over steps {onset}–{last} < inf (no NaN or Inf to the end of the log)"
        )
    elif kind == "silent":
        end = f.end_step if f.end_step is not None else (onset - 1 if onset else None)
        title = f"Rank {rank} stopped reporting after step {end}"
        symptoms += [
            (f"last step {who} reported", end),
            (f"{who}'s last {metric}", fmt(_num(ev.get("value")))),
            ("what it did to the mean over ranks", "the mean is over the ranks still reporting"),
        ]
        root = (
            f"Rank {rank} logged nothing after step {end} while the others went on: its process "
            "died, hung, or lost its log."
        )
        hyps.append(
            Hypothesis(
                RANK_SILENT.code,
                f"{who}'s process died or hung",
                "possible",
                f"no {metric} from {who} after step {end}",
                f"per-rank {metric}",
            )
        )
        verification.append(
            f"every rank reports {metric} to the last step (stab ranks reports no silent rank)"
        )
    elif kind == STRAGGLER.code:
        title = f"Rank {rank} runs slow from step {onset}"
        symptoms += [
            (f"{who}'s {metric} (median over its slow steps)", fmt(_num(ev.get("value")))),
            (
                f"cohort median of {metric} (over the same steps)",
                fmt(_num(ev.get("cohort_median"))),
            ),
            (
                "its pull on the mean over ranks ((its value - cohort median) / ranks)",
                fmt(_num(ev.get("mean_shift"))),
            ),
            ("back in line from step", recovered or "not by the end of the log"),
        ]
        root = None
        hyps.append(
            Hypothesis(
                STRAGGLER.code,
                f"{who}'s host is slower (throttling, a slow link or data loader)",
                "possible",
                f"{who} at {fmt(_num(ev.get('value')))} against a cohort median of "
                f"{fmt(_num(ev.get('cohort_median')))} {metric}",
                f"per-rank {metric}",
            )
        )
        verification.append(f"stab ranks on the re-run reports no straggler on {who}")
    else:
        mean_with, mean_without = _num(ev.get("mean_with")), _num(ev.get("mean_without"))
        value, median = _num(ev.get("value")), _num(ev.get("cohort_median"))
        direction = "above" if value > median else "below"
        title = f"Rank {rank} out of line with the cohort from step {onset}" + (
            f" until step {recovered}" if recovered else ""
        )
        symptoms += [
            (f"{who}'s {metric} (median over {span})", fmt(value)),
            (f"cohort median of {metric} (median over {span})", fmt(median)),
            ("robust z of that median against the cohort", f"{_num(ev.get('robust_z')):.1f}"),
            (
                f"mean {metric} over ranks, with / without {who} (means over {span})",
                f"{fmt(mean_with)} / {fmt(mean_without)} "
                f"(it moved the mean by {_num(ev.get('mean_shift')):+.3g})",
            ),
            ("back in line from step", recovered or "not by the end of the log"),
        ]
        root = (
            f"Rank {rank} left the cohort at step {onset} ({direction} it: {fmt(value)} against "
            f"{fmt(median)}, medians over {span}) and moved the mean over ranks by "
            f"{_num(ev.get('mean_shift')):+.3g}; whether its data shard or its host caused it, "
            "the log cannot tell."
        )
        data_words = (
            "a loss far below the cohort's: it sees easy or repeated data (duplicated or "
            "padding-only batches, labels leaking into inputs)"
            if direction == "below"
            else "a loss far above the cohort's: corrupt, mis-tokenised or out-of-domain data"
        )
        hyps += [
            Hypothesis(
                "rank-data-shard",
                f"{who}'s data shard differs from the others'",
                "possible",
                data_words,
                f"per-rank {metric}",
            ),
            Hypothesis(
                "rank-hardware",
                f"{who}'s GPU or host computes wrong values",
                "not testable",
                "hardware errors are not in a metrics log (look at that host's system log)",
                "host logs",
            ),
        ]
        if math.isfinite(mean_with) and math.isfinite(mean_without) and effect:
            mid = round_up((mean_with + mean_without) / 2.0, 4)
            op = "<" if mean_with > mean_without else ">"
            expects.append(f"mean({metric})[{effect[0]}:{effect[1]}]{op}{mid:g}")
            verification.append(
                f"mean {metric} over steps {effect[0]}–{effect[1]} {op} {mid:g} (halfway between "
                f"the mean with {who}, {fmt(mean_with)}, and without it, {fmt(mean_without)})"
            )
        verification.append(f"stab ranks on the re-run reports no outlier on {who}")
    where = f"around step {onset}" if onset is not None else ""
    remediation += [
        f"on the host that ran {who}, look for hardware faults {where}: ECC and Xid errors "
        "(nvidia-smi -q -d ECC, dmesg), thermal throttling, NCCL warnings in that rank's log",
        f"check {who}'s data shard: the files or sample indices it read from step {onset} "
        "(duplicated, empty or mis-tokenised batches move one rank's loss away from the rest)",
    ]
    if kind != STRAGGLER.code and not recovered:
        remediation.append(
            f"exclude or replace that node and resume from the last checkpoint before step "
            f"{onset}: the gradients averaged over ranks carried {who}'s from then on"
        )
    elif recovered:
        remediation.append(
            f"{who} came back in line at step {recovered} by itself; if it recurs on the same "
            "host, exclude that node"
        )
    # the steps out of line: from the onset to the step it was back (as a spike's cost counts)
    end = int(recovered) if recovered is not None else None
    return Incident(
        kind="rank",
        title=title,
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=root,
        remediation=remediation,
        verification=verification,
        expects=expects,
        cost=cost_between(view, onset, None if not recovered else end)
        if onset is not None
        else Cost(None, False),
        # the rank that makes the verdict shows the verdict's remedies (data.build)
        verdict=RANK_OUTLIER.code if f.severity >= Severity.ERROR else None,
        start=onset,
    )


# ---------------------------------------------------------------- fp16


def _scale_incident(f: Finding, view, thr: Thresholds) -> Incident:
    ev = f.evidence
    last = int(view.steps[-1])
    ledger = ledger_of(view)  # the one count of overflows and halvings every output gives
    overflows = ledger.total_text()
    first = int(ev.get("first_overflow_step") or ev.get("first_step") or (f.step if f.step else 0))
    lr = series_at(view, "lr", first)
    steps = ledger.steps.tolist()
    symptoms: list[tuple[str, Any]] = [
        ("first overflow step", first),
        (
            "overflows",
            f"{overflows}, at steps {steps[0]}–{steps[-1]}"
            + (
                " (every step)"
                if ledger.exact and steps[-1] - steps[0] + 1 == ledger.total == len(steps)
                else ""
            )
            + (f" ({ledger.hidden_text()})" if ledger.hidden_text() else "")
            if steps
            else f"{overflows}, the first at step {first}",
        ),
        ("dtype regime", dtype_symptom(view) or "fp16 (the loss scaler's series show it)"),
        ("LR at the first overflow", f"{lr:.4g}" if lr is not None else "not logged"),
    ]
    hyps = [
        Hypothesis(
            "activation-overflow",
            f"activations or gradients exceed fp16's largest value ({FP16_MAX:g})",
            "supported",
            f"{overflows} overflow(s) from step {first}",
            "overflow / loss_scale",
        )
    ]
    verification: list[str] = []
    expects: list[str] = []
    if f.kind is LOSS_SCALE_COLLAPSED:
        halvings = ledger.scale.halvings_text() if ledger.scale is not None else "0"
        below = ev.get("first_step_below")
        floor = f"{thr.min_loss_scale:g}"
        floor_said = bool(ledger.at_minimum_steps.size)  # the scaler said it could go no lower
        title = (
            f"Loss scale at the scaler's minimum at step {below}"
            if floor_said
            else f"Loss scale collapsed below {floor} at step {below}"
        )
        symptoms += [
            (
                "loss scale: largest / smallest logged",
                f"{scale_text(_num(ev.get('scale_max')))} / "
                f"{scale_text(_num(ev.get('scale_min')))}",
            ),
            (
                "step the scaler said its scale was at its minimum"
                if floor_said
                else f"first step with the scale below {floor}",
                below,
            ),
            (
                "halvings",
                f"{halvings}, the first at step {ev['first_halving_step']}"
                if ev.get("first_halving_step") is not None
                else halvings,
            ),
        ]
        root = (
            f"From step {first} the gradients overflowed {overflows} time(s); the dynamic "
            f"scaler halved the scale {halvings} times, to {scale_text(_num(ev.get('scale_min')))} "
            f"(below {floor} from step {below}). An overflowed step is skipped, and under a "
            "scale below 1 small fp16 gradients underflow to zero, so the updates from then on "
            "lose their signal."
        )
        expects.append(f"min(loss_scale)[{first}:{last}]>=1")
        verification.append(
            f"min loss scale over steps {first}–{last} >= 1 (it fell to "
            f"{scale_text(_num(ev.get('scale_min')))})"
        )
        cost = cost_between(view, first, None)
    elif f.kind is LOSS_SCALE_STATIC:
        scale = _num(ev.get("scale"))
        title = f"Overflows under a constant loss scale of {scale_text(scale)}"
        symptoms.append(("loss scale (constant over the log)", scale_text(scale)))
        root = (
            f"The loss scale stayed at {scale_text(scale)} while {overflows} overflow(s) "
            f"happened from step {first}: dynamic loss scaling is not active, so no overflow was "
            "answered."
        )
        verification.append(
            f"the loss scale moves on the re-run, and no overflow goes unanswered "
            f"(it stayed at {scale_text(scale)} through {overflows} overflow(s))"
        )
        cost = Cost(None, False)
    else:
        rate = _num(ev.get("rate"))
        title = f"fp16 overflows from step {first}"
        symptoms.append(("share of steps that overflowed", f"{rate:.1%} of the logged steps"))
        if ev.get("spike_step") is not None:
            symptoms.append(("a loss spike began at step", ev["spike_step"]))
        root = (
            f"{overflows} fp16 overflow(s) from step {first} ({rate:.1%} of the steps) with no "
            "loss-scale series or scaler messages in the log: nothing shows a scaler answering "
            "them."
            if ev.get("reason", "unabsorbed") == "unabsorbed"
            else f"{overflows} fp16 overflow(s) from step {first}; {f.message}."
        )
        if view.has("grad_norm"):
            expects.append(f"max(grad_norm)[{first}:{last}]<inf")
            verification.append(
                f"max grad norm over steps {first}–{last} < inf (no overflowed step)"
            )
        cost = Cost(None, False)
    return Incident(
        kind=f.code,
        title=title,
        symptoms=symptoms,
        hypotheses=hyps,
        root_cause=root,
        remediation=[],  # from the remedy table (data.build)
        verification=verification,
        expects=expects,
        cost=cost,
        verdict=f.code,
        cause=None if f.kind is LOSS_SCALE_STATIC else "activation-overflow",
        start=first,
    )


# ---------------------------------------------------------------- plateau, too short


def _plateau_incident(f: Finding, view) -> Incident:
    ev = f.evidence
    start = int(ev["start_step"])
    last = int(view.steps[-1])
    start_level = _num(ev.get("start_level"))
    symptoms: list[tuple[str, Any]] = [
        ("rise began at step", start),
        *trend_symptoms(ev),
        (
            f"last finite loss (step {int(view.finite_points('loss')[0][-1])})",
            fmt(_num(ev.get("final_loss"))),
        ),
        ("LR, weight-norm or grad-norm cause", "none found in the logged series"),
    ]
    bound = round_up(start_level)
    return Incident(
        kind=PLATEAU.code,
        title=f"Loss plateau from step {start}",
        symptoms=symptoms,
        hypotheses=[
            Hypothesis(
                PLATEAU.code,
                "the model stopped improving on this data at this LR",
                "possible",
                f"a slow rise of {_relative(ev)}, from {rise_from_words(ev)}, with no cause in "
                "the LR, weight norm or grad norm",
                "loss",
            )
        ],
        root_cause=None,
        remediation=[],  # from the remedy table (data.build)
        verification=[f"mean loss over steps {start}–{last} < {bound:g} ({below_words(ev)})"],
        expects=[f"mean(loss)[{start}:{last}]<{bound:g}"],
        cost=cost_between(view, start, None),
        verdict=PLATEAU.code,
        start=start,
    )


def _insufficient_incident(analysis: Analysis) -> Incident:
    src = analysis.source
    why = [p.evidence for p in analysis.verdict.path if p.answer == "insufficient data"]
    symptoms: list[tuple[str, Any]] = [
        ("logged steps", f"{src.first_step}–{src.last_step}"),
        ("rows used", src.rows_used),
        ("what the rules need", why[0] if why else analysis.verdict.summary),
    ]
    return Incident(
        kind="insufficient-data",
        title="Too short to judge",
        symptoms=symptoms,
        hypotheses=[],
        root_cause=(
            "The log is shorter than the spike and divergence windows, so those rules could not "
            "judge it; nothing abnormal was seen in what it holds."
        ),
        remediation=[],  # the verdict's (data.build)
        verification=["stab analyze on the longer log reaches a verdict other than this one"],
        expects=[],
        cost=Cost(None, False),
        rerun=False,
        verdict="insufficient-data",
    )
