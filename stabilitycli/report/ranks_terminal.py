"""The rich terminal rendering of a `RankReport`: outlier table, heatmap, effect on the mean.

`build(report)` returns a renderable (so `stab analyze` can embed it) and
`render(report, console)` prints it. The heatmap shows every rank for small
jobs; for large ones the outliers plus a few typical ranks, and says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stabilitycli.core import numfmt
from stabilitycli.core.model import Severity
from stabilitycli.report.escape import CommandGuard, terminal
from stabilitycli.report.layout import Fitted, Hanging, Widest, bullets

if TYPE_CHECKING:
    from stabilitycli.detect.ranks.report import MeanShift, RankOutlier, RankReport

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
ALL_RANKS_UP_TO = 16  # show every rank in the heatmap up to this many
TYPICAL_SHOWN = 4  # typical ranks shown beside the outliers in larger jobs
# bands of a cell's mean |robust z| (each step's z clipped at 10): (upper bound, glyph)
_BANDS = ((3.0, "·"), (6.0, "▪"), (9.5, "▆"), (math.inf, "█"))
_BIG_JOB = 1024  # the seed's comparison: the same failure among this many ranks


def fmt(value: float | None, sign: bool = False) -> str:
    """A number for people: 4 significant digits, NaN/Inf spelled out."""
    if value is None:
        return "–"
    text = numfmt.number(value, sign)
    if text.lstrip("+-").isdigit():
        text += ".0"  # 40.0, not 40: a loss, not a count
    return text


def build(report: RankReport) -> CommandGuard:
    """The metric, notes and messages may quote the input: they go in as `Text` (never
    parsed as rich markup) with their control characters shown."""
    return CommandGuard(_build(report))


def _build(report: RankReport) -> Group:
    metric = terminal(report.metric)
    parts: list = [
        Text.assemble(
            ("stab ranks", "bold"),
            f" · {metric} · {report.ranks} ranks · steps {report.steps[0]}–{report.steps[1]}",
        )
    ]
    if report.ranks < 2:
        parts.append(Text("one rank only: nothing to compare it with", style="yellow"))
    elif not report.outliers:
        parts.append(
            Text(
                f"every rank agrees with its cohort: no rank outlier in {metric}"
                + (f" or {terminal(report.throughput_metric)}" if report.throughput_metric else ""),
                style="bold green",
            )
        )
    else:
        parts.append(Widest(_table(report), _stacked(report)))
        effect = mean_effect_text(report)
        if effect:
            parts.extend(Hanging(Text(terminal(line))) for line in effect.split("\n"))
        for o in report.outliers:
            if o.rank is None:  # a pair that disagrees: its message is the whole story
                parts.append(Text(terminal(o.message), style="yellow"))
    heat = _heatmap(report)
    if heat is not None:
        parts.extend(heat)
    if report.notes:
        parts.append(bullets("Notes:", (terminal(n) for n in report.notes), "dim", mark="-"))
    return Group(*parts)


def render(report: RankReport, console: Console | None = None) -> None:
    if console is None:
        from stabilitycli.report.console import console as console_for
        from stabilitycli.report.console import medium

        console = console_for(medium())
    console.print(build(report))


def _table(report: RankReport) -> Table:
    tested = any(o.test is not None for o in report.outliers)
    table = Table(title=_TITLE.format(n=len(report.outliers)), caption=_caption(tested))
    for name in ("rank", "kind", "onset", "value", "cohort median", "robust z", "mean shift"):
        table.add_column(name, justify="left" if name == "kind" else "right")
    table.add_column("recovered", justify="right")
    if tested:  # only a level outlier has a test that decided it
        table.add_column("test", justify="left")
    for o in report.outliers:
        rank, kind, recovered = _names(o, report)
        table.add_row(
            Text(rank, style=_STYLE[o.severity]),
            Text(terminal(kind)),
            str(o.onset_step),
            fmt(o.value),
            fmt(o.cohort_median),
            fmt(o.robust_z),
            fmt(o.mean_shift, sign=True),
            recovered,
            *((o.test_cell,) if tested else ()),
        )
    return table


def _stacked(report: RankReport) -> Group:
    """The outlier table for a console too narrow for it: one bullet per outlier, each
    number named, wrapping under itself."""
    items = []
    for o in report.outliers:
        rank, kind, recovered = _names(o, report)
        items.append(
            f"rank {rank}: {terminal(kind)} from step {o.onset_step}; value {fmt(o.value)}, "
            f"cohort median {fmt(o.cohort_median)}, robust z {fmt(o.robust_z)}, mean shift "
            f"{fmt(o.mean_shift, sign=True)}; "
            + ("not recovered" if recovered == "–" else f"recovered: {recovered}")
            + ("" if o.test is None else f"; found by {o.test_cell}")
        )
    return Group(
        bullets(_TITLE.format(n=len(report.outliers)) + ":", items, ""),
        Text(_caption(any(o.test is not None for o in report.outliers)), style="dim"),
    )


_TITLE = "Outlier ranks ({n}), most serious first"
_CAPTION = (
    "level: value, cohort median and robust z are medians over each rank's affected steps "
    "(onset to recovery, or to the end); mean shift (`mean_shift` in the JSON): the mean "
    "with the rank minus the mean without it, averaged over those steps"
)
_FOUND_BY = (
    "; test: the one that made it an outlier, its statistic ≥ its bar (CUSUM: of its "
    "robust z, against rank_cusum_decide; z-run: logged steps in a row at |robust z| ≥ "
    "rank_z, against rank_persist_steps)"
)


def _caption(tested: bool) -> str:
    return _CAPTION + (_FOUND_BY if tested else "")


def _names(o: RankOutlier, report: RankReport) -> tuple[str, str, str]:
    """The outlier's rank (or pair), kind (with its metric if not the report's), recovery."""
    rank = str(o.rank) if o.rank is not None else "/".join(map(str, o.pair or ()))
    kind = o.kind if o.metric == report.metric else f"{o.kind} ({o.metric})"
    recovered = "–" if o.recovered_step is None else f"step {o.recovered_step}"
    if o.kind == "silent":
        recovered = f"silent after {o.end_step}"
    return rank, kind, recovered


def mean_effect_text(report: RankReport) -> str:
    """The seed's arithmetic in words: where the rank sits, and what it does to the mean."""
    culprits = [
        o
        for o in report.outliers
        if o.kind in ("level", "nonfinite") and o.rank is not None and o.metric == report.metric
    ]
    if not culprits:
        return ""
    effect = report.mean_effect
    lines = [_one_rank(o, report) for o in culprits[:3]]
    finite = effect is not None and all(
        v is not None and math.isfinite(v) for v in (effect.mean_during, effect.clean_during)
    )
    if effect is not None and finite and len(culprits) > 1:
        lines.append(_together(effect, report))
    level = next((o for o in culprits if o.kind == "level" and o.value is not None), None)
    value = level.value if level is not None else None
    smaller = report.ranks < _BIG_JOB
    if smaller and level is not None and value is not None and level.cohort_median is not None:
        hidden = (value - level.cohort_median) / _BIG_JOB
        lines.append(
            f"among {_BIG_JOB} ranks the same failure of rank {level.rank} would move the mean by "
            f"only {fmt(hidden, sign=True)} (its median level minus the cohort median, over "
            f"{_BIG_JOB}): the bigger the job, the better the mean hides it"
        )
    return "\n".join(lines)


def _together(effect: MeanShift, report: RankReport) -> str:
    """Several culprits: the all-rank mean before and during, with them and without them."""
    ranks = f"rank{'s' if len(effect.ranks) > 1 else ''} {', '.join(map(str, effect.ranks))}"
    during = f"steps {effect.start_step}–{effect.end_step}"
    span = effect.baseline_steps
    if span is None or effect.mean_before is None or effect.clean_before is None:
        return (
            f"the {report.ranks}-rank mean over {during} is {fmt(effect.mean_during)}; without "
            f"{ranks} it would be {fmt(effect.clean_during)}"
        )
    return (
        f"the {report.ranks}-rank mean goes from {fmt(effect.mean_before)} (mean over steps "
        f"{span[0]}–{span[1]}) to {fmt(effect.mean_during)} (mean over {during}); without "
        f"{ranks} it would go {fmt(effect.clean_before)} → {fmt(effect.clean_during)} "
        "over the same steps"
    )


def _one_rank(o: RankOutlier, report: RankReport) -> str:
    if o.kind == "nonfinite":
        return (
            f"rank {o.rank} reports {fmt(o.value)} at step {o.onset_step} while the cohort median "
            f"there is {fmt(o.cohort_median)}: the {o.ranks_reporting}-rank mean becomes "
            f"{fmt(o.mean_shift)}"
        )
    back = (
        f", back in line from step {o.recovered_step}"
        if o.recovered_step is not None
        else ", not back in line by its last logged step"
    )
    where = (
        f" (medians over steps {o.effect_steps[0]}–{o.effect_steps[1]})" if o.effect_steps else ""
    )
    head = (
        f"rank {o.rank} sits at {fmt(o.value)} against a cohort median of {fmt(o.cohort_median)} "
        f"from step {o.onset_step} on{where}{back}"
    )
    if o.effect_steps is None:
        return (
            f"{head}; it moves the {o.ranks_reporting}-rank mean by {fmt(o.mean_shift, sign=True)}"
        )
    a, b = o.effect_steps
    both = (
        f" ({fmt(o.mean_with)} with it, {fmt(o.mean_without)} without, means over those steps)"
        if o.mean_with is not None and o.mean_without is not None
        else ""
    )
    found = o.test_words
    return (
        f"{head}; the mean with rank {o.rank} minus the mean without it over steps {a}–{b}: "
        f"{fmt(o.mean_shift, sign=True)}{both}" + (f"; {found}" if found else "")
    )


def _cell(z: float) -> Text:
    if math.isnan(z):
        return Text(" ")
    if math.isinf(z):
        return Text("×", style="bold red")
    glyph = next(g for bound, g in _BANDS if abs(z) < bound)
    if abs(z) < _BANDS[0][0]:
        return Text(glyph, style="dim")
    return Text(glyph, style="red" if z > 0 else "blue")


def _heatmap(report: RankReport) -> list | None:
    picture = report.picture
    # with fewer than 3 ranks a cohort z says nothing (two ranks sit at +-0.67 by construction)
    if picture is None or picture.ranks.size < 3:
        return None
    import numpy as np

    ranks = [int(r) for r in picture.ranks]
    flagged = [o.rank for o in report.outliers if o.rank is not None and o.rank in ranks]
    for o in report.outliers:
        if o.pair:
            flagged.extend(r for r in o.pair if r in ranks)
    flagged = list(dict.fromkeys(flagged))
    if len(ranks) <= ALL_RANKS_UP_TO:
        shown, caption = ranks, f"all {len(ranks)} ranks"
    else:
        # typical ranks: the ones closest to the cohort over the whole run
        with np.errstate(all="ignore"):
            spread = np.nanmedian(
                np.abs(np.where(np.isinf(picture.deviation), np.nan, picture.deviation)), axis=1
            )
        order = [
            ranks[i]
            for i in np.argsort(np.nan_to_num(spread, nan=np.inf))
            if ranks[i] not in flagged
        ]
        typical = sorted(order[:TYPICAL_SHOWN])
        shown = flagged + typical
        caption = (
            f"{len(shown)} of {len(ranks)} ranks: the {len(flagged)} outlier(s) and "
            f"{len(typical)} typical ones"
        )
    index = {r: i for i, r in enumerate(ranks)}
    rows = picture.deviation[[index[r] for r in shown]]
    edges = picture.step_edges
    labels = [f"rank {r}" for r in shown]
    table = Fitted(lambda width_cells: _grid(labels, rows, edges, width_cells))
    title = Text(
        f"{terminal(report.metric)}: robust z of each rank against the cohort ({caption})",
        style="bold",
    )
    legend = Text(
        "· |z|<3  ▪ 3–6  ▆ 6–10  █ ≥10 throughout (red above the cohort, blue below)  × NaN/Inf  "
        "blank: not reported",
        style="dim",
    )
    return [title, table, legend]


def _grid(labels: list[str], rows, edges, width_cells: int | None) -> Table:
    """One line of cells per rank; on a console too narrow for every bucket, neighbouring
    buckets merge, each keeping its most extreme z (so an outlier stays visible)."""
    import numpy as np

    label_cells = max(map(len, [*labels, "step"])) + 2  # the label column and the gap after it
    buckets = rows.shape[1]
    room = buckets if width_cells is None else max(1, min(buckets, width_cells - label_cells))
    starts = np.linspace(0, buckets, room + 1).astype(int)[:-1]
    with np.errstate(all="ignore"):
        high = np.fmax.reduceat(rows, starts, axis=1)  # NaN (not reported) only if all are
        low = np.fmin.reduceat(rows, starts, axis=1)
    merged = np.where(np.abs(low) > np.abs(high), low, high)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(justify="right", style="bold")
    table.add_column(no_wrap=True)
    for label, row in zip(labels, merged, strict=True):
        line = Text()
        for z in row:  # one cell per bucket on screen, not per row of data
            line.append_text(_cell(float(z)))
        table.add_row(label, line)
    first, last = str(int(edges[0])), str(int(edges[-1]) - 1)
    table.add_row("step", Text(first + last.rjust(max(1, room - len(first))), style="dim"))
    return table
