"""The parts every post-mortem section is made of: its cost, its numbers and its words.

Both `data.py` (spike, NaN and divergence sections) and `verdicts.py` (the other
verdicts' sections) build `Incident`s from these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from stabilitycli.core.records import dataclass
from stabilitycli.detect.series import SeriesView
from stabilitycli.detect.windows import value_at_or_before
from stabilitycli.postmortem.hypotheses import Hypothesis


@dataclass
class Cost:
    steps: int | None
    until_end_of_log: bool  # True: the damage lasted to the last logged step
    tokens: float | None = None
    samples: float | None = None
    note: str | None = None  # a cost told in words (recurring spikes: no span to count)


@dataclass
class Incident:
    """One section of the post-mortem: a spike, a NaN, or a divergence."""

    # "spike" | "recurring-spikes" | "nan" | "divergence" | "rank" | "loss-scale-collapsed"
    # | "loss-scale-static" | "fp16-overflow" | "plateau" | "insufficient-data"
    kind: str
    title: str
    symptoms: list[tuple[str, Any]]  # (label, value); a None value is "needs a human"
    hypotheses: list[Hypothesis]
    root_cause: str | None
    remediation: list[str]
    verification: list[str]  # human-readable bounds
    expects: list[str]  # the same bounds as `stab compare --expect` expressions
    cost: Cost
    rerun: bool = True  # the verification is a re-run from a checkpoint (not: a longer log)
    # the verdict this event would be on its own, its cause and first step: its remedies are
    # the remedy table's row for them (the verdict's own list when it is the verdict's event)
    verdict: str | None = None
    cause: str | None = None
    start: int | None = None


def series_at(view: SeriesView, metric: str, step: int) -> float | None:
    """The value logged at `step`, or at the last logged step before it; None if never logged."""
    if not view.has(metric):
        return None
    steps, values = view.points(metric)
    value = float(value_at_or_before(steps, values, np.array([step]))[0])
    return None if math.isnan(value) and not np.any(steps <= step) else value


def round_up(value: float, digits: int = 3) -> float:
    """A bound a little above `value`, written with `digits` significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    exponent = math.floor(math.log10(abs(value))) - digits + 1
    scale = 10.0**exponent
    return round(math.ceil(value / scale) * scale, max(0, -exponent))


def fmt(value: float) -> str:
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")
    return f"{value:.4g}"


def cost_between(view: SeriesView, start: int, end: int | None) -> Cost:
    last = int(view.steps[-1])
    stop = last if end is None else end
    cost = Cost(steps=stop - start, until_end_of_log=end is None)
    for metric in ("tokens", "samples"):
        a, b = series_at(view, metric, start), series_at(view, metric, stop)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
            setattr(cost, metric, b - a)
    return cost


def dtype_symptom(view: SeriesView) -> str | None:
    src = view.source
    return f"{src.dtype} ({src.dtype_origin})" if src.dtype else None


def _steps(pair: Any) -> str:
    return f"{int(pair[0])}–{int(pair[1])}"


def rise_from_words(ev: Mapping[str, Any]) -> str:
    """The level a divergence or plateau rose from, with what it is (its evidence names it)."""
    level = fmt(float(ev["rise_from_level"]))
    if not ev.get("rise_from_steps"):
        return level
    return f"{level} ({_stat(ev)} steps {_steps(ev['rise_from_steps'])})"


def _stat(ev: Mapping[str, Any]) -> str:
    median = ev.get("rise_from_stat") == "median"
    return "the median of" if median else "the mean of the medians over"


def below_words(ev: Mapping[str, Any]) -> str:
    """What a re-run's bound sits below: the level the rising window opened at."""
    if not ev.get("start_level_steps"):
        return "below the level where the trend window opened"
    return (
        f"below {fmt(float(ev['start_level']))}, the mean of the medians over steps "
        f"{_steps(ev['start_level_steps'])}, where the trend window opened"
    )


def trend_symptoms(ev: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A divergence's or plateau's levels, each named by the steps it is a statistic of."""
    rise = ev.get("relative_rise")
    out: list[tuple[str, Any]] = []
    if ev.get("rise_to_steps"):
        stat = _stat(ev)
        out.append(
            (
                "rise",
                (f"+{float(rise):.1%}, " if rise is not None else "")
                + f"from {fmt(float(ev['rise_from_level']))} ({stat} steps "
                f"{_steps(ev['rise_from_steps'])}) to {fmt(float(ev['rise_to_level']))} (the mean "
                f"of the medians over steps {_steps(ev['rise_to_steps'])})",
            )
        )
    if ev.get("start_level_steps") and ev.get("end_level_steps"):
        out.append(
            (
                f"loss: the mean of the medians over steps {_steps(ev['start_level_steps'])} -> "
                f"over steps {_steps(ev['end_level_steps'])} (the start and end of the trend "
                "window)",
                f"{fmt(float(ev['start_level']))} -> {fmt(float(ev['end_level']))}",
            )
        )
    out.append(
        (
            f"Mann-Kendall z over steps {int(ev['window_start_step'])}–{int(ev['end_step'])}",
            ev.get("z"),
        )
    )
    return out
