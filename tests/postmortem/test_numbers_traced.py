"""Issue 16: every number the headline and the post-mortem state is the evidence number it
names, and that evidence is the value recomputed from the raw log, as labelled.

For every fixture of `fixtures/runs/` and `fixtures/torch-runs/` (the discovery and the
rendered outputs of `test_thresholds_in_text`, with the default thresholds and with its
OVERRIDES), plus the rank-outlier and recurring-spike fixtures in EXTRA (no run of those two
folders reaches these verdicts), each phrase family below parses a number and what it says it
is ("the median of steps A-B", "peak loss (step S)", "LR at the first overflow"...). The number
must equal the evidence field it names, to the printed precision, and that field must equal
the value recomputed here from `stabilitycli.read(path).frame`:

- a point "at step S" is the value logged at S;
- "the mean over steps A-B" is the mean of the logged values in [A, B], "the median of steps
  A-B" their median, "the mean of the medians over steps A-B" the mean of the medians of the
  trend bins (`bin_points` consecutive points) that tile [A, B];
- a peak "at step S" is the value at S and the largest of the event;
- a "trailing mean" at step S is the mean over [S - window, S); a rank's level is its median
  over the steps named, the cohort's the median of the per-step medians.

Covered: the headline; the post-mortem's preamble, symptoms, hypotheses (section 3 repeats
them), root cause, verification, cost and notes; the spike cause in Q2.3/Q2.4. A line there
that states a number no family recognises is a failure too: it says a number without saying
what it is. Per verdict kind the test counts the numbers it traced and asserts a floor, so
that it cannot pass by matching nothing.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pytest

from stabilitycli.detect.autocorr import noise_memory_of
from tests.conftest import FIXTURES
from tests.report.test_thresholds_in_text import (  # noqa: F401 (fixtures)
    _fixture_logs,
    default_runs,
    overridden_runs,
)

NUM = r"(-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?|NaN|Inf)"


# ---------------------------------------------------------------- printed precision


def _digits(printed: str) -> int:
    mantissa = printed.lower().split("e")[0].lstrip("-").replace(",", "").replace(".", "")
    return max(1, len(mantissa.lstrip("0")))


def printed_as(printed: str, value: float) -> bool:
    """Whether `printed` is `value` written to the precision it shows (%g-style significant
    digits, or a fixed number of decimals)."""
    number = float(printed.replace(",", ""))
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return printed in ("NaN", "Inf", "-Inf") and (math.isnan(value) == (printed == "NaN"))
    if math.isclose(number, value, rel_tol=1e-9, abs_tol=1e-12):
        return True
    if float(f"{value:.{_digits(printed)}g}") == number:
        return True
    text = printed.replace(",", "")
    if "." in text and "e" not in text.lower():
        return round(value, len(text.split(".")[1])) == number
    return round(value) == number if "e" not in text.lower() else False


def rounded_up(printed: str, value: float, digits: int = 3) -> bool:
    """Whether `printed` is the bound `value` rounded up to `digits` significant digits."""
    if value == 0:
        return float(printed) == 0
    exponent = math.floor(math.log10(abs(value))) - digits + 1
    return math.isclose(float(printed), math.ceil(value / 10.0**exponent) * 10.0**exponent)


# ---------------------------------------------------------------- the raw log


class Raw:
    """The logged series of one run, read straight from the file."""

    def __init__(self, path) -> None:
        import stabilitycli

        data = stabilitycli.read(path)
        self.source = data.source
        frame = data.frame
        self.by_rank = frame if "rank" in frame.columns else None
        if self.by_rank is not None:  # the mean over ranks per step, as the loss of the run
            frame = frame.group_by("step").agg(pl.col("loss").mean()).sort("step")
        self.steps = frame["step"].to_numpy().astype(np.int64)
        names = [c for c in frame.columns if c != "step"]
        self.cols = {c: frame[c].cast(float).fill_null(np.nan).to_numpy() for c in names}
        # a row logged a metric where the frame holds a value (NaN included), not a null
        self.logged = {c: frame[c].is_not_null().to_numpy() for c in names}

    def rank_levels(self, rank: int, a: int, b: int) -> dict[str, float]:
        """Over steps [a, b]: the rank's median, the cohort's median (of the per-step median
        over every rank; with two ranks, the other rank's), and the means over ranks per step
        with and without the rank, averaged."""
        w = self.by_rank.filter((pl.col("step") >= a) & (pl.col("step") <= b))
        mine = w.filter(pl.col("rank") == rank)["loss"].to_numpy()
        others = pl.col("loss").filter(pl.col("rank") != rank)
        per = w.group_by("step").agg(
            pl.col("loss").median().alias("med"),
            pl.col("loss").mean().alias("with"),
            others.mean().alias("without"),
            others.median().alias("other"),
        )
        two = self.by_rank["rank"].n_unique() == 2
        return {
            "value": float(np.median(mine)),
            "cohort": float(np.median(per["other" if two else "med"].to_numpy())),
            "with": float(per["with"].mean()),
            "without": float(per["without"].mean()),
            "shift": float((per["with"] - per["without"]).mean()),
        }

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        logged = self.logged[name]
        return self.steps[logged], self.cols[name][logged]

    def between(self, name: str, a: int, b: int, finite: bool = True) -> np.ndarray:
        s, v = self.series(name)
        keep = (s >= a) & (s <= b)
        if finite:
            keep &= np.isfinite(v)
        return v[keep]

    def at(self, name: str, step: int) -> float:
        s, v = self.series(name)
        hit = np.flatnonzero(s == step)
        assert hit.size, f"{name} not logged at step {step}"
        return float(v[hit[-1]])

    def at_or_before(self, name: str, step: int) -> float:
        s, v = self.series(name)
        i = int(np.searchsorted(s, step, side="right")) - 1
        assert i >= 0, f"{name} not logged at or before step {step}"
        return float(v[i])

    def mean(self, name: str, a: int, b: int) -> float:
        return float(np.mean(self.between(name, a, b)))

    def median(self, name: str, a: int, b: int) -> float:
        return float(np.median(self.between(name, a, b)))

    def mean_of_medians(self, name: str, a: int, b: int, bin_points: int) -> float:
        v = self.between(name, a, b)
        return float(
            np.mean([np.median(v[i : i + bin_points]) for i in range(0, v.size, bin_points)])
        )

    def trailing(self, name: str, step: int, window: int) -> tuple[float, float, int, int]:
        """Mean and std (n-1) of the finite values logged in [step - window, step)."""
        s, v = self.series(name)
        keep = (s >= step - window) & (s < step) & np.isfinite(v)
        return (
            float(np.mean(v[keep])),
            float(np.std(v[keep], ddof=1)),
            int(s[keep][0]),
            int(s[keep][-1]),
        )

    def ema_before(self, step: int, span_steps: int = 50) -> float:
        s, v = self.series("loss")
        keep = (s < step) & np.isfinite(v)
        s, v = s[keep], v[keep]
        points = max(1.0, span_steps / float(np.median(np.diff(s))))
        alpha, ema = 2.0 / (points + 1.0), float(v[0])
        for x in v[1:]:
            ema = alpha * float(x) + (1 - alpha) * ema
        return ema

    def overflow_steps(self) -> list[int]:
        flagged = np.zeros(self.steps.size, bool)
        if "overflow" in self.cols:
            flagged |= np.nan_to_num(self.cols["overflow"], nan=0.0) > 0
        if "grad_norm" in self.cols:
            g = self.cols["grad_norm"]
            flagged |= self.logged["grad_norm"] & ~np.isfinite(g)
        if "loss_scale" in self.cols:
            s, v = self.series("loss_scale")
            idx = np.searchsorted(self.steps, s)
            for k in range(1, idx.size):
                if v[k] < v[k - 1] and not flagged[idx[k - 1]] and not flagged[idx[k]]:
                    flagged[idx[k]] = True
        return self.steps[flagged].tolist()


# ---------------------------------------------------------------- the checks


@dataclass
class Ledger:
    fixture: str
    kind: str
    counts: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)

    def number(
        self, what: str, printed: str, evidence: float, raw: float | None = None, rel: float = 1e-9
    ) -> None:
        """`printed` is `evidence` (to its precision), and `evidence` is `raw` (to `rel`: the
        rank evidence is rounded to 6 digits where it is made)."""
        self.counts[self.kind] += 1
        if not printed_as(printed, evidence):
            self.failures.append(f"{self.fixture}: {what}: printed {printed}, evidence {evidence}")
        if raw is not None and not (
            math.isclose(float(evidence), float(raw), rel_tol=rel, abs_tol=1e-12)
            or (math.isnan(float(evidence)) and math.isnan(float(raw)))
        ):
            self.failures.append(f"{self.fixture}: {what}: evidence {evidence}, raw log {raw}")

    def bound(self, what: str, printed: str, value: float, digits: int = 3) -> None:
        self.counts[self.kind] += 1
        if not rounded_up(printed, value, digits):
            self.failures.append(f"{self.fixture}: {what}: bound {printed}, value {value}")

    def same(self, what: str, a, b) -> None:
        self.counts[self.kind] += 1
        if a != b:
            self.failures.append(f"{self.fixture}: {what}: {a} != {b}")


def _finding(analysis, code: str, step: int | None = None):
    for f in analysis.findings:
        if f.code == code and (
            step is None or f.step == step or f.evidence.get("onset_step") == step
        ):
            return f
    raise AssertionError(f"no {code} finding at {step}")


# ---------------------------------------------------------------- headlines

LABELLED_LEVEL = re.compile(
    NUM + r" \((?P<label>the median of steps|the mean over steps|the mean of the medians over "
    r"steps) (?P<a>\d+)-(?P<b>\d+)"
)
TREND = re.compile(
    r"from step (?P<start>\d+): (?:the loss rose )?(?P<pct>[\d.]+)%, from (?P<from>\S+) \(.*?\) "
    r"to (?P<final>\S+) \(.*?\); Mann-Kendall z = (?P<z>\S+) over steps (?P<a>\d+)-(?P<b>\d+)"
)
NEVER_BACK = re.compile(r"never back down to (?P<level>\S+) \(")
AFTER_WINDOW = re.compile(r"after step (?P<after>\d+), (?=never back)")
AT_THE_TURN = re.compile(r"\((?P<lr>\S+) at the turn\)")
SPIKE = re.compile(
    r"(?i:l)oss spike at step (?P<onset>\d+) \(baseline mean (?P<mu>\S+) over steps "
    r"(?P<a>\d+)-(?P<b>\d+) -> peak (?P<peak>\S+) at step (?P<peak_step>\d+)(?:; geometric-mean "
    r"p\(correct token\) (?P<p0>\S+) -> (?P<p1>[^,)]+)(?:, uniform guessing over (?P<v>\d+) "
    r"tokens is (?P<nats>\S+) nats)?)?\) (?:recovered in (?P<rec>\d+) steps \(back to <= "
    r"(?P<level>\S+), the baseline mean \+ \S+\*sigma, at step (?P<rec_step>\d+)\)|did not recover "
    r"within (?P<within>\d+) steps(?P<divergent> \(divergent: the loss kept rising\))?)"
)
NAN = re.compile(
    r"non-finite at step (?P<first>\d+)(?:: (?P<series>\w+) shows it \(non-finite at every "
    r"logged point from there, (?P<hidden>\d+) points\) while the logged loss hides it(?: \(it "
    r"(?:falls|does not fall): (?P<l0>\S+) at step (?P<s0>\d+), (?P<l1>\S+) at step "
    r"(?P<s1>\d+)\))?| \((?P<count>\d+) non-finite points\))"
)
OVERFLOW = re.compile(r"(?P<n>\d+) overflow\(s\) on (?P<pct>[\d.]+)% of (?P<steps>\d+) steps")
COLLAPSED = re.compile(
    r"collapsed below (?P<floor>\S+) at step (?P<below>\d+) \(from (?P<max>\S+) down to "
    r"(?P<min>[^)]+)\): overflow on nearly every step; the overflows began at step "
    r"(?P<first>\d+) \((?P<n>\d+) overflow\(s\), (?P<halvings>\d+) halving\(s\)\)"
)
STATIC = re.compile(r"constant at (?P<scale>\S+) while (?P<n>\d+) overflow\(s\) happened")
RANK = re.compile(
    r"Rank (?P<rank>\d+) sits at (?P<value>\S+) against a cohort median of (?P<cohort>\S+) from "
    r"step (?P<onset>\d+) on \(medians over steps (?P<a>\d+)–(?P<b>\d+); robust z (?P<z>\S+), a "
    r"median too\); the mean of loss with rank (?P=rank) minus the mean without it over steps "
    r"(?P<c>\d+)–(?P<d>\d+): (?P<shift>[+-]\S+) \((?P<with>\S+) with it, (?P<without>\S+) "
    r"without, means over those steps\); (?:not back in line by the end of the log|back in line "
    r"from step (?P<back>\d+))"
    # the test that decided (#36): its statistic and bar, and a ramp-placed onset said so (a
    # rank of a pair is named by the pair's own comparison, without these)
    r"(?:; found by the persistence test: \|robust z\| >= (?P<pz>\S+) on a run of (?P<prun>\d+) "
    r"logged steps, its bar of (?P<pbar>\d+) met at step (?P<pstep>\d+)|; found by the CUSUM "
    r"test: the CUSUM of its robust z \(allowance (?P<ck>\S+) a logged step\) reached "
    r"(?P<cval>\S+) at step (?P<cstep>\d+) \(bar: (?P<cbar>[^)]+)\))?"
    r"(?:; the onset is where a line fitted to its robust z leaves the cohort's level)?"
    r"(?:; also rank\(s\) (?P<also>[\d, ]+))?"
)
RECURRING = re.compile(
    r"(?P<n>\d+) one-point loss spikes with no evident cause \((?P<lo>\S+)-(?P<hi>\S+)x the "
    r"trailing mean, steps (?P<a>\d+)-(?P<b>\d+)\), each back at baseline within (?P<rec>\d+) "
    r"(?:step|steps)\b"
)
WARNINGS = re.compile(r"\((?P<n>\d+) warning\(s\) worth a look\)")
# what a healthy headline rests on: "loss 1,500 points (steps 0-1499)", "8 ranks"
BASIS = re.compile(
    r"(?P<series>[\w/.]+) (?P<n>[\d,]+) (?:points?|evaluations?) \(steps (?P<a>\d+)-(?P<b>\d+)\)"
)
BASIS_RANKS = re.compile(r"(?P<n>\d+) ranks\b")


def _whole(value: float) -> str:
    return str(int(value)) if value >= 1 and value == int(value) else f"{value:g}"


def _level(ledger: Ledger, raw: Raw, m: re.Match, value: float, what: str, bin_points: int):
    a, b = int(m["a"]), int(m["b"])
    label = m["label"]
    if label == "the median of steps":
        truth = raw.median("loss", a, b)
    elif label == "the mean over steps":
        truth = raw.mean("loss", a, b)
    else:
        truth = raw.mean_of_medians("loss", a, b, bin_points)
    ledger.number(f"{what} ({label} {a}-{b})", m.group(1), value, truth)


def _trend_headline(ledger: Ledger, raw: Raw, text: str, ev: dict) -> str:
    m = TREND.search(text)
    if not m:
        ledger.failures.append(f"{ledger.fixture}: no trend phrase in {text!r}")
        return text
    ledger.same("rise start step", int(m["start"]), ev["start_step"])
    ledger.same(
        "trend window", (int(m["a"]), int(m["b"])), (ev["window_start_step"], ev["end_step"])
    )
    z = _mann_kendall(raw, ev)
    ledger.number("Mann-Kendall z", m["z"], z)
    ledger.same("Mann-Kendall z (evidence)", ev["z"], round(z, 2))
    # every level the headline names is the evidence level of those steps
    levels = list(LABELLED_LEVEL.finditer(text))
    ledger.same("levels named", len(levels) >= 2, True)
    keys = ("rise_from", "rise_to", "final_level", "start_level")
    if all(f"{k}_steps" in ev for k in keys):
        by_steps = {
            tuple(ev[f"{k}_steps"]): ev[k if k.endswith("level") else f"{k}_level"] for k in keys
        }
        named = [by_steps.get((int(lm["a"]), int(lm["b"]))) for lm in levels]
    else:  # evidence that does not say which steps its levels are of: by their order
        ledger.failures.append(f"{ledger.fixture}: the evidence does not name its levels' steps")
        order = [ev["rise_from_level"], ev["final_level"], ev["start_level"]]
        named = [*order[: len(levels) - 1], order[-1]] if len(levels) > 2 else order[:2]
    for lm, value in zip(levels, named, strict=False):
        if value is None:
            ledger.failures.append(f"{ledger.fixture}: level {lm.group(0)} is no evidence level")
            continue
        _level(ledger, raw, lm, value, "level", ev["bin_points"])
    back = NEVER_BACK.search(text)
    if back:
        ledger.number("never back down to", back["level"], ev["start_level"])
    after = AFTER_WINDOW.search(text)
    if after:  # "never back" is about what follows the trend window (issue 35)
        ledger.same("never back after", int(after["after"]), ev["end_step"])
    # the percentage is the rise between the two levels it names first
    low, high = named[0], named[1]
    rise = (high - low) / abs(low)
    ledger.number("relative rise %", m["pct"], rise * 100)
    ledger.same("relative rise (evidence)", round(ev["relative_rise"], 4), round(rise, 4))
    turn = AT_THE_TURN.search(text)
    if turn:
        cause = next(c for c in ev["causes"] if c["cause"] == "lr-increasing")
        ledger.number(
            "LR at the turn", turn["lr"], cause["lr_start"], raw.at("lr", ev["start_step"])
        )
    for mm in [m, *levels, back, turn, after]:
        if mm:
            text = text.replace(mm.group(0), "")
    return text


def _mann_kendall(raw: Raw, ev: dict) -> float:
    """The z of the Mann-Kendall test (no tie correction) on the trend bins of the window."""
    v = raw.between("loss", ev["window_start_step"], ev["end_step"])
    k = ev["bin_points"]
    x = np.array([np.median(v[i : i + k]) for i in range(0, v.size, k)])
    n = x.size
    s = sum(np.sign(x[j] - x[i]) for i in range(n) for j in range(i + 1, n))
    var = n * (n - 1) * (2 * n + 5) / 18.0
    z = (s - np.sign(s)) / math.sqrt(var)
    return float(z)


def _spike_headline(ledger: Ledger, raw: Raw, text: str, analysis, thresholds) -> str:
    m = SPIKE.search(text)
    if not m:
        ledger.failures.append(f"{ledger.fixture}: no spike phrase in {text!r}")
        return text
    ev = _finding(analysis, "spike", int(m["onset"])).evidence
    a, b = int(m["a"]), int(m["b"])
    ledger.same("baseline steps", (a, b), (ev["baseline_first_step"], ev["baseline_last_step"]))
    mu = raw.mean("loss", a, b)
    ledger.number("baseline mean", m["mu"], ev["mu"], mu)
    ledger.same("peak step", int(m["peak_step"]), ev["peak_step"])
    ledger.number("peak", m["peak"], ev["peak"], raw.at("loss", ev["peak_step"]))
    ledger.number(
        "peak is the event's largest",
        m["peak"],
        ev["peak"],
        float(np.max(raw.between("loss", ev["onset_step"], ev["end_step"]))),
    )
    if m["p0"]:  # said only for a loss the log shows to be a token cross-entropy (issue 35)
        ledger.number("p(correct) at the baseline", m["p0"], math.exp(-ev["mu"]), math.exp(-mu))
        ledger.number(
            "p(correct) at the peak",
            m["p1"],
            math.exp(-ev["peak"]),
            math.exp(-raw.at("loss", ev["peak_step"])),
        )
    if m["v"]:
        ledger.same("vocabulary", int(m["v"]), raw.source.vocab_size)
        ledger.number("uniform guessing nats", m["nats"], math.log(int(m["v"])))
    if m["rec"]:
        ledger.same("recovery steps", int(m["rec"]), ev["recovery_steps"])
        ledger.same("recovery step", int(m["rec_step"]), ev["recovery_step"])
        ledger.number("recovery level", m["level"], ev["recovery_level"])
        ledger.same(
            "recovery step - onset", ev["recovery_steps"], ev["recovery_step"] - ev["onset_step"]
        )
        ledger.same(
            "loss back at the recovery step",
            raw.at("loss", ev["recovery_step"]) <= ev["recovery_level"],
            True,
        )
    else:
        ledger.same("recovery horizon", int(m["within"]), thresholds.recovery_window_steps)
        # "divergent" is said exactly for type 3; 1 and 2 are recovered / did not recover
        ledger.same("spike type", 3 if m["divergent"] else 2, ev["spike_type"])
    return text.replace(m.group(0), "")


def _headline(ledger: Ledger, raw: Raw, run: dict) -> None:
    analysis, thresholds = run["analysis"], run["thresholds"]
    verdict = analysis.verdict
    text = verdict.summary
    code = verdict.code
    if code in ("divergence", "plateau"):
        text = _trend_headline(ledger, raw, text, _finding(analysis, code).evidence)
    elif code.startswith("spike-") and RECURRING.search(text):
        m = RECURRING.search(text)
        ev = _finding(analysis, "recurring-spikes").evidence
        ledger.same("spike count", int(m["n"]), ev["count"])
        ledger.same("spike count (listed)", ev["count"], len(ev["steps"]))
        ledger.same("first / last", (int(m["a"]), int(m["b"])), (ev["steps"][0], ev["steps"][-1]))
        ratios = []
        for step in ev["steps"]:
            mean, _, _, _ = raw.trailing("loss", step, thresholds.spike_window_steps)
            ratios.append(raw.at("loss", step) / mean)
        ledger.number("smallest ratio", m["lo"], ev["ratio_min"], min(ratios))
        ledger.number("largest ratio", m["hi"], ev["ratio_max"], max(ratios))
        ledger.same("recovery steps", int(m["rec"]), ev["longest_recovery_steps"])
        text = text.replace(m.group(0), "")
    elif code.startswith("spike-"):
        text = _spike_headline(ledger, raw, text, analysis, thresholds)
    elif code == "rank-outlier":
        m = RANK.search(text)
        f = next(
            f for f in analysis.findings if f.code == "rank-outlier" and f.rank == int(m["rank"])
        )
        ev = f.evidence
        a, b = int(m["a"]), int(m["b"])
        ledger.same("effect steps", (a, b), tuple(ev["effect_steps"]))
        ledger.same("same steps", (a, b), (int(m["c"]), int(m["d"])))
        ledger.same("onset", int(m["onset"]), f.step)
        truth = raw.rank_levels(f.rank, a, b)
        ledger.number("rank median", m["value"], ev["value"], truth["value"], rel=1e-5)
        ledger.number("cohort median", m["cohort"], ev["cohort_median"], truth["cohort"], rel=1e-5)
        ledger.number("robust z", m["z"], ev["robust_z"])
        ledger.number("mean with", m["with"], ev["mean_with"], truth["with"], rel=1e-5)
        ledger.number("mean without", m["without"], ev["mean_without"], truth["without"], rel=1e-5)
        ledger.number("mean shift", m["shift"], ev["mean_shift"], truth["shift"], rel=1e-5)
        if m["back"]:
            ledger.same("back in line", int(m["back"]), ev["recovered_step"])
        else:
            ledger.same("not back", ev["recovered_step"], None)
        if m["pz"]:
            ledger.same("test", ev["test"], "persistence")
            ledger.number("z bar", m["pz"], thresholds.rank_z)
            ledger.number("run of logged steps", m["prun"], ev["test_statistic"])
            ledger.number(
                "persistence bar", m["pbar"], ev["test_bar"], thresholds.rank_persist_steps
            )
            ledger.same("decided at", int(m["pstep"]), ev["test_step"])
        elif m["cval"]:
            ledger.same("test", ev["test"], "cusum")
            ledger.number("CUSUM allowance", m["ck"], thresholds.rank_cusum_k)
            ledger.number("CUSUM reached", m["cval"], ev["test_statistic"])
            ledger.number("CUSUM bar", m["cbar"], ev["test_bar"], thresholds.rank_cusum_decide)
            ledger.same("decided at", int(m["cstep"]), ev["test_step"])
        if m["also"]:
            others = {g.rank for g in analysis.findings if g.code == "rank-outlier"} - {f.rank}
            ledger.same("other ranks", {int(r) for r in m["also"].split(",")}, others)
        text = text.replace(m.group(0), "")
    elif code == "nan":
        m = NAN.search(text)
        ev = _finding(analysis, "nan").evidence
        series = m["series"] or "loss"
        s, v = raw.series(series)
        bad = ~np.isfinite(v)
        ledger.same("series", series, ev["series"])
        ledger.same("first non-finite step", int(m["first"]), ev["first_step"])
        ledger.same("first non-finite step (raw)", ev["first_step"], int(s[bad][0]))
        ledger.same("non-finite points", int(m["count"] or m["hidden"]), ev["count"])
        if m["l0"]:
            ledger.number(
                "loss at the first", m["l0"], ev["loss_at_first"], raw.at("loss", ev["first_step"])
            )
            ledger.number("last loss", m["l1"], ev["loss_last"], raw.at("loss", int(m["s1"])))
        ledger.same("non-finite points (raw)", ev["count"], int(bad.sum()))
        text = text.replace(m.group(0), "").replace("65504", "")
    elif code == "fp16-overflow":
        m = OVERFLOW.search(text)
        ev = _finding(analysis, "fp16-overflow").evidence
        overflows = raw.overflow_steps()
        ledger.same("overflows", int(m["n"]), ev["overflows"])
        ledger.same("overflows (raw)", ev["overflows"], len(overflows))
        ledger.same("logged steps", int(m["steps"]), raw.steps.size)
        ledger.number(
            "overflow share %", m["pct"], ev["rate"] * 100, 100 * len(overflows) / raw.steps.size
        )
        text = text.replace(m.group(0), "")
    elif code == "loss-scale-collapsed":
        m = COLLAPSED.search(text)
        ev = _finding(analysis, code).evidence
        s, v = raw.series("loss_scale")
        ledger.number("floor", m["floor"], thresholds.min_loss_scale)
        ledger.same("first step below", int(m["below"]), ev["first_step_below"])
        ledger.same(
            "first step below (raw)",
            ev["first_step_below"],
            int(s[v < thresholds.min_loss_scale][0]),
        )
        ledger.number("largest scale", m["max"], ev["scale_max"], float(v.max()))
        ledger.number("smallest scale", m["min"], ev["scale_min"], float(v.min()))
        ledger.same("first overflow", int(m["first"]), ev["first_overflow_step"])
        ledger.same("first overflow (raw)", ev["first_overflow_step"], raw.overflow_steps()[0])
        ledger.same("halvings", int(m["halvings"]), len(ev["halving_steps"]))
        ledger.same("halvings (raw)", len(ev["halving_steps"]), int(np.sum(np.diff(v) < 0)))
        text = text.replace(m.group(0), "")
    elif code == "loss-scale-static":
        m = STATIC.search(text)
        ev = _finding(analysis, code).evidence
        s, v = raw.series("loss_scale")
        ledger.same("one scale (raw)", np.unique(v).size, 1)
        ledger.number("constant scale", m["scale"], ev["scale"], float(v[0]))
        # a loss scale is a whole power of two: printed in full, not as 2.09715e+06
        ledger.same("scale in full", m["scale"], _whole(float(v[0])))
        ledger.same("overflows", int(m["n"]), ev["overflows"])
        ledger.same("overflows (raw)", ev["overflows"], len(raw.overflow_steps()))
        text = text.replace(m.group(0), "")
    elif code == "healthy":
        m = WARNINGS.search(text)
        warnings = sum(1 for f in analysis.findings if str(f.severity) == "warning")
        if m:
            ledger.same("warnings", int(m["n"]), warnings)
            text = text.replace(m.group(0), "")
        else:
            ledger.same("no warning left unsaid", warnings, 0)
        for b in BASIS.finditer(text):
            s, _ = raw.series(b["series"])
            ledger.same(f"{b['series']} points", int(b["n"].replace(",", "")), s.size)
            ledger.same(f"{b['series']} steps", (int(b["a"]), int(b["b"])), (s[0], s[-1]))
        if (r := BASIS_RANKS.search(text)) and raw.by_rank is not None:
            ledger.same("ranks", int(r["n"]), raw.by_rank["rank"].n_unique())
            text = text.replace(r.group(0), "")
        text = BASIS.sub("", text)
    else:
        ledger.counts[ledger.kind] += 1  # insufficient-data: a headline with no number
    left = re.findall(r"(?<![\w.])\d[\d.,]*(?:e[+-]?\d+)?", re.sub(CONSTANTS, " ", text))
    if left:
        ledger.unlabelled.append(f"{ledger.fixture} [headline]: {left} in {text!r}")


# ---------------------------------------------------------------- the post-mortem


def _sections(markdown: str) -> list[tuple[str, dict[str, list[str]]]]:
    """(incident title, {"symptoms": lines, "root": lines, "verification": lines})."""
    out = []
    for block in re.split(r"^## ", markdown, flags=re.M)[1:]:
        title, _, body = block.partition("\n")
        parts = re.split(r"^### ", body, flags=re.M)
        found = {"symptoms": [], "hypotheses": [], "root": [], "verification": [], "cost": []}
        for part in parts:
            head, _, text = part.partition("\n")
            key = {
                "1. Symptoms": "symptoms",
                "2. Hypotheses": "hypotheses",
                "7. Cost": "cost",
                "4. Root cause": "root",
                "6. Verification": "verification",
            }
            for prefix, name in key.items():
                if head.startswith(prefix):
                    found[name] = [
                        ln for ln in text.splitlines() if ln.strip() and not ln.startswith("```")
                    ]
        out.append((re.sub(r"^\d+\. ", "", title.strip()), found))
    return out


@dataclass
class Line:
    """One line of the post-mortem and the regex families that consume its numbers."""

    text: str
    rest: str = ""

    def __post_init__(self) -> None:
        self.rest = self.text

    def take(self, pattern: str) -> re.Match | None:
        m = re.search(pattern, self.rest)
        if m:
            self.rest = self.rest[: m.start()] + " " + self.rest[m.end() :]
        return m


# words around a number that is a constant of the text, not a measurement
CONSTANTS = r"other than 1|scale below 1|log\(0\)|0/0|exactly 0"


def _leftover(ledger: Ledger, where: str, line: Line) -> None:
    if line.text.startswith("--expect"):
        return  # the verification bounds again, as stab compare expressions
    rest = re.sub(CONSTANTS, " ", line.rest)
    rest = re.sub(
        r"\*needs a human\*|fp16|fp32|bf16|65504|[\w.]*\.\d[\w.]*mlp|h\.\d\.\w+", " ", rest
    )
    rest = re.sub(r"\b(?:type \d|H\d|\d+x its|\d(?=\)))\b", " ", rest)
    left = re.findall(r"(?<![\w./-])-?\d[\d.,]*(?:e[+-]?\d+)?", rest)
    if left:
        ledger.unlabelled.append(f"{ledger.fixture} [post-mortem {where}]: {left} in {line.text!r}")


def _raw_local_level(raw: Raw, a: int, b: int, at: int, thr) -> tuple[float, float]:
    """The local level at step `at` and the spread around the trend, from the raw log's
    points over steps a-b (detect/level.py, recomputed here from its definition): the
    window's trend (later half's mean against the earlier half's) read at `at`, between
    the last quarter's mean and the window's mean."""
    steps, values = raw.series("loss")
    inside = (steps >= a) & (steps <= b) & np.isfinite(values)
    x, v = steps[inside].astype(float), values[inside]
    late = x >= at - thr.spike_window_steps // 2
    last = x >= at - thr.spike_window_steps // 4
    if v.size >= thr.stable_std_points:
        return _raw_dense_fall_level(raw, (x, v, late, last), at, thr)
    slope = (v[late].mean() - v[~late].mean()) / (x[late].mean() - x[~late].mean())
    line = v.mean() + slope * (at - x.mean())
    level = min(v.mean(), max(line, v[last].mean()))
    spread = math.sqrt(max(np.var(v, ddof=1) - slope**2 * np.var(x, ddof=1), 0.0))
    return level, max(spread, thr.sigma_floor_frac * abs(v.mean()))


def _raw_dense_fall_level(raw: Raw, window, at: int, thr) -> tuple[float, float]:
    """A dense log's local level (detect/fall_curve.py): the parabola through the means of
    the window's earlier half, third quarter and last quarter read at `at`, floored at the
    mean of the last level_recent_points points less two standard errors; sigma the
    relative point-to-point noise (lag-1 memory taken out) times the level, widened for
    the level's own error."""
    x, v, late, last = window
    parts = [(x[m].mean(), v[m].mean()) for m in (~late, late & ~last, last)]
    (x0, y0), (x1, y1), (x2, y2) = parts
    bend = min(
        v.mean(),
        y0 * (at - x1) * (at - x2) / ((x0 - x1) * (x0 - x2))
        + y1 * (at - x0) * (at - x2) / ((x1 - x0) * (x1 - x2))
        + y2 * (at - x0) * (at - x1) / ((x2 - x0) * (x2 - x1)),
    )
    steps, values = raw.series("loss")
    memory = noise_memory_of(values, thr)
    before = values[(steps < at) & np.isfinite(values)]
    pairs = before[-v.size - 1 :]
    relative = np.diff(pairs) / np.abs((pairs[1:] + pairs[:-1]) / 2.0)
    lag1 = min(max(memory.lag1, 0.0), 0.9)
    noise = math.sqrt(np.var(relative, ddof=1) / (2.0 * (1.0 - lag1)))
    recent_points = thr.level_recent_points
    se = math.sqrt(memory.variance_factor(recent_points) / recent_points)

    def sigma_at(level: float) -> float:
        return max(noise, thr.sigma_floor_frac) * abs(level)

    floor = before[-recent_points:].mean() - 2.0 * se * sigma_at(bend)
    level = min(v.mean(), max(bend, floor))
    # widened for the level's own error: the parabola's weights squared over the points
    weights = (
        (at - x1) * (at - x2) / ((x0 - x1) * (x0 - x2)),
        (at - x0) * (at - x2) / ((x1 - x0) * (x1 - x2)),
        (at - x0) * (at - x1) / ((x2 - x0) * (x2 - x1)),
    )
    counts = ((~late).sum(), (late & ~last).sum(), last.sum())
    error = sum(w * w / c for w, c in zip(weights, counts, strict=True))
    return level, sigma_at(level) * math.sqrt(1.0 + error)


def _spike_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    onset, peak_step = ev["onset_step"], ev["peak_step"]
    lo, hi = onset - thr.cause_lead_steps, onset + thr.recovery_window_steps
    grad_mean = None  # the trailing mean of the grad norm the symptoms name
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"step where the spike began: (\d+)"):
            ledger.same("onset", int(m[1]), onset)
        if m := ln.take(r"tokens consumed at the onset: ([\d,]+)"):
            ledger.number("tokens at onset", m[1], raw.at_or_before("tokens", onset))
        if m := ln.take(r"pre-spike loss \(50-step EMA\): " + NUM):
            ledger.number("pre-spike EMA", m[1], raw.ema_before(onset))
        if m := ln.take(
            r"baseline mu / sigma \(trailing (\d+) steps: steps (\d+)-(\d+)\): "
            + NUM
            + " / "
            + NUM
            + r" \(threshold "
            + NUM
            + r"\)"
        ):
            a, b = int(m[2]), int(m[3])
            ledger.same("baseline window", int(m[1]), thr.spike_window_steps)
            ledger.number("baseline mu", m[4], ev["mu"], raw.mean("loss", a, b))
            ledger.number(
                "baseline sigma",
                m[5],
                ev["sigma"],
                max(
                    float(np.std(raw.between("loss", a, b), ddof=1)),
                    thr.sigma_floor_frac * abs(ev["mu"]),
                ),
            )
            ledger.number(
                "threshold", m[6], ev["threshold"], ev["mu"] + thr.spike_sigma * ev["sigma"]
            )
        if m := ln.take(
            r"baseline local level / sigma \(the trend of steps (\d+)-(\d+) at step (\d+), "
            r"sigma around it\): " + NUM + " / " + NUM + r" \(threshold " + NUM + r"\)"
        ):
            level, spread = _raw_local_level(raw, int(m[1]), int(m[2]), int(m[3]), thr)
            ledger.same("local level step", int(m[3]), onset)
            ledger.number("baseline local level", m[4], ev["mu"], level, rel=1e-6)
            ledger.number("baseline sigma", m[5], ev["sigma"], spread, rel=1e-6)
            ledger.number(
                "threshold", m[6], ev["threshold"], ev["mu"] + thr.spike_sigma * ev["sigma"]
            )
        if m := ln.take(r"peak loss \(step (\d+)\): " + NUM + r" \(z = " + NUM + r"\)"):
            ledger.same("peak step", int(m[1]), peak_step)
            ledger.number("peak", m[2], ev["peak"], raw.at("loss", peak_step))
            ledger.number("z", m[3], ev["z"], (ev["peak"] - ev["mu"]) / ev["sigma"])
        if m := ln.take(
            r"loss (\d+) steps after the peak: (?:did not recover \()?"
            + NUM
            + r"(?: at step | \(step )(\d+)\)"
        ):
            ledger.same("after-peak horizon", int(m[1]), thr.recovery_window_steps)
            s = int(m[3])
            ledger.same(
                "first logged step after the horizon",
                s,
                int(
                    raw.series("loss")[0][
                        raw.series("loss")[0] >= peak_step + thr.recovery_window_steps
                    ][0]
                ),
            )
            ledger.number("loss after the peak", m[2], raw.at("loss", s))
        if m := ln.take(
            r"(?:pre-clip )?grad norm at the spike: "
            + NUM
            + r" at step (\d+) \(baseline "
            + NUM
            + r"(?: over steps (\d+)-(\d+))?, "
            + NUM
            + r"x\)"
        ):
            s = int(m[2])
            mean, _, a, b = raw.trailing("grad_norm", s, thr.spike_window_steps)
            grad_mean = mean
            ledger.same("grad step within the lead", lo <= s <= onset, True)
            ledger.number("grad norm at its step", m[1], raw.at("grad_norm", s))
            ledger.number("grad baseline (trailing mean)", m[3], mean)
            if m[4]:
                ledger.same("grad baseline steps", (int(m[4]), int(m[5])), (a, b))
            ledger.number("grad ratio", m[6], raw.at("grad_norm", s) / mean)
        if m := ln.take(r"LR at the spike: " + NUM):
            ledger.number("LR at onset", m[1], raw.at_or_before("lr", onset))
        if m := ln.take(r"batch index at the spike: (\d+)"):
            ledger.number("batch id at onset", m[1], raw.at_or_before("batch_id", onset))
        # root causes
        if m := ln.take(
            r"At step (\d+) the (?:pre-clip )?grad norm reached "
            + NUM
            + r", (\d+)x its trailing mean "
            r"of "
            + NUM
            + r"(?: \(steps (\d+)-(\d+)\))?, (\d+) step\(s\) before the loss jumped from "
            r"(?:its (baseline mean|local level) )?"
            + NUM
            + r"(?: \(steps (\d+)-(\d+)\))? to "
            + NUM
            + r"(?: at step (\d+))?"
        ):
            s = int(m[1])
            mean, _, a, b = raw.trailing("grad_norm", s, thr.spike_window_steps)
            ledger.number("root: grad norm", m[2], raw.at("grad_norm", s))
            ledger.number("root: ratio", m[3], raw.at("grad_norm", s) / mean)
            ledger.number("root: trailing mean", m[4], mean)
            if m[5]:
                ledger.same("root: trailing mean steps", (int(m[5]), int(m[6])), (a, b))
            ledger.same("root: lead", int(m[7]), onset - s)
            if not m[10]:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem root]: 'jumped from {m[9]}' is the "
                    "baseline mean, not a loss value"
                )
            else:
                a_, b_ = int(m[10]), int(m[11])
                if m[8] == "local level":
                    level = _raw_local_level(raw, a_, b_, onset, thr)[0]
                    ledger.number("root: local level", m[9], ev["mu"], level, rel=1e-6)
                else:
                    ledger.number("root: baseline mean", m[9], ev["mu"], raw.mean("loss", a_, b_))
            ledger.number("root: peak", m[12], ev["peak"], raw.at("loss", peak_step))
            if not m[13]:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem root]: peak {m[12]} without its step"
                )
        if m := ln.take(
            r"The learning rate jumped from "
            + NUM
            + " to "
            + NUM
            + r" at step (\d+), (\d+) step\(s\) before"
        ):
            s = int(m[3])
            steps, lr = raw.series("lr")
            i = int(np.flatnonzero(steps == s)[0])
            ledger.number("root: LR before", m[1], float(lr[i - 1]))
            ledger.number("root: LR after", m[2], float(lr[i]))
            ledger.same("root: lead", int(m[4]), onset - s)
        if m := ln.take(
            r"The batch at step (\d+) \(id (\d+)\) is the batch of step (\d+) served again"
        ):
            ledger.same("root: batch id at the spike", float(m[2]), raw.at("batch_id", int(m[1])))
            ledger.same("root: batch id before", float(m[2]), raw.at("batch_id", int(m[3])))
            ledger.same("root: spike step", int(m[1]), onset)
        if m := ln.take(
            r"The run resumed from a checkpoint at step (\d+) and spiked (\d+) step\(s\) later"
        ):
            ledger.same("resume step", int(m[1]), raw.source.restarts[0].resumed_from_step)
            ledger.same("resume lead", int(m[2]), onset - int(m[1]))
        # verification
        if m := ln.take(
            r"loss at step (\d+) < "
            + NUM
            + r" \(the pre-spike mu \+ (\S+) sigma; the spike peaked at "
            + NUM
            + r" at step (\d+)\)"
        ):
            ledger.same("check step", int(m[1]), onset)
            ledger.bound("loss bound", m[2], ev["threshold"])
            ledger.number("k", m[3], thr.spike_sigma)
            ledger.number("peak", m[4], ev["peak"], raw.at("loss", int(m[5])))
        if m := ln.take(
            r"max grad norm in \[(\d+), (\d+)\] < "
            + NUM
            + r" \((\S+)x its pre-spike mean(?: "
            + NUM
            + r")?; it was "
            + NUM
            + r"(?: at step (\d+))?\)"
        ):
            a, b = int(m[1]), int(m[2])
            ledger.same("grad window", (a, b), (lo, hi))
            gs, gv = raw.series("grad_norm")
            inside = (gs >= a) & (gs <= b) & np.isfinite(gv)
            ledger.number("the max grad norm it was", m[6], float(np.max(gv[inside])))
            if m[5]:
                ledger.number("grad bound's mean", m[5], grad_mean)
                ledger.bound("grad bound", m[3], float(m[4]) * grad_mean)
            if m[7]:
                ledger.same("the max's step", int(m[7]), int(gs[inside][np.argmax(gv[inside])]))
            else:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem spike]: 'it was {m[6]}' without its step"
                )
        if m := ln.take(
            r"loss at step (\d+) < "
            + NUM
            + r" \(back to baseline within (\d+) steps; it was "
            + NUM
            + r"\)"
        ):
            ledger.bound("recovery bound", m[2], ev["recovery_level"])
            ledger.number("loss it was", m[4], raw.at("loss", int(m[1])))
        _leftover(ledger, "spike", ln)


def _nan_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    first = ev["first_step"]
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"first non-finite step: (\d+)"):
            ledger.same("first", int(m[1]), first)
        if m := ln.take(
            r"non-finite points: (\d+) of (\d+)(?: \((\d+) NaN, (\d+) \+Inf, (\d+) -Inf\))?"
            r"(?:; seen in (\w+))?"
        ):
            series = m[6] or "loss"
            s, v = raw.series(series)
            ledger.same("count", int(m[1]), int((~np.isfinite(v)).sum()))
            ledger.same("points", int(m[2]), v.size)
            if m[3]:
                ledger.same(
                    "NaN/+Inf/-Inf",
                    (int(m[3]), int(m[4]), int(m[5])),
                    (int(np.isnan(v).sum()), int(np.isposinf(v).sum()), int(np.isneginf(v).sum())),
                )
        if m := ln.take(r"pre-NaN loss \(50-step EMA\): " + NUM):
            ledger.number("pre-NaN EMA", m[1], raw.ema_before(first))
        if m := ln.take(r"last finite loss(?: \(step (\d+)\))?: " + NUM):
            s, v = raw.series("loss")
            ok = np.isfinite(v) & (s < first)
            ledger.number("last finite loss", m[2], ev["last_finite_loss"], float(v[ok][-1]))
            if m[1]:
                ledger.same("last finite step", int(m[1]), int(s[ok][-1]))
            else:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem nan]: 'last finite loss: {m[2]}' "
                    "without its step"
                )
        if m := ln.take(r"(?:pre-clip )?grad norm at that step: " + NUM):
            ledger.number("grad at first", m[1], raw.at_or_before("grad_norm", first))
        if m := ln.take(r"loss scale at that step: " + NUM):
            ledger.number("scale at first", m[1], raw.at_or_before("loss_scale", first))
        if m := ln.take(r"LR at that step: " + NUM):
            ledger.number("LR at first", m[1], raw.at_or_before("lr", first))
        if m := ln.take(r"batch index at that step: (\d+)"):
            ledger.number("batch at first", m[1], raw.at_or_before("batch_id", first))
        if m := ln.take(
            r"at or before step (\d+)|went non-finite at step (\d+)|At step (\d+) layer"
        ):
            ledger.same("root step", int(m[1] or m[2] or m[3]), first)
        if m := ln.take(
            r"loss at step (\d+) < "
            + NUM
            + r" \(finite, within the pre-NaN mu \+ (\S+) sigma(?: of steps (\d+)-(\d+))?\)"
        ):
            mean, std, a, b = raw.trailing("loss", first, thr.spike_window_steps)
            ledger.bound(
                "NaN bound",
                m[2],
                mean + thr.spike_sigma * max(std, thr.sigma_floor_frac * abs(mean)),
            )
            if m[4]:
                ledger.same("NaN bound steps", (int(m[4]), int(m[5])), (a, b))
            else:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem nan]: 'pre-NaN mu + 3 sigma' without its steps"
                )
        if m := ln.take(r"max loss in \[(\d+), (\d+)\] < " + NUM):
            ledger.same("NaN check span", (int(m[1]), int(m[2])), (first, int(raw.steps[-1])))
        _leftover(ledger, "nan", ln)


def _trend_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    start, k = ev["start_step"], ev["bin_points"]
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"rise began at step: (\d+)"):
            ledger.same("rise start", int(m[1]), start)
        if m := ln.take(
            r"loss level at the start / end of the rising window(?: \(steps \d+–\d+\))?: "
            + NUM
            + " -> "
            + NUM
        ):
            ledger.unlabelled.append(
                f"{ledger.fixture} [post-mortem]: {m[1]} -> {m[2]} called the level at the start / "
                "end of the rising window, but they are window means of bin medians with no steps"
            )
        if m := ln.take(
            r"loss: the mean of the medians over steps (\d+)–(\d+) -> over steps (\d+)–(\d+) "
            r"\(the start and end of the trend window\): " + NUM + " -> " + NUM
        ):
            ledger.number(
                "window start level",
                m[5],
                ev["start_level"],
                raw.mean_of_medians("loss", int(m[1]), int(m[2]), k),
            )
            ledger.number(
                "window end level",
                m[6],
                ev["end_level"],
                raw.mean_of_medians("loss", int(m[3]), int(m[4]), k),
            )
            ledger.same("window", (int(m[1]), int(m[4])), (ev["window_start_step"], ev["end_step"]))
        if m := ln.take(r"Mann-Kendall z over steps (\d+)–(\d+): " + NUM):
            ledger.same(
                "MK window", (int(m[1]), int(m[2])), (ev["window_start_step"], ev["end_step"])
            )
            ledger.number("MK z", m[3], ev["z"], round(_mann_kendall(raw, ev), 2))
        if m := ln.take(
            r"rise: \+"
            + NUM
            + r"%, from "
            + NUM
            + r" \((the median of|the mean of the medians over) steps (\d+)–(\d+)\) to "
            + NUM
            + r" \(the mean of the medians over steps (\d+)–(\d+)\)"
        ):
            a, b = int(m[4]), int(m[5])
            low = (
                raw.median("loss", a, b)
                if m[3] == "the median of"
                else raw.mean_of_medians("loss", a, b, k)
            )
            high = raw.mean_of_medians("loss", int(m[7]), int(m[8]), k)
            ledger.number("rise from", m[2], ev["rise_from_level"], low)
            ledger.number("rise to", m[6], ev["rise_to_level"], high)
            ledger.number("rise %", m[1], (high - low) / abs(low) * 100)
            ledger.same(
                "rise (evidence)", round(ev["relative_rise"], 4), round((high - low) / abs(low), 4)
            )
        if m := ln.take(r"last finite loss \(step (\d+)\): " + NUM):
            ledger.number("last finite loss", m[2], ev["final_loss"], raw.at("loss", int(m[1])))
        if m := ln.take(r"LR at the start / end of the log: " + NUM + " -> " + NUM):
            s, _ = raw.series("lr")
            ledger.number("LR at the start of the log", m[1], raw.at("lr", int(s[0])))
            ledger.number("LR at the end of the log", m[2], raw.at("lr", int(s[-1])))
        if m := ln.take(
            r"LR at step (\d+) \(where the rise began\) / step (\d+) \(the end of the log\): "
            + NUM
            + " -> "
            + NUM
        ):
            ledger.same("LR steps", (int(m[1]), int(m[2])), (start, int(raw.steps[-1])))
            ledger.number("LR at the rise", m[3], raw.at_or_before("lr", int(m[1])))
            ledger.number("LR at the end", m[4], raw.at_or_before("lr", int(m[2])))
        if m := ln.take(
            r"From step (\d+) the loss rose from "
            + NUM
            + r"(?: \((the median of|the mean of the medians over) steps (\d+)–(\d+)\))?"
        ):
            ledger.same("root start", int(m[1]), start)
            if m[3]:
                a, b = int(m[4]), int(m[5])
                truth = (
                    raw.median("loss", a, b)
                    if m[3] == "the median of"
                    else raw.mean_of_medians("loss", a, b, k)
                )
                ledger.number("root: rose from", m[2], ev["rise_from_level"], truth)
            else:
                ledger.number(
                    "root: rose from (the loss at the start)", m[2], ev["rise_from_level"]
                )
        # the re-run bound of a divergence (a loss at a step) and of a plateau (a mean over
        # steps): the same level, said the same way
        for kind, subject in (
            ("divergence", r"loss at step \d+"),
            ("plateau", r"mean loss over steps \d+–\d+"),
        ):
            m = ln.take(
                subject
                + " < "
                + NUM
                + r" \(below (?:"
                + NUM
                + r", the mean of the medians over steps (\d+)–(\d+), where the trend window "
                r"opened|the level where the rise began)\)"
            )
            if not m:
                continue
            ledger.bound(f"{kind} bound", m[1], ev["start_level"])
            if m[2]:
                ledger.number(
                    "bound's level",
                    m[2],
                    ev["start_level"],
                    raw.mean_of_medians("loss", int(m[3]), int(m[4]), k),
                )
            else:
                ledger.unlabelled.append(
                    f"{ledger.fixture} [post-mortem]: {kind} bound {m[1]} 'below the level where "
                    "the rise began' is the window's opening level"
                )
        if m := ln.take(r"changed more than (\S+)x"):
            ledger.number("weight-norm bar", m[1], thr.weight_norm_ratio)
        _leftover(ledger, "trend", ln)


def _scale_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    overflows = raw.overflow_steps()
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"first overflow step: (\d+)"):
            ledger.same("first overflow", int(m[1]), overflows[0])
        if m := ln.take(r"overflows: (\d+), (?:at steps (\d+)–(\d+)|the first at step (\d+))"):
            ledger.same("overflow count", int(m[1]), len(overflows))
            if m[2]:
                ledger.same("overflow span", (int(m[2]), int(m[3])), (overflows[0], overflows[-1]))
            else:
                ledger.same("first overflow", int(m[4]), overflows[0])
        if m := ln.take(r"LR at the first overflow: " + NUM):
            ledger.number("LR at first overflow", m[1], raw.at_or_before("lr", overflows[0]))
        if m := ln.take(r"share of steps that overflowed: ([\d.]+)% of the logged steps"):
            ledger.number("overflow share", m[1], 100 * len(overflows) / raw.steps.size)
        if m := ln.take(r"loss scale: largest / smallest logged: " + NUM + " / " + NUM):
            _, v = raw.series("loss_scale")
            ledger.number("largest scale", m[1], float(v.max()))
            ledger.number("smallest scale", m[2], float(v.min()))
        if m := ln.take(r"first step with the scale below (\S+): (\d+)"):
            s, v = raw.series("loss_scale")
            ledger.same("first below", int(m[2]), int(s[v < float(m[1])][0]))
        if m := ln.take(r"halvings: (\d+), the first at step (\d+)"):
            s, v = raw.series("loss_scale")
            drops = s[1:][np.diff(v) < 0]
            ledger.same("halvings", int(m[1]), drops.size)
            ledger.same("first halving", int(m[2]), int(drops[0]))
        if m := ln.take(r"loss scale \(constant over the log\): " + NUM):
            _, v = raw.series("loss_scale")
            ledger.number("constant scale", m[1], float(v[0]))
            ledger.same("scale in full", m[1], _whole(float(v[0])))
        if m := ln.take(
            r"From step (\d+) the gradients overflowed (\d+) time\(s\); the dynamic scaler "
            r"halved the scale (\d+) times, to " + NUM + r" \(below (\S+) from step (\d+)\)"
        ):
            s, v = raw.series("loss_scale")
            ledger.same("root: first overflow", int(m[1]), overflows[0])
            ledger.same("root: overflows", int(m[2]), len(overflows))
            ledger.same("root: halvings", int(m[3]), int(np.sum(np.diff(v) < 0)))
            ledger.number("root: smallest", m[4], float(v.min()))
            ledger.same("root: first below", int(m[6]), int(s[v < float(m[5])][0]))
        if m := ln.take(
            r"stayed at " + NUM + r" while (\d+) overflow\(s\) happened from step (\d+)"
        ):
            _, v = raw.series("loss_scale")
            ledger.number("root: scale", m[1], float(v[0]))
            ledger.same("root: overflows", int(m[2]), len(overflows))
            ledger.same("root: first", int(m[3]), overflows[0])
        if m := ln.take(r"(\d+) fp16 overflow\(s\) from step (\d+) \(([\d.]+)% of the steps\)"):
            ledger.same("root: overflows", int(m[1]), len(overflows))
            ledger.same("root: first", int(m[2]), overflows[0])
            ledger.number("root: share", m[3], 100 * len(overflows) / raw.steps.size)
        if m := ln.take(
            r"min loss scale over steps (\d+)–(\d+) >= (\S+) \(it fell to " + NUM + r"\)"
        ):
            ledger.number(
                "fell to", m[4], float(np.min(raw.between("loss_scale", int(m[1]), int(m[2]))))
            )
        if m := ln.take(r"\(it stayed at " + NUM + r" through (\d+) overflow\(s\)\)"):
            ledger.number("stayed at", m[1], float(raw.series("loss_scale")[1][0]))
            ledger.same("through overflows", int(m[2]), len(overflows))
        if m := ln.take(r"max grad norm over steps (\d+)–(\d+) < inf"):
            ledger.same(
                "overflow check span", (int(m[1]), int(m[2])), (overflows[0], int(raw.steps[-1]))
            )
        _leftover(ledger, "loss scale", ln)


def _short_pm(ledger: Ledger, raw: Raw, ev, lines: dict, thr) -> None:
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"logged steps: (\d+)–(\d+)"):
            ledger.same(
                "logged steps", (int(m[1]), int(m[2])), (int(raw.steps[0]), int(raw.steps[-1]))
            )
        if m := ln.take(r"rows used: (\d+)"):
            ledger.same("rows used", int(m[1]), raw.steps.size)
        if m := ln.take(r"(\d+) finite loss points over (\d+) steps"):
            s, v = raw.series("loss")
            ledger.same("finite points", int(m[1]), int(np.isfinite(v).sum()))
            ledger.same("span", int(m[2]), int(s[-1] - s[0]))
        if m := ln.take(
            r"a spike needs a (\d+)-step baseline of >= (\d+) points before it "
            r"\(or (\d+) points in a sparse log\)"
        ):
            ledger.same("window", int(m[1]), thr.spike_window_steps)
            ledger.same("min points", int(m[2]), thr.min_points_per_window)
            ledger.same("widened", int(m[3]), thr.widened_window_points)
        ln.take(r"the (\d+)- and (\d+)-step windows")
        _leftover(ledger, "short", ln)


def _rank_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    rank = ev["rank"]
    a, b = ev["effect_steps"]
    truth = raw.rank_levels(rank, a, b)
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"^- rank: (\d+)"):
            ledger.same("rank", int(m[1]), rank)
        if m := ln.take(r"first step out of line with the cohort: (\d+)"):
            ledger.same("onset", int(m[1]), a)
        if m := ln.take(r"ranks reporting: (\d+)"):
            ledger.same("ranks", int(m[1]), raw.by_rank["rank"].n_unique())
        if m := ln.take(r"rank (\d+)'s loss \(median over steps (\d+)–(\d+)\): " + NUM):
            ledger.same("steps", (int(m[2]), int(m[3])), (a, b))
            ledger.number("rank median", m[4], ev["value"], truth["value"], rel=1e-5)
        if m := ln.take(r"cohort median of loss \(median over steps (\d+)–(\d+)\): " + NUM):
            ledger.number("cohort median", m[3], ev["cohort_median"], truth["cohort"], rel=1e-5)
        if m := ln.take(r"robust z of that median against the cohort: " + NUM):
            ledger.number("robust z", m[1], ev["robust_z"])
        if m := ln.take(
            r"mean loss over ranks, with / without rank (\d+) \(means over steps (\d+)–(\d+)\): "
            + NUM
            + " / "
            + NUM
            + r" \(it moved the mean by ([+-]\S+)\)"
        ):
            ledger.number("mean with", m[4], ev["mean_with"], truth["with"], rel=1e-5)
            ledger.number("mean without", m[5], ev["mean_without"], truth["without"], rel=1e-5)
            ledger.number("shift", m[6], ev["mean_shift"], truth["shift"], rel=1e-5)
        ln.take(r"back in line from step: not by the end of the log")
        if m := ln.take(r"back in line from step: (\d+)"):
            ledger.same("back", int(m[1]), ev["recovered_step"])
        if m := ln.take(r"a loss spike from step (\d+) \(peak " + NUM + r" at step (\d+)\)"):
            ledger.number("mean's peak", m[2], raw.at("loss", int(m[3])), rel=1e-6)
        if m := ln.take(
            r"Rank (\d+) left the cohort at step (\d+) \((?:above|below) it: "
            + NUM
            + " against "
            + NUM
            + r", medians over steps (\d+)–(\d+)\) and moved the mean over ranks by "
            r"([+-]\S+);"
        ):
            ledger.number("root: rank median", m[3], ev["value"], truth["value"], rel=1e-5)
            ledger.number("root: cohort", m[4], ev["cohort_median"], truth["cohort"], rel=1e-5)
            ledger.number("root: shift", m[7], ev["mean_shift"], truth["shift"], rel=1e-5)
        if m := ln.take(
            r"mean loss over steps (\d+)–(\d+) ([<>]) " + NUM + r" \(halfway between the mean with "
            r"rank \d+, " + NUM + r", and without it, " + NUM + r"\)"
        ):
            ledger.same("bound steps", (int(m[1]), int(m[2])), (a, b))
            half = (ev["mean_with"] + ev["mean_without"]) / 2
            ledger.same("bound side", m[3] == "<", ev["mean_with"] > ev["mean_without"])
            if m[3] == "<":
                ledger.bound("halfway (rounded up)", m[4], half, digits=4)
            else:
                ledger.number("halfway", m[4], half)
            ledger.number("with", m[5], ev["mean_with"], truth["with"], rel=1e-5)
            ledger.number("without", m[6], ev["mean_without"], truth["without"], rel=1e-5)
        ln.take(r"reports no outlier on rank \d+")
        _leftover(ledger, "rank", ln)


def _recurring_pm(ledger: Ledger, raw: Raw, ev: dict, lines: dict, thr) -> None:
    """Recurring one-point spikes: each number is the evidence's, and each spike's size (its
    loss over the trailing mean, and its z) is recomputed from the log."""
    steps = ev["steps"]
    ratios, zs, back = [], [], []
    for s_ in steps:
        mean, std, _, _ = raw.trailing("loss", s_, thr.spike_window_steps)
        sigma = max(std, thr.sigma_floor_frac * abs(mean))
        ratios.append(raw.at("loss", s_) / mean)
        zs.append((raw.at("loss", s_) - mean) / sigma)
        # back at baseline: a logged loss in (onset, onset + longest recovery] at or below it
        after = raw.between("loss", s_ + 1, s_ + ev["longest_recovery_steps"])
        back.append(bool(after.size) and bool(after.min() <= mean + thr.recovery_sigma * sigma))
    for text in lines["symptoms"] + lines["root"] + lines["verification"]:
        ln = Line(text)
        if m := ln.take(r"loss spikes with no evident cause \(count\): (\d+)"):
            ledger.same("count", int(m[1]), ev["count"])
            ledger.same("count (listed)", ev["count"], len(steps))
        if m := ln.take(
            r"steps where they began(?: \(the first 20 of (\d+)\))?: ([\d, ]+?)"
            r"(?:, and (\d+) more)?$"
        ):
            ledger.same("steps", [int(x) for x in m[2].split(", ")], steps[:20])
            ledger.same("steps not shown", int(m[3] or 0), max(0, len(steps) - 20))
            if m[1]:
                ledger.same("steps of", int(m[1]), ev["count"])
        if m := ln.take(
            r"peak loss / the trailing mean before it \(smallest – largest\): "
            + NUM
            + "x – "
            + NUM
            + "x"
        ):
            ledger.number("smallest ratio", m[1], ev["ratio_min"], min(ratios))
            ledger.number("largest ratio", m[2], ev["ratio_max"], max(ratios))
        if m := ln.take(
            r"z against the trailing mean and sigma \(smallest – largest\): " + NUM + " – " + NUM
        ):
            ledger.number("smallest z", m[1], ev["z_min"], min(zs))
            ledger.number("largest z", m[2], ev["z_max"], max(zs))
        if m := ln.take(
            r"back at baseline \(at or below the trailing mean \+ (\S+) sigma\): (\d+)% of the "
            r"(\d+)"
        ):
            ledger.number("recovery sigma", m[1], thr.recovery_sigma)
            ledger.number("share back %", m[2], 100 * ev["recovered_share"], 100 * np.mean(back))
            ledger.same("share of", int(m[3]), ev["count"])
        if m := ln.take(r"longest recovery \([^)]*\): (\d+) steps?"):
            ledger.same("longest recovery", int(m[1]), ev["longest_recovery_steps"])
        while m := ln.take(r"step (\d+): id (\d+)"):
            ledger.number("batch id at a spike", m[2], raw.at_or_before("batch_id", int(m[1])))
        # root cause
        if m := ln.take(r"Each of the (\d+) spikes"):
            ledger.same("root: count", int(m[1]), ev["count"])
        if m := ln.take(r"back at baseline within (\d+) steps?"):
            ledger.same("root: longest recovery", int(m[1]), ev["longest_recovery_steps"])
        # verification
        if m := ln.take(
            r"at most (\d+) one-point loss spikes that reach the bar for an isolated point \(z >= "
            r"(\S+) and a peak >= (\S+)x the trailing mean\), as stab analyze reports them \(this "
            r"log has (\d+), at steps (\d+)–(\d+)\)"
        ):
            ledger.same("at most", (int(m[1]), int(m[4])), (ev["count"], ev["count"]))
            ledger.number("large z bar", m[2], thr.spike_large_z)
            ledger.number("large ratio bar", m[3], thr.spike_large_ratio)
            ledger.same("first / last", (int(m[5]), int(m[6])), (steps[0], steps[-1]))
        _leftover(ledger, "recurring-spikes", ln)


INCIDENTS = [
    (r"Loss spike at step (\d+)", "spike", _spike_pm),
    (r"Non-finite loss from step (\d+)", "nan", _nan_pm),
    (r"Silent divergence from step (\d+)", "divergence", _trend_pm),
    (r"Loss plateau from step (\d+)", "plateau", _trend_pm),
    (r"Loss scale collapsed below \S+ at step (\d+)", "loss-scale-collapsed", _scale_pm),
    (r"Overflows under a constant loss scale", "loss-scale-static", _scale_pm),
    (r"fp16 overflows from step (\d+)", "fp16-overflow", _scale_pm),
    (r"Too short to judge", None, _short_pm),
    (r"Rank (\d+) out of line with the cohort", "rank-outlier", _rank_pm),
    (
        r"(\d+) recurring one-point loss spikes, steps (\d+)–(\d+)",
        "recurring-spikes",
        _recurring_pm,
    ),
]


def _hypotheses(ledger: Ledger, raw: Raw, ev: dict | None, lines: list[str], thr) -> None:
    """The evidence of each hypothesis (section 2; section 3 repeats it)."""
    for text in lines:
        m = re.match(r"\d+\. \*\*(.*?)\*\* — ([\w ]+); panel `[^`]*`: (.*)$", text)
        if not m:
            if re.search(r"\d", text) and "needs a human" not in text:
                ledger.unlabelled.append(f"{ledger.fixture} [hypotheses]: {text!r}")
            continue
        title, status, ln = m[1], m[2], Line(m[3])
        if t := re.search(r"changed more than (\S+)x", title):
            ledger.number("weight-norm bar", t[1], thr.weight_norm_ratio)
        if t := re.search(r"\((\d{3,})\)|a value above (\d+)", title):
            ledger.same("fp16 max", int(t[1] or t[2]), 65504)
        if m := ln.take(
            r"no restart within the (\d+) steps before step (\d+) \(no restart in the log\)"
        ):
            ledger.same("restart horizon", int(m[1]), thr.restart_spike_steps)
            ledger.same("no restart (raw)", len(raw.source.restarts), 0)
        if m := ln.take(
            r"the LR's largest rise between logged points in \[(\d+), (\d+)\] is ([+-][\d.]+)% \("
            + NUM
            + r" at step (\d+) -> "
            + NUM
            + r" at step (\d+); a jump needs > \+([\d.]+)%\)"
        ):
            s_, v = raw.series("lr")
            b = int(np.searchsorted(s_, int(m[2]), side="right"))
            a = max(0, int(np.searchsorted(s_, int(m[1]))) - 1)
            moves = v[a + 1 : b] / v[a : b - 1] - 1
            k = int(np.argmax(moves))
            ledger.number("LR largest rise %", m[3], 100 * float(moves[k]))
            ledger.same(
                "LR rise steps", (int(m[5]), int(m[7])), (int(s_[a + k]), int(s_[a + k + 1]))
            )
            ledger.number("LR before the rise", m[4], float(v[a + k]))
            ledger.number("LR after the rise", m[6], float(v[a + k + 1]))
            ledger.number("LR jump bar %", m[8], 100 * thr.lr_jump_ratio)
        if m := ln.take(
            r"(?:pre-clip )?grad norm "
            + NUM
            + r" at step (\d+) = "
            + NUM
            + r"x its trailing mean "
            + NUM
            + r" over steps (\d+)-(\d+) \((?:a long-tail batch needs )?>= (\S+)x\)"
            r"(?:, leading the loss by (\d+) step\(s\))?"
        ):
            s_ = int(m[2])
            mean, _, a, b = raw.trailing("grad_norm", s_, thr.spike_window_steps)
            ledger.number("grad norm", m[1], raw.at("grad_norm", s_))
            ledger.number("grad ratio", m[3], raw.at("grad_norm", s_) / mean)
            ledger.number("grad trailing mean", m[4], mean)
            ledger.same("grad trailing steps", (int(m[5]), int(m[6])), (a, b))
            causes = [c for c in (ev or {}).get("causes") or [] if c["cause"] == "long-tail-token"]
            bar = causes[0].get("bar") if causes else thr.grad_norm_spike_ratio
            if bar is None:
                ledger.failures.append(f"{ledger.fixture}: the long-tail cause names no bar")
            else:
                ledger.number("long-tail bar", m[7], bar)
            # the verdict's cause is never ruled out by the post-mortem
            ledger.same("long-tail status", status == "supported", bool(causes))
            if m[8]:
                ledger.same("lead", int(m[8]), ev["onset_step"] - s_)
        if m := ln.take(r"batch id (\d+) at step (\d+) repeats step (\d+)"):
            ledger.same("batch id", float(m[1]), raw.at("batch_id", int(m[2])))
            ledger.same("repeated id", float(m[1]), raw.at("batch_id", int(m[3])))
        if m := ln.take(
            r"batch id (\d+) at step (\d+) differs from every id in the (\d+) steps before"
        ):
            ledger.same("batch id", float(m[1]), raw.at("batch_id", int(m[2])))
            ledger.same("batch window", int(m[3]), thr.duplicate_batch_window_steps)
            s_, v = raw.series("batch_id")
            before = v[(s_ >= int(m[2]) - int(m[3])) & (s_ < int(m[2]))]
            ledger.same("id unseen before", float(m[1]) in before.tolist(), False)
        if m := ln.take(r"the run resumed at step (\d+), (\d+) step\(s\) before the spike"):
            ledger.same("resume", int(m[1]), raw.source.restarts[0].resumed_from_step)
            ledger.same("resume lead", int(m[2]), ev["onset_step"] - int(m[1]))
        if m := ln.take(r"LR jumped " + NUM + " -> " + NUM + r" \(\+(\d+)%\) at step (\d+)"):
            s_, v = raw.series("lr")
            i = int(np.flatnonzero(s_ == int(m[4]))[0])
            ledger.number("LR before the jump", m[1], float(v[i - 1]))
            ledger.number("LR after the jump", m[2], float(v[i]))
            ledger.number("LR jump %", m[3], 100 * (v[i] / v[i - 1] - 1))
        if m := ln.take(r"every one of the (\d+) loss points after step (\d+) is non-finite"):
            s_, v = raw.series("loss")
            after = v[s_ > int(m[2])]
            ledger.same("points after", int(m[1]), after.size)
            ledger.same("all non-finite", bool(np.all(~np.isfinite(after))), True)
        if m := ln.take(r"grad norm non-finite at step (\d+) \(the same step as the loss\)"):
            ledger.same(
                "grad non-finite (raw)", math.isfinite(raw.at("grad_norm", int(m[1]))), False
            )
            ledger.same("the loss's step", int(m[1]), ev["first_step"])
        if m := ln.take(
            r"max (?:pre-clip )?grad norm "
            + NUM
            + r" at step (\d+) = "
            + NUM
            + r"x its trailing mean "
            + NUM
            + r" over steps (\d+)-(\d+) \(an explosion needs >= (\S+)x\)"
        ):
            s_ = int(m[2])
            mean, _, a, b = raw.trailing("grad_norm", s_, thr.spike_window_steps)
            ledger.number("max grad", m[1], raw.at("grad_norm", s_))
            ledger.number("max grad ratio", m[3], raw.at("grad_norm", s_) / mean)
            ledger.number("max grad trailing mean", m[4], mean)
            ledger.same("max grad trailing steps", (int(m[5]), int(m[6])), (a, b))
            ledger.number("explosion bar", m[7], thr.grad_norm_spike_ratio)
        if m := ln.take(r"the loss is finite again at step (\d+)"):
            s_, v = raw.series("loss")
            ok = (s_ > ev["first_step"]) & np.isfinite(v)
            ledger.same("finite again", int(m[1]), int(s_[ok][0]))
        if m := ln.take(r"(act_norm/[\w.]+) non-finite at step (\d+)"):
            ledger.same("layer non-finite (raw)", math.isfinite(raw.at(m[1], int(m[2]))), False)
            ledger.same("layer step", int(m[2]), ev["first_step"])
        ln.take(r"forward order: [^)]*\)|while [\w.]+ was finite|first non-finite layer, [\w.]+,")
        if m := ln.take(r"(\d+) overflow\(s\) from step (\d+)"):
            overflows = raw.overflow_steps()
            ledger.same("overflows", int(m[1]), len(overflows))
            ledger.same("first overflow", int(m[2]), overflows[0])
        if m := ln.take(
            r"grad norm rose from "
            + NUM
            + r" \(the mean over steps (\d+)-(\d+)\) to "
            + NUM
            + r" \(the mean over steps (\d+)-(\d+)\)"
        ):
            ledger.number("grad mean early", m[1], raw.mean("grad_norm", int(m[2]), int(m[3])))
            ledger.number("grad mean late", m[4], raw.mean("grad_norm", int(m[5]), int(m[6])))
        if m := ln.take(r"LR " + NUM + r" at step (\d+) -> " + NUM + r" at step (\d+)"):
            ledger.number("LR at the rise", m[1], raw.at("lr", int(m[2])))
            ledger.number("LR later", m[3], raw.at("lr", int(m[4])))
        if m := ln.take(
            r"([\w/]+) (?:grows|collapses): between "
            + NUM
            + r" \(step (\d+)\) and "
            + NUM
            + r" \(step (\d+)\) over steps (\d+)-(\d+)"
        ):
            window = raw.between(m[1], int(m[6]), int(m[7]))
            ledger.number("norm min", m[2], float(window.min()))
            ledger.number("norm at its min step", m[2], raw.at(m[1], int(m[3])))
            ledger.number("norm max", m[4], float(window.max()))
            ledger.number("norm at its max step", m[4], raw.at(m[1], int(m[5])))
        if m := ln.take(
            r"a slow rise of \+" + NUM + r"%, from " + NUM + r" \(the median of steps (\d+)–(\d+)\)"
        ):
            ledger.number("slow rise %", m[1], ev["relative_rise"] * 100)
            ledger.number(
                "slow rise from",
                m[2],
                ev["rise_from_level"],
                raw.median("loss", int(m[3]), int(m[4])),
            )
        ln.take(r"\(spec Q\d\.\d\)")
        _leftover(ledger, "hypotheses", ln)


def _cost(ledger: Ledger, raw: Raw, code: str | None, ev: dict | None, lines: list[str]) -> None:
    """Steps (and tokens) from the event's first step to its end: recovery or the log's end."""
    last = int(raw.steps[-1])
    if code == "spike":
        start = ev["onset_step"]
        end = ev["recovery_step"] if ev["recovered"] else last
    elif code == "nan":
        start = ev["first_step"]
        s_, v = raw.series("loss")
        ok = (s_ > start) & np.isfinite(v)
        end = int(s_[ok][0]) if ok.any() else last
    elif code in ("divergence", "plateau"):
        start, end = ev["start_step"], last
    elif code == "loss-scale-collapsed":
        start, end = raw.overflow_steps()[0], last
    elif code == "rank-outlier":
        start, end = ev["effect_steps"]
        end = last if ev["recovered_step"] is None else ev["recovered_step"]
    else:
        start = end = None
    for text in lines:
        ln = Line(text)
        if code == "recurring-spikes" and (
            m := ln.take(r"each of the (\d+) spikes was back at baseline within (\d+) steps?")
        ):
            ledger.same("cost: count", int(m[1]), ev["count"])
            ledger.same("cost: longest recovery", int(m[2]), ev["longest_recovery_steps"])
        if m := ln.take(r"([\d,]+) steps? (?:lost|until recovery)"):
            ledger.same("cost steps", int(m[1].replace(",", "")), end - start)
        ln.take(r"\(to the end of the log; plus the steps to re-run from the last checkpoint\)")
        if m := ln.take(r"; ([\d,]+) tokens"):
            tokens = raw.at_or_before("tokens", end) - raw.at_or_before("tokens", start)
            ledger.number("cost tokens", m[1], tokens)
        _leftover(ledger, "cost", ln)


def _notes(ledger: Ledger, raw: Raw, markdown: str, thr) -> None:
    """The notes: why a check could not run, with the counts it saw."""
    notes = markdown.partition("## Notes from the analysis")[2]
    for text in (ln for ln in notes.splitlines() if ln.startswith("- ")):
        ln = Line(text)
        ln.take(r"\(Q\d\.\d\)")
        if m := ln.take(r"(\d+) non-finite grad-norm step\(s\)"):
            _, v = raw.series("grad_norm")
            ledger.same("non-finite grad norms", int(m[1]), int((~np.isfinite(v)).sum()))
        if m := ln.take(r"insufficient data: (\d+) finite (\w+) points(?: over (\d+) steps)?"):
            s_, v = raw.series(m[2])
            ledger.same("finite points", int(m[1]), int(np.isfinite(v).sum()))
            if m[3]:
                ledger.same("their span", int(m[3]), int(s_[-1] - s_[0]))
        if m := ln.take(
            r"a spike needs a (\d+)-step baseline of >= (\d+) points before it "
            r"\(or (\d+) points in a sparse log\)"
        ):
            ledger.same("window", int(m[1]), thr.spike_window_steps)
            ledger.same("min points", int(m[2]), thr.min_points_per_window)
            ledger.same("widened", int(m[3]), thr.widened_window_points)
        if m := ln.take(
            r"decrease not judged: the log starts at step ([\d,]+), past (\d+)% of its last "
            r"step ([\d,]+),"
        ):
            s_, _ = raw.series("loss")
            ledger.same("first step", int(m[1].replace(",", "")), int(s_[0]))
            ledger.same("start bar", int(m[2]), round(100 * thr.learning_start_max_frac))
            ledger.same("last step", int(m[3].replace(",", "")), int(s_[-1]))
        _leftover(ledger, "notes", ln)


def _postmortem(ledger: Ledger, raw: Raw, run: dict) -> None:
    _notes(ledger, raw, run["outputs"]["postmortem"], run["thresholds"])
    head = re.search(r"from `[^`]*` \(steps (\d+)–(\d+);", run["outputs"]["postmortem"])
    ledger.same(
        "the log's steps", (int(head[1]), int(head[2])), (int(raw.steps[0]), int(raw.steps[-1]))
    )
    analysis, thr = run["analysis"], run["thresholds"]
    for title, lines in _sections(run["outputs"]["postmortem"]):
        for pattern, code, check in INCIDENTS:
            m = re.match(pattern, title)
            if not m:
                continue
            ev = None
            if code == "rank-outlier":
                f = next(f for f in analysis.findings if f.code == code and f.rank == int(m[1]))
                ev = {**f.evidence, "rank": f.rank}
            elif code is not None:
                step = int(m[1]) if m.groups() else None
                ev = _finding(analysis, code, step if code in ("spike",) else None).evidence
            if code == "recurring-spikes":
                ledger.same(
                    "title: count, first and last step",
                    (int(m[1]), int(m[2]), int(m[3])),
                    (ev["count"], ev["steps"][0], ev["steps"][-1]),
                )
            check(ledger, raw, ev, lines, thr)
            _hypotheses(ledger, raw, ev, lines["hypotheses"], thr)
            _cost(ledger, raw, code, ev, lines["cost"])
            break


# ---------------------------------------------------------------- the test

# numbers traced per verdict kind over the fixtures (a floor a little under what is traced
# today: the test fails if a family stops matching)
MIN_CHECKS = {
    "divergence": 245,  # 6 fixtures (261 traced)
    "plateau": 24,  # 1 (26)
    "spike-persistent": 225,  # 4 (239)
    "spike-recoverable": 225,  # 4 (239)
    "nan": 215,  # 7 (227)
    "fp16-overflow": 16,  # 1 (17)
    "loss-scale-collapsed": 27,  # 1 (29)
    "loss-scale-static": 34,  # 2 (36)
    "insufficient-data": 9,  # 1 (9)
    "healthy": 28,  # 14: the log's steps, and the warning count or that there is none
    "rank-outlier": 130,  # 4 (142)
    "spike-recoverable (recurring)": 26,  # 1 (28)
}


# the verdicts no run of fixtures/runs or fixtures/torch-runs reaches: a rank outlier (two,
# three and 32 ranks) and the recurring form of spike-recoverable
EXTRA = [
    FIXTURES / "ranks" / "pair_2.jsonl",
    FIXTURES / "ranks" / "trio_3.jsonl",
    FIXTURES / "ranks" / "two_outliers.jsonl.gz",
    FIXTURES / "rules" / "rank-outlier" / "fires" / "run.jsonl.gz",
    FIXTURES / "rules" / "recurring-spikes" / "fires" / "run.jsonl.gz",
]


def _name(log) -> str:
    return str(log.relative_to(FIXTURES))


@pytest.fixture(scope="module")
def extra_runs() -> dict[str, dict]:
    return _extra_runs()


@functools.cache
def _extra_runs() -> dict[str, dict]:
    """Made once a process (test_quantities takes `extra_runs` too; the tests only read it):
    the headline and post-mortem of the EXTRA logs, made as test_thresholds_in_text does."""
    from stabilitycli.commands._common import with_settings
    from stabilitycli.core.settings import load_settings
    from stabilitycli.pipeline import run as pipeline
    from stabilitycli.postmortem.data import build
    from stabilitycli.report.postmortem import render

    runs = {}
    for log in EXTRA:
        thresholds, settings = load_settings(log, {})
        data = pipeline.load_run(log)
        analysis = with_settings(pipeline.analyze(data, thresholds), settings.to_dict())
        markdown = render(build(analysis, data, thresholds), date="2026-01-01")
        runs[_name(log)] = {
            "outputs": {"postmortem": markdown},
            "analysis": analysis,
            "thresholds": thresholds,
        }
    return runs


def _ledgers(runs: dict[str, dict]) -> list[Ledger]:
    out = []
    logs = {_name(p): p for p in [*_fixture_logs(), *EXTRA]}
    logs.update({f"{p.parent.parent.name}/{p.parent.name}": p for p in _fixture_logs()})
    for name, run in runs.items():
        raw = Raw(logs[name])
        verdict = run["analysis"].verdict
        recurring = " (recurring)" if RECURRING.search(verdict.summary) else ""
        ledger = Ledger(name, verdict.code + recurring)
        _headline(ledger, raw, run)
        _postmortem(ledger, raw, run)
        out.append(ledger)
    return out


@pytest.fixture(scope="module")
def ledgers(default_runs, extra_runs) -> list[Ledger]:  # noqa: F811
    return _ledgers({**default_runs, **extra_runs})


@pytest.fixture(scope="module")
def overridden_ledgers(overridden_runs) -> list[Ledger]:  # noqa: F811
    return _ledgers(overridden_runs)


def test_every_number_is_its_evidence_and_the_raw_log(ledgers) -> None:
    failures = [f for ledger in ledgers for f in ledger.failures]
    assert not failures, f"{len(failures)} number(s) not what they say:\n" + "\n".join(failures)


def test_no_number_without_a_label(ledgers) -> None:
    bare = [u for ledger in ledgers for u in ledger.unlabelled]
    assert not bare, f"{len(bare)} phrase(s) state a number without what it is:\n" + "\n".join(bare)


def test_every_verdict_kind_is_traced(ledgers) -> None:
    counts = Counter()
    for ledger in ledgers:
        counts.update(ledger.counts)
    produced = {ledger.kind for ledger in ledgers}
    assert produced <= set(MIN_CHECKS), produced - set(MIN_CHECKS)
    short = {k: counts[k] for k in produced if counts[k] < MIN_CHECKS[k]}
    assert not short, f"too few numbers traced: {short} (floors {MIN_CHECKS})"


def test_numbers_with_thresholds_overridden(overridden_ledgers) -> None:
    """The same, with every threshold of test_thresholds_in_text.OVERRIDES in force."""
    failures = [f for ledger in overridden_ledgers for f in ledger.failures]
    failures += [u for ledger in overridden_ledgers for u in ledger.unlabelled]
    assert not failures, f"{len(failures)} number(s) not what they say:\n" + "\n".join(failures)
    assert sum(sum(ledger.counts.values()) for ledger in overridden_ledgers) >= 1000


SPIKE_CAUSE = [
    re.compile(
        r"(?:pre-clip )?grad norm (?P<g>\S+) at step (?P<s>\d+) = (?P<r>\S+)x its trailing mean "
        r"(?P<b>\S+), (?P<lead>\d+) step\(s\) before the spike"
    ),
    re.compile(
        r"LR (?P<before>\S+) -> (?P<after>\S+) at step (?P<s>\d+) \((?P<pct>[+-]\d+)%\), "
        r"(?P<lead>\d+) step\(s\) before the spike"
    ),
    re.compile(r"batch id (?P<id>\d+) at the spike was served at step (?P<s>\d+) too"),
    re.compile(r"resumed from a checkpoint at step (?P<s>\d+), (?P<lead>\d+) step\(s\) before"),
]


def test_spike_cause_in_the_path_says_what_each_number_is(default_runs) -> None:  # noqa: F811
    """Q2.3 / Q2.4 name the spike's cause with its numbers, each labelled and each the raw
    log's: no `grad_norm_baseline 0.4718, lead_steps 1` key-value lists."""
    logs = {f"{p.parent.parent.name}/{p.parent.name}": p for p in _fixture_logs()}
    failures, checked = [], 0
    for name, run in default_runs.items():
        analysis = run["analysis"]
        for step in analysis.verdict.path:
            if step.question not in ("Q2.3", "Q2.4") or "(" not in step.evidence:
                continue
            if re.search(r"\b[a-z]+_[a-z_]+ [\d-]", step.evidence):
                failures.append(f"{name} {step.question}: key-value list: {step.evidence}")
            m = next(
                (p.search(step.evidence) for p in SPIKE_CAUSE if p.search(step.evidence)), None
            )
            if m is None:
                failures.append(f"{name} {step.question}: no labelled cause: {step.evidence}")
                continue
            raw, spike = Raw(logs[name]), _lead_spike(analysis)
            s = int(m["s"])
            ok = True
            if "g" in m.groupdict():
                mean, _, _, _ = raw.trailing("grad_norm", s, run["thresholds"].spike_window_steps)
                g = raw.at("grad_norm", s)
                ok = printed_as(m["g"], g) and printed_as(m["b"], mean)
                ok &= printed_as(m["r"], g / mean)
            elif "before" in m.groupdict():
                steps, lr = raw.series("lr")
                i = int(np.flatnonzero(steps == s)[0])
                ok = printed_as(m["before"], lr[i - 1]) and printed_as(m["after"], lr[i])
                ok &= printed_as(m["pct"], 100 * (lr[i] / lr[i - 1] - 1))
            elif "id" in m.groupdict():
                ok = float(m["id"]) == raw.at("batch_id", s) == raw.at("batch_id", spike)
            else:
                ok = s == raw.source.restarts[0].resumed_from_step
            if "lead" in m.groupdict() and m["lead"] is not None:
                ok &= int(m["lead"]) == spike - s
            checked += 1
            if not ok:
                failures.append(f"{name} {step.question}: not the raw log's: {step.evidence}")
    assert not failures, "\n".join(failures)
    assert checked >= 9, checked


def _lead_spike(analysis) -> int:
    """The onset of the spike the path speaks of: the first persistent one, else the first."""
    spikes = sorted(
        (f.evidence for f in analysis.findings if f.code == "spike"), key=lambda e: e["onset_step"]
    )
    lead = next((e for e in spikes if not e["recovered"]), None) or spikes[0]
    return int(lead["onset_step"])
