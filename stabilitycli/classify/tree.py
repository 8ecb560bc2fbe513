"""Walk §1 -> §2 -> §3 -> §4 over the rules' facts and name the verdict.

Post-hoc, every section is answered (spec 0b); the verdict is the first code
of `VERDICT_ORDER` that applies, and the path lists every question with the
numbers behind its answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from stabilitycli.classify.evals import EvalAnswer, nonfinite_answer, overfitting_answer
from stabilitycli.classify.questions import (
    INFERRED_CAUSES,
    NOT_LEARNING,
    VERDICT_ORDER,
    VERDICTS,
    cause_texts,
)
from stabilitycli.classify.remedies import (
    FP16_MAX,
    GRAD_NAN_LOSS_FINITE,
    LR_TOO_HIGH,
    NAN_BEFORE_LOGITS,
    NAN_IN_WEIGHTS,
    SHOWS_BF16,
    SHOWS_CLIPPING,
    SHOWS_FP16,
    SHOWS_NO_SCALE,
    SHOWS_SCALE_CONSTANT,
    SHOWS_SCALE_MOVING,
    SHOWS_WRITER_SCALER,
    remedies_for,
)
from stabilitycli.core.config import Thresholds
from stabilitycli.core.metric_names import words
from stabilitycli.core.model import (
    Finding,
    PathStep,
    SeriesRead,
    Severity,
    Skip,
    SourceInfo,
    Verdict,
)
from stabilitycli.core.numfmt import step_runs
from stabilitycli.core.records import dataclass
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.data import DUPLICATE_BATCH
from stabilitycli.detect.kinds.divergence import DIVERGENCE, GRAD_NORM_RISING, PLATEAU
from stabilitycli.detect.kinds.learning import LOSS_COLLAPSE, NO_LEARNING
from stabilitycli.detect.kinds.mixed_precision import (
    FP16_OVERFLOW,
    LOSS_SCALE_COLLAPSED,
    LOSS_SCALE_STATIC,
)
from stabilitycli.detect.kinds.nan import NAN
from stabilitycli.detect.kinds.ranks import RANK_KINDS, RANK_NONFINITE, RANK_OUTLIER, RANK_SILENT
from stabilitycli.detect.kinds.schedule import LR_INCREASING
from stabilitycli.detect.kinds.spike import SPIKE, SpikeEvidence
from stabilitycli.detect.log_words import LogWords, no_log_words, uses_dynamic_scaler
from stabilitycli.detect.nan import forward_order_key, nan_summary, only_some_steps
from stabilitycli.detect.spike import SpikeEvent
from stabilitycli.detect.spike_words import (
    baseline_text,
    recovery_level_text,
    sigma_text,
    spike_type_note,
)

_LOGITS_STAGE = (2, 0, 4)  # forward_order_key of the lm head: log(0) lives at or after it


@dataclass(frozen=True)
class _Applies:
    """A verdict that applies: its cause, its summary, and what its remedies are keyed by."""

    cause: str | None
    summary: str
    start: int | None = None  # the step where the event began, named in its remedies
    rank: int | None = None  # the rank a rank-outlier remedy names
    # the remedy table's cause when it differs from the verdict's (a rise within warmup)
    remedy_cause: str | None = None
    # the verdict's severity when its finding's decides it (a not-learning run at ln V)
    severity: Severity | None = None

    def event(self, said: LogWords, thresholds: Thresholds) -> dict[str, str]:
        """The event's words for the remedy texts (`{start}`, `{who}`, `{clip_at}`...)."""
        words = {} if self.start is None else {"start": f"step {self.start}"}
        return (
            words
            | ({} if self.rank is None else {"who": f"rank {self.rank}"})
            | said.remedy_words(self.start, thresholds.remedy_clip_percentile)
        )


@dataclass
class _Walk:
    """What every section reads, and what they write: the path and the verdicts that apply."""

    source: SourceInfo
    findings: list[Finding]
    facts: Facts
    thresholds: Thresholds
    by_code: dict[str, list[Finding]]
    skipped: dict[str, str]  # rule code -> why it could not run
    not_run: tuple[str, ...]  # rule codes left out by --select/--ignore
    basis: tuple[SeriesRead, ...] = ()  # the main series read, for the verdict to name
    path: list[PathStep] = field(default_factory=list)
    # verdict code -> why it applies
    applies: dict[str, _Applies] = field(default_factory=dict)

    def ask(self, question: str, answer: str, evidence: str) -> None:
        self.path.append(PathStep(question, answer, evidence))

    @property
    def said(self) -> LogWords:
        """What the log says its loss and grad norm are."""
        return self.facts.log_words or no_log_words()


def walk(
    source: SourceInfo,
    findings: list[Finding],
    skipped: list[Skip],
    facts: Facts,
    thresholds: Thresholds,
    not_run: tuple[str, ...] = (),
    basis: tuple[SeriesRead, ...] = (),
) -> Verdict:
    """Answer every section's questions (spec 0b: post-hoc, all of them) and name the verdict."""
    by_code: dict[str, list[Finding]] = {}
    for finding in findings:
        by_code.setdefault(finding.code, []).append(finding)
    state = _Walk(
        source,
        findings,
        facts,
        thresholds,
        by_code,
        {s.code: s.reason for s in skipped},
        not_run,
        basis,
    )
    # ranks first: an outlier rank explains what the mean shows (spec 5)
    for section in (
        _ranks,
        _nan,
        _eval_nan,
        _spikes,
        _mixed_precision,
        _divergence,
        _eval_fit,
        _learning,
    ):
        section(state)
    return _verdict(state)


def _eval_nan(w: _Walk) -> None:
    """Q1.5: a non-finite eval loss."""
    _take(w, nonfinite_answer(w.by_code, w.skipped, w.facts.evals))


def _eval_fit(w: _Walk) -> None:
    """Q4.5: over-fitting."""
    _take(w, overfitting_answer(w.by_code, w.skipped, w.facts.evals))


def _take(w: _Walk, answer: EvalAnswer) -> None:
    if answer.step is not None:
        w.path.append(answer.step)
    if answer.verdict is not None:
        w.applies[answer.verdict] = _Applies(None, answer.summary, start=answer.start)


def _ranks(w: _Walk) -> None:
    """R: does one rank sit away from the cohort?"""
    rank_findings = [f for f in w.findings if f.kind in RANK_KINDS]
    if not w.source.ranks:
        return
    errors = [f for f in rank_findings if f.severity >= Severity.ERROR]
    w.ask(
        "R",
        "yes" if rank_findings else "no",
        "; ".join(f.message for f in rank_findings[:3]) or f"{w.source.ranks} ranks agree",
    )
    if errors:
        ranks = sorted({f.rank for f in errors if f.rank is not None})
        others = [r for r in ranks if r != errors[0].rank]
        also = f"; also rank(s) {', '.join(map(str, others))}" if others else ""
        w.applies[RANK_OUTLIER.code] = _Applies(
            None, errors[0].message + also, start=errors[0].step, rank=errors[0].rank
        )
    # a rank whose log ends early is not healthy either, though the cohort went on (a warning)
    silent = [f for f in rank_findings if f.kind is RANK_SILENT and f.severity >= Severity.WARNING]
    if silent:
        others = sorted({f.rank for f in silent[1:] if f.rank is not None})
        also = f"; also rank(s) {', '.join(map(str, others))}" if others else ""
        w.applies[RANK_SILENT.code] = _Applies(
            None, silent[0].message + also, start=silent[0].step, rank=silent[0].rank
        )


def _nan(w: _Walk) -> None:
    """§1: Q1.1 non-finite loss, Q1.2 what the dtype makes of it, Q1.3 where it started."""
    if NAN.code not in w.by_code:
        clean: Mapping[str, Any] = w.facts.nonfinite or {}
        points = clean.get("points", 0)
        w.ask(
            "Q1.1",
            "no" if NAN.rule not in w.skipped else "unknown",
            w.skipped.get(NAN.rule) or f"0 non-finite of {points} loss points",
        )
        return
    f = w.by_code[NAN.code][0]
    ev = f.evidence
    w.ask("Q1.1", "yes", f.message)
    cause, reading, remedy_cause = _nan_reading(w.source, w.facts)
    w.ask("Q1.2", w.source.dtype or "unknown", reading)
    if ev.get("origin"):
        before = ev["origin_evidence"].get("input_layer")
        w.ask(
            "Q1.3",
            ev["origin"],
            f"first non-finite layer at step {ev['origin_evidence']['step']}"
            + (f" (its input {before} still finite)" if before else " (the first layer)"),
        )
    first_rank = next(
        (r.rank for r in w.findings if r.kind is RANK_NONFINITE and r.rank is not None),
        None,
    )
    intermittent = only_some_steps(ev)
    w.applies[NAN.code] = _Applies(
        cause,
        nan_summary(ev)
        + (f", first on rank {first_rank}" if first_rank is not None else "")
        + (f", starting in layer {ev['origin']}" if ev.get("origin") else "")
        + (f"; {_cause_said(w, cause)}" if cause and not intermittent else ""),
        start=int(ev["first_step"]),
        remedy_cause=GRAD_NAN_LOSS_FINITE if intermittent else remedy_cause,
    )


def _spikes(w: _Walk) -> None:
    """§2: Q2.1 a spike, Q2.2 did it recover, Q2.3/Q2.4 what caused it."""
    spikes, blips = w.facts.spikes, w.facts.blips
    if SPIKE.rule in w.skipped:
        w.ask("Q2.1", "insufficient data", w.skipped[SPIKE.rule])
        return
    if not spikes:
        w.ask(
            "Q2.1",
            "no",
            f"no spike ({len(blips)} isolated blip(s) below the materiality "
            f"bar; {w.facts.spike_window})",
        )
        return
    first = spikes[0]
    recurring = w.facts.recurring_spikes
    count = (
        f"{len(spikes) - 1} spike(s) and {recurring['count']} recurring one-point spikes"
        if recurring
        else f"{len(spikes)} spike(s)"
    )
    w.ask(
        "Q2.1",
        "yes",
        f"{count}; first at step {first.onset_step}: peak {first.peak:.4g} at step "
        f"{first.peak_step} > {baseline_text(first)} + {w.thresholds.spike_sigma:g}*"
        f"{sigma_text(SpikeEvidence.of(first), w.thresholds)} (z = {first.z:.1f})",
    )
    persistent = [s for s in spikes if not s.recovered]
    recoverable = [s for s in spikes if s.recovered]
    lead = persistent[0] if persistent else recoverable[0]
    w.ask("Q2.2", "no" if persistent else "yes", _recovery_text(lead, w.thresholds))
    question = "Q2.4" if persistent else "Q2.3"
    w.ask(question, lead.cause or "no evident cause", _cause_text(lead, w))
    for spike in persistent[:1]:
        w.applies["spike-persistent"] = _Applies(
            spike.cause,
            f"loss spike at step {spike.onset_step} ({_spike_levels(spike)}"
            f"{_in_probability(spike.mu, spike.peak, w)}) "
            f"did not recover within {spike.recovery_horizon_steps} steps"
            f"{spike_type_note(spike.spike_type)}",
            start=spike.onset_step,
        )
    for spike in recoverable[:1]:
        if recurring and spike.onset_step == recurring["steps"][0]:
            w.applies["spike-recoverable"] = _Applies(
                None,
                f"{recurring['count']} one-point loss spikes with no evident cause "
                f"({recurring['ratio_min']:.2f}-{recurring['ratio_max']:.2f}x the trailing mean, "
                f"steps {recurring['steps'][0]}-{recurring['steps'][-1]}), each back at baseline "
                f"within {_steps(recurring['longest_recovery_steps'])}",
                start=spike.onset_step,
            )
            continue
        w.applies["spike-recoverable"] = _Applies(
            spike.cause,
            f"loss spike at step {spike.onset_step} ({_spike_levels(spike)}"
            f"{_in_probability(spike.mu, spike.peak, w)}) "
            f"recovered in {spike.recovery_steps} steps (back to <= "
            + (
                f"{spike.recovery_level:.4g}, the baseline mean + "
                f"{w.thresholds.recovery_sigma:g}*sigma,"
                if spike.baseline_basis == "mean" and spike.recovery_slope_per_step is None
                else recovery_level_text(spike, w.thresholds)
            )
            + f" at step {spike.recovery_step})",
            start=spike.onset_step,
        )


def _line_order_words(source: SourceInfo) -> str:
    """What the overflow count's steps are made of when a reader numbered some loss-scale
    messages by their order among the log's lines: those are not optimizer steps, and the
    span counts them (`SourceInfo.line_order_steps`)."""
    if not source.line_order_steps:
        return ""
    return (
        f"; step(s) {step_runs(sorted(source.line_order_steps))} in that span number "
        "loss-scale messages that print no step by their order among the log's lines, not "
        "optimizer steps"
    )


def _mixed_precision(w: _Walk) -> None:
    """§3: Q3.1 did fp16 gradients overflow, Q3.2 what did the loss scale do."""
    overflow = w.facts.overflow
    if LOSS_SCALE_STATIC.rule in w.skipped:
        # with no dtype stated, §3 may apply: say it is unknown rather than not applicable
        answer = "unknown" if w.source.dtype is None else "not applicable"
        w.ask("Q3.1", answer, w.skipped[LOSS_SCALE_STATIC.rule])
        return
    if overflow is None:
        return
    at_least = "" if overflow.get("overflows_exact", True) else "at least "
    w.ask(
        "Q3.1",
        "yes" if overflow["overflows"] else "no",
        f"{at_least}{overflow['overflows']} overflow(s) in {overflow['span_steps']} steps"
        + (f" ({overflow['sources']})" if overflow.get("sources") else "")
        + (f"; {overflow['hidden']}" if overflow.get("hidden") else "")
        + _line_order_words(w.source),
    )
    scale_text = "no loss-scale series"
    if overflow.get("has_scale"):
        halvings = ("" if overflow.get("halvings_exact", True) else "at least ") + str(
            overflow.get("scale_halvings", 0)
        )
        drops = overflow.get("scale_drops", 0)
        scale_text = (
            f"scale max {_scale(overflow.get('scale_max', 0))} -> min "
            f"{_scale(overflow.get('scale_min', 0))}, final "
            f"{_scale(overflow.get('scale_final', 0))}; "
            + (f"{drops} drop(s) taking {halvings} halving(s)" if drops else "no drop")
            + f", {overflow.get('scale_rises', 0)} rise(s)"
        )
    answer = "healthy backoff"
    for code in (LOSS_SCALE_COLLAPSED.code, LOSS_SCALE_STATIC.code, FP16_OVERFLOW.code):
        if code in w.by_code:
            answer = code
            cause = "activation-overflow" if code != LOSS_SCALE_STATIC.code else None
            finding = w.by_code[code][0]
            w.applies[code] = _Applies(cause, finding.message, start=_first_overflow(finding))
            break
    w.ask("Q3.2", answer, scale_text)


def _divergence(w: _Walk) -> None:
    """§4: Q4.1 a lasting rise, then Q4.2-Q4.4 its cause (LR, weight norm, grad norm)."""
    div = w.facts.trend
    if DIVERGENCE.rule in w.skipped:
        w.ask("Q4.1", "insufficient data", w.skipped[DIVERGENCE.rule])
        return
    if DIVERGENCE.code not in w.by_code and PLATEAU.code not in w.by_code:
        max_z = div.max_z if div else 0.0
        w.ask(
            "Q4.1",
            "no",
            f"no lasting rise in {div.windows if div else 0} windows "
            f"({div.window if div else ''}; max Mann-Kendall z = {max_z:.1f})"
            + (f"; {div.unjudged}" if div and div.unjudged else ""),
        )
        return
    f = (w.by_code.get(DIVERGENCE.code) or w.by_code[PLATEAU.code])[0]
    ev = f.evidence
    w.ask(
        "Q4.1",
        "yes",
        f"steps {ev['start_step']}-{ev['end_step']}: "
        + (
            f"{ev['start_level']:.4g} (the mean of the medians over steps "
            f"{ev['start_level_steps'][0]}-{ev['start_level_steps'][1]}) -> "
            f"{ev['end_level']:.4g} (over steps {ev['end_level_steps'][0]}-"
            f"{ev['end_level_steps'][1]})"
            if ev.get("start_level_steps") and ev.get("end_level_steps")
            else f"mean {ev['start_level']:.4g} -> {ev['end_level']:.4g}"
        )
        + f" in the window of steps {ev.get('window_start_step', ev['start_step'])}-"
        f"{ev['end_step']}, Mann-Kendall z = {ev['z']}"
        + ("; it rose at every logged step" if ev["strictly_monotone"] else "")
        + f"; after step {ev['end_step']}, never back below the start level",
    )
    causes = {c["cause"]: c for c in ev.get("causes", [])}
    for question, cause_code in (
        ("Q4.2", LR_INCREASING.code),
        ("Q4.3", "weight-norm"),
        ("Q4.4", GRAD_NORM_RISING.code),
    ):
        c = causes.get(cause_code)
        w.ask(question, "yes" if c else "no", _cause_words(c) if c else "no")
    cause = next(iter(causes), None)
    code = DIVERGENCE.code if DIVERGENCE.code in w.by_code else PLATEAU.code
    in_warmup = cause == LR_INCREASING.code and causes[cause].get("within_warmup")
    warmup_text = (
        "; the loss turned up while warmup was still raising the LR "
        f"({causes[cause]['lr_start']:.3g} at the turn): the peak LR is too high"
        if in_warmup
        else ""
    )
    w.applies[code] = _Applies(
        cause,
        f.message + warmup_text,
        start=int(ev["start_step"]),
        remedy_cause=LR_TOO_HIGH if in_warmup else None,
    )


def _learning(w: _Walk) -> None:
    """§8: did the loss collapse to zero (Q8.1); did the run learn at all (Q8.2).

    A collapse decides the verdict even in a log too short for the spike baseline: it needs
    a few points before the fall, not a window, and a loss at zero is wrong at any length.
    """
    # asked only where there is something to say: a run that learned keeps the path it had
    collapse = w.by_code.get(LOSS_COLLAPSE.code)
    if collapse:
        w.ask("Q8.1", "yes", collapse[0].message)
        w.applies[LOSS_COLLAPSE.code] = _Applies(None, collapse[0].message, start=collapse[0].step)
    stuck = w.by_code.get(NO_LEARNING.code)
    if stuck:
        w.ask("Q8.2", "no", stuck[0].message)
        w.applies[NOT_LEARNING] = _Applies(
            None, stuck[0].message, start=stuck[0].step, severity=stuck[0].severity
        )
    elif w.skipped.get(NO_LEARNING.rule, "").startswith("decrease not judged"):
        w.ask("Q8.2", "not judged", w.skipped[NO_LEARNING.rule])


def _verdict(w: _Walk) -> Verdict:
    path, findings = w.path, w.findings
    for code in VERDICT_ORDER:
        if code in w.applies:
            applies = w.applies[code]
            section, severity, _ = VERDICTS[code]
            remedy = remedies_for(
                code,
                applies.remedy_cause or applies.cause,
                w.thresholds,
                log_shows(w.source, w.facts.overflow),
                applies.event(w.said, w.thresholds),
            )
            return Verdict(
                code,
                applies.cause,
                section,
                _sentence(applies.summary),
                path,
                remedy,
                applies.severity or Severity.parse(severity),
                w.basis,
                cause_inferred=applies.cause in INFERRED_CAUSES,
            )
    # the spike baseline is the shortest window: a log too short for it cannot be called healthy
    unanswered = [code for code in _TREE_RULES if code in w.skipped]
    if w.facts.spike_insufficient or unanswered:
        seen = [f.message for f in findings if f.severity >= Severity.WARNING]
        summary = (
            "log too short for the spike and divergence windows"
            if w.facts.spike_insufficient
            else f"{', '.join(unanswered)} could not be checked ({w.skipped[unanswered[0]]})"
        ) + (f"; it does show: {seen[0]}" if seen else "; nothing abnormal in what it holds")
        return Verdict(
            "insufficient-data",
            None,
            None,
            _sentence(summary),
            path,
            remedies_for(
                "insufficient-data", None, w.thresholds, log_shows(w.source, w.facts.overflow)
            ),
            Severity.INFO,
            w.basis,
        )
    notes = [f for f in findings if f.severity == Severity.WARNING]
    left_out = [code for code in _TREE_RULES if code in w.not_run]
    bumps = w.by_code.get("schedule-restart", [])
    summary = (
        "no instability found"
        + (f" by the selected checks ({', '.join(left_out)} not run)" if left_out else "")
        + (f" ({len(notes)} warning(s) worth a look)" if notes else "")
        + (
            f"; the loss bumps after {len(bumps)} planned LR restart(s) (steps "
            f"{', '.join(str(f.step) for f in bumps[:6])}) decayed as planned"
            if bumps
            else ""
        )
        + _resting_on(w)
    )
    return Verdict("healthy", None, None, _sentence(summary), path, [], Severity.INFO, w.basis)


def _resting_on(w: _Walk) -> str:
    """'; checked: loss 2,000 points (steps 0-1999), 8 ranks; not checked: eval loss (none
    logged)': what a healthy verdict rests on, and the main part it lacks."""
    if not w.basis:
        return ""
    lacking = [] if any(s.role == "eval" for s in w.basis) else ["eval loss (none logged)"]
    # a healthy run is one that learned: when that could not be judged, the headline says so
    # (its first clause: the whole reason is in the coverage line)
    unjudged = w.skipped.get(NO_LEARNING.rule)
    if unjudged:
        why = re.split(r", |: ", unjudged.split("not judged: ", 1)[-1], maxsplit=1)[0]
        lacking.insert(0, f"whether it learned ({why})")
    return f"; checked: {', '.join(s.words() for s in w.basis)}" + (
        f"; not checked: {', '.join(lacking)}" if lacking else ""
    )


# the rules that answer §1, §2 and §4: a run is healthy only when each of them answered
_TREE_RULES = (NAN.rule, SPIKE.rule, DIVERGENCE.rule)


def log_shows(source: SourceInfo, overflow: Mapping[str, Any] | None) -> frozenset[str]:
    """What the log shows of the run's set-up, for picking remedies (`questions.SHOWS_*`).

    A remedy for what is already in place is left out: a loss scale that moves
    means a dynamic scaler is at work; a grad norm logged as the pre-clip one
    means the run clips. `overflow` is §3's summary of the scaler (None when §3
    did not run: not an fp16 run).
    """
    shows = set()
    if source.dtype == "fp16":
        shows.add(SHOWS_FP16)
    elif source.dtype == "bf16":
        shows.add(SHOWS_BF16)
    if overflow is not None:  # §3 ran: it read the scaler's series and messages
        if overflow.get("scale_drops", 0) or overflow.get("scale_rises", 0):
            shows.add(SHOWS_SCALE_MOVING)
        elif overflow.get("has_scale"):
            shows.add(SHOWS_SCALE_CONSTANT)
        elif not overflow.get("has_messages"):
            shows.add(SHOWS_NO_SCALE)
    if uses_dynamic_scaler(source).holds:
        shows.add(SHOWS_WRITER_SCALER)
    grad_key = set(words(source.metrics.get("grad_norm", "")))
    if grad_key & {"preclip", "unclipped"} or {"pre", "clip"} <= grad_key:
        shows.add(SHOWS_CLIPPING)
    return frozenset(shows)


def _first_overflow(finding: Finding) -> int | None:
    """The step where a §3 finding's overflows began."""
    ev = finding.evidence
    first = ev.get("first_overflow_step") or ev.get("first_step") or finding.step
    return int(first) if first is not None else None


def _nan_reading(source: SourceInfo, facts: Facts) -> tuple[str | None, str, str | None]:
    """(cause, what the dtype makes of the NaN, the remedy table's cause when the spec names
    none but where the NaN began says what to fix)."""
    dtype = source.dtype
    # §3 leaves overflow facts only when it judged the run fp16 (stated, or by its own series)
    overflow = (facts.overflow or {}).get("overflows", 0)
    if dtype == "fp16" or (dtype is None and overflow):
        origin = source.dtype_origin if dtype == "fp16" else "by the log's overflow series"
        return (
            "activation-overflow",
            f"fp16 ({origin}): a NaN in fp16 is most often an activation past fp16's largest "
            f"value, {FP16_MAX:g} (inferred from the dtype); the loss-scale questions "
            "(Q3.1-Q3.4) look at the overflows",
            None,
        )
    if dtype == "fp32":
        nan: Mapping[str, Any] = facts.nonfinite or {}
        early = nan.get("earliest_nonfinite")
        layer = nan.get("origin")
        if early and early["series"].startswith("param_norm"):
            return (
                None,
                f"fp32, but {early['series']} was non-finite from step {early['step']}, "
                "before the loss: the update wrote NaN into the weights (optimizer eps, LR), "
                "not log(0)",
                NAN_IN_WEIGHTS,
            )
        if layer and forward_order_key(layer) < _LOGITS_STAGE:
            return (
                None,
                f"fp32, but the first non-finite layer is {layer}, before the logits: "
                "not log(0) in the loss; look at that layer's weights and inputs",
                NAN_BEFORE_LOGITS,
            )
        return (
            "log-of-zero",
            "fp32: the usual cause is log(0) in the loss or 0/0 in its reduction (inferred from "
            "the dtype, not seen in the log)",
            None,
        )
    if dtype == "bf16":
        return (
            None,
            "bf16: rarer; the usual causes are a value past bf16's range (about 3e38) or an "
            "overflowing gradient (inferred from the dtype, not seen in the log)",
            None,
        )
    return (
        None,
        "dtype unknown (no manifest, run parameter or flag states it, and no loss scaler is "
        "seen at work): pass --dtype to refine",
        None,
    )


def _in_probability(before: float, after: float, w: _Walk) -> str:
    """A loss change read in nats (spec 6): exp(-L) is the geometric-mean probability of the right
    token.

    Said only for a loss the log shows to be a token cross-entropy
    (`log_words.loss_is_token_ce`) and in the range of one in nats (0 < L <
    `ce_loss_max_nats`); with a vocabulary size, also how far from uniform
    guessing (ln V) it is.
    """
    top = w.thresholds.ce_loss_max_nats
    vocab_size = w.source.vocab_size
    if not (0 < before < top and 0 < after < top):
        return ""
    if not w.said.loss_is_token_ce.holds:
        return ""
    text = f"; geometric-mean p(correct token) {math.exp(-before):.3g} -> {math.exp(-after):.3g}"
    if vocab_size and vocab_size > 1:
        text += f", uniform guessing over {vocab_size:,} tokens is {math.log(vocab_size):.2f} nats"
    return text


def _spike_levels(spike: SpikeEvent) -> str:
    """'baseline mean 3.11 over steps 700-799 -> peak 8.226 at step 800'."""
    return f"{baseline_text(spike)} -> peak {spike.peak:.4g} at step {spike.peak_step}"


def _recovery_text(spike: SpikeEvent, thresholds: Thresholds) -> str:
    level = recovery_level_text(spike, thresholds)
    if spike.recovered:
        return (
            f"back to <= {level} at step {spike.recovery_step} "
            f"({spike.recovery_steps} steps after onset)"
        )
    if spike.recovery_step is not None:
        return (
            f"not within {spike.recovery_horizon_steps} steps; back to <= {level} only at step "
            f"{spike.recovery_step}"
        )
    return f"never back to <= {level}{spike_type_note(spike.spike_type)}"


def _cause_text(spike: SpikeEvent, w: _Walk) -> str:
    if not spike.causes:
        return "grad norm, LR, batch id and restarts show no evident cause"
    c = spike.causes[0]
    return f"{_cause_said(w, c['cause'])} ({_cause_numbers(c, w.said.grad_norm)})"


def _cause_said(w: _Walk, cause: str) -> str:
    """A cause in words, claiming only what the log supports: a rare-token batch only for a
    token loss; for an fp16 NaN, the overflows when the log shows them."""
    text = cause_texts(w.thresholds).get(cause, cause)
    if cause == "long-tail-token" and w.said.loss_is_token_ce.holds:
        return text.replace("(a long-tail batch)", "(a long-tail / rare-token batch)")
    overflows = (w.facts.overflow or {}).get("overflows", 0)
    if cause == "activation-overflow" and overflows:
        return (
            "fp16: the log shows gradient overflows (Q3.1 counts them); an activation past "
            f"{FP16_MAX:g} is their usual cause, inferred from the dtype"
        )
    return text


def _cause_numbers(c: Mapping[str, Any], grad_norm: str = "grad norm") -> str:
    """A spike cause's numbers, each with what it is (the generic key-value list otherwise)."""
    lead = f"{c.get('lead_steps')} step(s) before the spike"
    if c["cause"] == "long-tail-token" and "grad_norm_step" in c:
        return (
            f"{grad_norm} {c['grad_norm']:.4g} at step {c['grad_norm_step']} = "
            f"{c['ratio']:.1f}x its trailing mean {c['grad_norm_baseline']:.4g}, {lead}"
        )
    if c["cause"] == "lr-discontinuity" and "lr_step" in c:
        return (
            f"LR {c['lr_before']:.4g} -> {c['lr']:.4g} at step {c['lr_step']} "
            f"({c['relative_jump']:+.0%}), {lead}"
        )
    if c["cause"] == "lr-restart" and "restart_step" in c:
        return (
            f"{'declared' if c['declared'] else 'recognised'} restart at step {c['restart_step']}: "
            f"LR {c['lr_before']:.4g} -> {c['lr']:.4g}, {lead}"
        )
    if c["cause"] == DUPLICATE_BATCH.code and "repeat_of_step" in c:
        return (
            f"batch id {c['batch_id']:g} at the spike was served at step {c['repeat_of_step']} too"
        )
    if c["cause"] == "optimizer-reset" and "restart_step" in c:
        return (
            f"resumed from a checkpoint at step {c['restart_step']}, "
            f"{c['steps_after_restart']} step(s) before the spike"
        )
    return ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in c.items()
        if k not in ("cause", "bar")
    )


def _cause_words(c: dict) -> str:
    # imported here: importing a rule module at import time would reorder the rule registry
    from stabilitycli.detect.divergence import cause_words

    return cause_words(c)


def _scale(value: float) -> str:
    """A loss scale as logged: a whole scale in full (2097152, not 2.09715e+06)."""
    value = float(value)
    return (
        str(int(value))
        if math.isfinite(value) and value >= 1 and value == int(value)
        else f"{value:g}"
    )


def _kv(item: dict | None) -> str:
    if not item:
        return "no"
    return ", ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in item.items()
        if k != "cause"
    )


def _sentence(text: str) -> str:
    text = text.strip()
    # a name written in lower case stays so ('fp16', 'bf16', a metric key like 'eval/loss')
    first = text.split(" ", 1)[0]
    named = any(ch.isdigit() or ch in "/_" for ch in first)
    head = text[:1] if named else text[:1].upper()
    return head + text[1:] + ("" if text.endswith(".") else ".")


def _steps(count: int) -> str:
    """'1 step', '4 steps'."""
    return f"{count} step" if count == 1 else f"{count} steps"
