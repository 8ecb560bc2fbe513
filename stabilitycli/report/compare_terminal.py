"""The rich terminal rendering of a `Comparison`: verdict, both loss curves, per-metric table,
checks."""

from __future__ import annotations

import math

from rich import box
from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stabilitycli.compare.runs import RESTART_MODE, Comparison, MetricComparison
from stabilitycli.report.escape import CommandGuard, terminal
from stabilitycli.report.layout import Boxed, Fitted, Hanging, Widest, bullets, merge_buckets

_BARS = "▁▂▃▄▅▆▇█"


def build(result: Comparison) -> CommandGuard:
    """Paths, run names, metric names and check texts may come from the input: they go in
    as `Text` (never parsed as rich markup) with their control characters shown."""
    return CommandGuard(_build(result))


def _build(result: Comparison) -> Group:
    parts: list[RenderableType] = [
        Boxed(
            Panel(_headline(result), title=Text(f"stab compare · {terminal(_title(result))}")),
            Group(Text(f"stab compare · {terminal(_title(result))}"), _headline(result)),
        ),
        Text(_settings(result), style="dim"),
    ]
    if result.preview:
        parts.append(_curves(result))
    if result.metrics:
        parts.append(_metric_table(result))
    if result.checks:
        parts.append(_check_table(result))
    if result.problems:
        parts.append(bullets("Problems:", (terminal(p) for p in result.problems), "bold red"))
    notes = list(result.notes)
    if result.not_compared:
        notes.append(f"not compared (name them with --metric): {', '.join(result.not_compared)}")
    if notes:
        parts.append(bullets("Notes:", (terminal(n) for n in notes), "dim", mark="-"))
    return Group(*parts)


def _title(result: Comparison) -> str:
    name = result.candidate.get("run") or result.candidate["path"]
    if result.mode == RESTART_MODE:
        assert result.restart is not None  # restart mode always carries the restart
        return f"{name}, restart {result.restart['index']}"
    return name


def _headline(result: Comparison) -> Text:
    verdict = Text(
        "PASS" if result.passed else "FAIL", style="bold green" if result.passed else "bold red"
    )
    return verdict + Text("  " + " ".join(terminal(s) for s in headline_sentences(result)))


def headline_sentences(result: Comparison) -> list[str]:
    """What was compared, then what failed (the band, which check, or both), as sentences."""
    failed_metrics = [m for m in result.metrics if not m.passed]
    failed_checks = [c for c in result.checks if not c.holds]
    out: list[str] = []
    if result.mode == "checks":
        held = len(result.checks) - len(failed_checks)
        out.append(f"{held} of {len(result.checks)} check(s) hold on {result.candidate['path']}.")
    elif result.mode == RESTART_MODE:
        r = result.restart
        assert r is not None  # restart mode always carries the restart
        what = _what_failed(failed_metrics, failed_checks, result)
        out.append(
            f"{what}: resumed from step {r['resumed_from_step']} after the log had reached step "
            f"{r['last_step_before']}: "
            + "; ".join(_restart_sentence(m, r) for m in failed_metrics or result.metrics[:1])
            + "."
        )
    else:
        assert result.baseline is not None  # only `--expect` checks on one run have none
        what = _what_failed(failed_metrics, failed_checks, result)
        out.append(
            f"{what}: candidate {result.candidate['path']} against baseline "
            f"{result.baseline['path']}."
        )
        if failed_metrics:
            out += [_metric_sentence(m, result.x) for m in failed_metrics]
        else:
            out.append(_passed_sentence(result))
        out += [b for m in result.metrics if (b := _better_sentence(m, result.x))]
    out += [_check_sentence(c) for c in failed_checks]
    if result.checks and not failed_checks and result.mode != "checks":
        out.append(f"All {len(result.checks)} check(s) hold.")
    out += [p[0].upper() + p[1:] + "." for p in result.problems]
    return out


def _what_failed(failed_metrics, failed_checks, result: Comparison) -> str:
    parts = []
    if failed_metrics:
        parts.append(f"the band ({', '.join(m.metric for m in failed_metrics)})")
    if failed_checks:
        parts.append(f"{len(failed_checks)} of {len(result.checks)} check(s)")
    if result.problems:
        parts.append("the compared range")
    if parts:
        return "Failed: " + " and ".join(parts)
    if result.band == "one-sided":
        return "No worse than the baseline"
    return "Within the band"


def _restart_sentence(m: MetricComparison, restart: dict) -> str:
    s = m.stats
    if m.passed:
        return f"the replay of {m.points} point(s) tracks the abandoned {m.metric} within the band"
    if s["within_from"] is None:
        return (
            f"the resumed {m.metric} left the abandoned one at step {s['first_outside']} "
            "and did not come back"
        )
    steps = s["within_from"] - restart["resumed_from_step"]
    return (
        f"the resumed {m.metric} left the abandoned one at step {s['first_outside']} and came back "
        f"within the band of the abandoned {m.metric} after {steps} steps (step "
        f"{s['within_from']}; back to the abandoned run's level, not to the pre-spike baseline "
        "that `analyze` times a spike's recovery against)"
    )


def _outside_words(m: MetricComparison) -> str:
    """'outside the band', or one-sided 'worse than the baseline (higher) beyond the band'."""
    if m.stats.get("sides") == "one-sided":
        worse = "higher" if m.stats.get("better_when") == "lower" else "lower"
        return f"worse than the baseline ({worse}) beyond the band"
    return "outside the band"


def _passed_sentence(result: Comparison) -> str:
    judged = [m for m in result.metrics if m.stats.get("sides") != "not judged"]
    if not judged:
        return "No compared metric has a better side, so none was judged."
    names = _and([m.metric for m in judged])
    points = _and(sorted({str(m.points) for m in judged}))
    if result.band == "one-sided":
        return (
            f"The candidate's {names} {'is' if len(judged) == 1 else 'are'} nowhere worse than "
            f"the baseline's beyond the band over {points} points."
        )
    verb = "stays" if len(judged) == 1 else "stay"
    return f"The {names} {verb} within the band over {points} points."


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _metric_sentence(m: MetricComparison, x: str) -> str:
    s = m.stats
    if s["diverged_at"] is not None:
        earlier = (
            f" (first at {x} {s['first_outside']}; {s['points_outside']} of {m.points} points)"
            if s["first_outside"] != s["diverged_at"]
            else ""
        )
        return (
            f"The candidate's {m.metric} is {_outside_words(m)} from {x} {s['diverged_at']} "
            f"to the end{earlier}."
        )
    return (
        f"The candidate's {m.metric} is {_outside_words(m)} at {s['points_outside']} of "
        f"{m.points} points, first at {x} {s['first_outside']}, back inside from "
        f"{x} {s['within_from']}."
    )


def _better_sentence(m: MetricComparison, x: str) -> str:
    s = m.stats
    if s.get("sides") == "one-sided" and s.get("points_better"):
        return (
            f"The candidate's {m.metric} is {s['better_when']} than the baseline's beyond the band "
            f"at {s['points_better']} point(s), first at {x} {s['first_better']}; being better "
            "does not fail a one-sided comparison."
        )
    if s.get("sides") == "not judged" and s["points_outside"]:
        return (
            f"The {m.metric} differs from the baseline's beyond the band at "
            f"{s['points_outside']} point(s), first at {x} {s['first_outside']}; it has no better "
            "side, so a one-sided comparison reports it without failing (--band two-sided "
            "judges it)."
        )
    return ""


def _check_sentence(c) -> str:
    if c.value is None:
        return f"Check {c.check.text!r} fails: {c.reason or 'no value'}."
    return f"Check {c.check.text!r} fails: {check_value_words(c)}."


def check_value_words(c) -> str:
    """What the checked value is: a point at a step, or an aggregate over a step range."""
    chk = c.check
    side = "baseline's" if chk.side == "baseline" else "candidate's"
    value = _g(c.value)
    if chk.aggregate is None:
        return f"the {side} {chk.metric} at step {chk.at} is {value}"
    lo = "the start" if chk.start is None else f"step {chk.start}"
    hi = "the end" if chk.end is None else f"step {chk.end}"
    what = {"max": "the peak", "min": "the lowest", "mean": "the mean", "last": "the last"}[
        chk.aggregate
    ]
    return f"{what} of the {side} {chk.metric} from {lo} to {hi} is {value}"


def _settings(result: Comparison) -> str:
    if result.mode == "checks":
        return "Checks read the raw logged values at optimizer steps."
    lo = "the start" if result.since is None else f"{result.x} {result.since:g}"
    hi = "the end" if result.until is None else f"{result.x} {result.until:g}"
    smoothing = f"smoothed with {result.smoothing}" if result.smoothing else "without smoothing"
    judged = (
        "A point is outside the band when its own deviation is beyond the band (--strict)."
        if result.judge_points == 1
        else f"A point is outside the band when the median deviation of the {result.judge_points} "
        "points centred on it is beyond the band, so one noisy point never fails."
    )
    if result.band == "one-sided":
        sides = (
            "One-sided: only a candidate worse than the baseline fails (higher loss or grad "
            "norm); a metric with no better side, such as the LR, is reported, not judged; "
            "--band two-sided fails either side."
        )
    else:
        sides = "Two-sided: a point outside the band on either side fails."
    return f"Compared on {result.x}s from {lo} to {hi}, {smoothing}. {judged} {sides}"


def _curves(result: Comparison) -> Fitted:
    """Both curves on one scale, a ▲ under each bucket outside the band; on a narrow console
    neighbouring buckets merge (by their maximum, so a spike still shows)."""
    pv = result.preview
    assert pv is not None  # drawn only when there is a preview
    values = [v for v in pv["baseline"] + pv["candidate"] if v is not None and math.isfinite(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    names = ("abandoned", "resumed") if result.mode == RESTART_MODE else ("baseline", "candidate")
    width = max(len(n) for n in names)
    metric = terminal(pv["metric"])
    indent = len(metric) + width + 2

    def make(width_cells: int | None) -> Group:
        room = len(pv["outside"]) if width_cells is None else max(1, width_cells - indent)
        text = Text()
        for name, key, style in (
            (names[0], "baseline", "cyan"),
            (names[1], "candidate", "magenta"),
        ):
            text.append(f"{metric} {name:<{width}} ", style="bold")
            text.append(_spark(merge_buckets(pv[key], room)[0], low, high), style=style)
            text.append("\n")
        outside = merge_buckets([float(o) for o in pv["outside"]], room)[0]
        marks = "".join("▲" if o > 0 else " " for o in outside)
        span = f"{result.x} {pv['x'][0]}–{pv['x'][-1]}"
        if "▲" in marks:
            text.append(" " * indent)
            text.append(marks, style="bold red")
            label = Text(f"outside the band ({span}, same scale {low:.3g}–{high:.3g})")
        else:
            text.rstrip()
            label = Text(f"same scale {low:.3g}–{high:.3g}, {span}", style="dim")
        # the label wraps under itself, not back to column 0
        return Group(text, Padding(label, (0, 0, 0, indent)))

    return Fitted(make)


def _spark(values: list[float], low: float, high: float) -> str:
    """One character per bucket on a scale shared by both curves; non-finite buckets as '×'."""
    span = high - low or 1.0
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append("×")
        else:
            out.append(
                _BARS[min(len(_BARS) - 1, max(0, int((v - low) / span * (len(_BARS) - 1) + 0.5)))]
            )
    return "".join(out)


def _metric_table(result: Comparison) -> Group:
    title = (
        "Deviation of the resumed trajectory from the abandoned one"
        if result.mode == RESTART_MODE
        else "Deviation of the candidate from the baseline"
    )
    table = Table(
        title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, padding=(0, 1)
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("metric", "left"),
        ("pts", "right"),
        ("band±", "right"),
        ("max|Δ|", "right"),
        ("@", "right"),
        ("mean|Δ|", "right"),
        ("out", "right"),
        ("parted", "right"),
        ("back", "right"),
        ("", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    origins: list[str] = []
    stacked: list[str] = []  # the same rows as bullets, for a console too narrow for the table
    for m in result.metrics:
        s = m.stats
        if m.tolerance["origin"] not in origins:
            origins.append(m.tolerance["origin"])
        mark = "*" * (origins.index(m.tolerance["origin"]) + 1)
        table.add_row(
            Text(terminal(m.metric)),
            f"{m.points}",
            _band(m.tolerance) + mark,
            _g(s["max_abs_deviation"]),
            _opt(s["max_deviation_at"]),
            _g(s["mean_abs_deviation"]),
            f"{s['points_outside']}" + ("!" if s["nonfinite_mismatches"] else ""),
            _opt(s["diverged_at"]),
            _opt(s["within_from"]),
            _verdict(m),
        )
        stacked.append(
            f"{terminal(m.metric)}: {_verdict(m).plain} over {m.points} points; band "
            f"±{_band(m.tolerance)}{mark}, max|Δ| {_g(s['max_abs_deviation'])} at "
            f"{_opt(s['max_deviation_at'])}, mean|Δ| {_g(s['mean_abs_deviation'])}, out "
            f"{s['points_outside']}{'!' if s['nonfinite_mismatches'] else ''}, parted "
            f"{_opt(s['diverged_at'])}, back {_opt(s['within_from'])}"
        )
    legend = [f"{'*' * (i + 1)} band: {origin}" for i, origin in enumerate(origins)]
    legend += [
        f"{m.metric}: band {_band_range(m.tolerance)} along the compared range"
        for m in result.metrics
        if _band_range(m.tolerance)
    ]
    legend += [
        f"{m.metric}: max|Δ| {_g(m.stats['max_abs_deviation'])} at "
        f"{_opt(m.stats['max_deviation_at'])} is beyond the band at that point, but each point "
        f"is judged on the median deviation of the {result.judge_points} points centred on it, "
        "and that median stays inside: a one-point event there (which `stab analyze` may flag, "
        "as a grad-norm surge) is not a lasting difference between the runs"
        for m in result.metrics
        if _one_point_only(m)
    ]
    legend += [
        f"{m.metric}: {m.stats['nonfinite_mismatches']} point(s) non-finite in one run only (!)"
        for m in result.metrics
        if m.stats["nonfinite_mismatches"]
    ]
    out_words = (
        "points worse than the baseline beyond the band (for a metric with no better side: "
        "outside it, not judged)"
        if result.band == "one-sided"
        else "points outside the band"
    )
    legend.append(
        f"out: {out_words}; parted: outside from there to the end; back: inside from there on; "
        "better: lower (or higher) than the baseline beyond the band, which passes; "
        "band±: the median band; max|Δ| at @: the largest deviation and its step; "
        "mean|Δ|: the mean deviation over the compared points."
    )
    interp = [
        f"{m.metric}: {m.interpolated_points} of {m.points} points interpolated onto the "
        f"{m.grid}'s grid"
        for m in result.metrics
        if m.interpolated_points
    ]
    narrow = bullets(f"{title}:", stacked, "")
    legend_lines = [Hanging(Text(terminal(line), style="dim")) for line in legend + interp]
    return Group(Widest(table, narrow), *legend_lines)


def _one_point_only(m: MetricComparison) -> bool:
    """Judged ok or better, yet its largest deviation alone is beyond the (median) band."""
    s, tol = m.stats, m.tolerance
    if not m.passed or tol["kind"] == "none" or s.get("sides") == "not judged":
        return False
    band = tol["value"] if tol["kind"] == "absolute" else tol.get("median")
    quiet = not s["points_outside"] and not s.get("points_better")
    return band is not None and s["max_abs_deviation"] > band and quiet


def _verdict(m: MetricComparison) -> Text:
    if not m.passed:
        return Text("FAIL", style="bold red")
    if m.tolerance["kind"] == "none" or m.stats.get("sides") == "not judged":
        return Text("not judged", style="dim")
    if m.stats.get("points_better"):
        return Text("better", style="green")
    return Text("ok", style="green")


def _band(tol: dict) -> str:
    if tol["kind"] == "none":
        return "—"
    return f"{tol['value']:.3g}" if tol["kind"] == "absolute" else f"{tol['median']:.3g}"


def _band_range(tol: dict) -> str:
    """'0.29–1.08' when a relative or noise band varies along the run, else ''."""
    if tol["kind"] in ("absolute", "none") or tol["max"] <= 1.05 * tol["min"]:
        return ""
    return f"{tol['min']:.3g}–{tol['max']:.3g} (median {tol['median']:.3g})"


def _check_table(result: Comparison) -> Table:
    table = Table(title="Checks (--expect)")
    table.add_column("check")
    table.add_column("on")
    table.add_column("value", justify="right")
    table.add_column("result")
    for c in result.checks:
        value = "—" if c.value is None else _g(c.value)
        outcome = Text("holds" if c.holds else "FAILS", style="green" if c.holds else "bold red")
        if c.reason:
            outcome.append(f" ({terminal(c.reason)})", style="dim")
        table.add_row(Text(terminal(c.check.text)), Text(terminal(c.check.side)), value, outcome)
    return table


def _g(value) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if math.isfinite(value) else str(value)


def _opt(value) -> str:
    return "—" if value is None else str(value)


def render(result: Comparison, console: Console) -> None:
    console.print(build(result))
