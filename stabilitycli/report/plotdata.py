"""The numbers behind `stab report`'s plots, downsampled for display.

`build(analysis, run, thresholds, x_axis=...)` returns `Plots`: panels of
plain lists (x, y, hover text) that any plotting front end can draw; the HTML
renderer (`report/html.py`) only turns them into plotly traces. Series longer
than `buckets * 2` points are cut to the min and max of each bucket, which
keeps the shape of a curve (spikes included), and every flagged point (spike
onsets and peaks, NaN steps, overflows, finding steps) is always kept.

Values are rounded to `DISPLAY_DIGITS` significant digits before they are
written (`display_values`): what the eye can see, at a fraction of the bytes. A
non-finite value is not turned into a gap: it is written as the word the logs
use ("NaN", "+Inf", "-Inf"), which plotly draws as a break in the line, and it
also gets its own marker.
"""

from __future__ import annotations

import math
from dataclasses import field

import numpy as np

from stabilitycli.core import numfmt
from stabilitycli.core.config import Thresholds
from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.model import Analysis
from stabilitycli.core.records import dataclass
from stabilitycli.detect.kinds.divergence import DIVERGENCE
from stabilitycli.detect.kinds.nan import NAN
from stabilitycli.detect.kinds.schedule import LR_INCREASING, LR_JUMP
from stabilitycli.detect.kinds.spike import BLIP, SPIKE
from stabilitycli.detect.series import SeriesView, build_view
from stabilitycli.detect.windows import trailing_stats, value_at_or_before
from stabilitycli.frame import RunData

DISPLAY_BUCKETS = 1500  # per series: at most ~3000 drawn points plus flagged ones
LAYER_WINDOW_STEPS = 100  # per-layer norms are drawn over this many steps before the first NaN
# 5 significant digits: the hover shows 4, and a 350-pixel plot zoomed 10x into the noise of a
# loss (e.g. 2.1450 +- 0.0005) still resolves steps of 1e-4; 4 digits would draw that as stairs.
DISPLAY_DIGITS = 5


@dataclass
class Line:
    name: str
    x: list[float]
    # rounded (`display_values`); "NaN", "+Inf", "-Inf" for non-finite values (a break in the
    # line, marked separately); None where nothing is drawn (a band with too few points)
    y: list[float | str | None]
    role: str = "series"  # series | band-low | band-high | layer | abandoned


@dataclass
class Markers:
    name: str
    x: list[float]
    y: list[float]  # always a height: a non-finite value's marker sits at the top of its panel
    text: list[str]
    role: str  # spike | blip | nonfinite | overflow | cause | jump


@dataclass
class Region:
    x0: float
    x1: float
    label: str
    role: str  # trend-window | diverged


@dataclass
class Heatmap:
    x: list[float]
    y: list[int]
    z: list[list[float | None]]
    text: list[list[str]]  # what the cell holds; the rank and the bin come from the axes
    bin_steps: int = 0  # the width of a bin (the median, if they differ)


@dataclass
class Panel:
    key: str
    title: str
    y_title: str
    log_y: bool = False
    lines: list[Line] = field(default_factory=list)
    markers: list[Markers] = field(default_factory=list)
    heatmap: Heatmap | None = None
    # set for a log axis: ticks at 1, 10, 100 (or 1-2-5 over a short span), labelled in full
    y_ticks: tuple[list[float], list[str]] | None = None
    y_range: tuple[float, float] | None = None  # a linear axis that must not be guessed (LR)
    regions: list[Region] = field(default_factory=list)  # shaded x spans (divergence window)
    events: list[tuple[float, str]] = field(default_factory=list)  # labelled vertical lines


@dataclass
class Plots:
    x_title: str
    panels: list[Panel]
    restarts: list[tuple[float, str]]  # (x, label) drawn on every panel
    points_in: int = 0  # logged values read
    points_drawn: int = 0  # values written to the page


def build(
    analysis: Analysis,
    run: RunData,
    thresholds: Thresholds | None = None,
    *,
    x_axis: str = "steps",
    buckets: int = DISPLAY_BUCKETS,
) -> Plots:
    thr = thresholds or Thresholds()
    view = build_view(run)
    to_x, x_title = _x_mapping(view, x_axis)
    flagged = _flagged_steps(analysis)
    plots = Plots(x_title=x_title, panels=[], restarts=[])
    for r in view.restarts:
        plots.restarts.append(
            (
                float(to_x(np.array([r.resumed_from_step]))[0]),
                f"restart: resumed from step {r.resumed_from_step} (was at {r.last_step_before})",
            )
        )
    builders = (_loss_panel, _grad_panel, _lr_panel, _scale_panel, _layer_panel)
    for make in builders:
        panel = make(view, analysis, thr, to_x, flagged, buckets, plots)
        if panel is not None:
            plots.panels.append(panel)
    drawn = {line.name.split("  (")[0] for p in plots.panels for line in p.lines}
    # the eval series a verdict rests on are drawn too: the headline names them
    evals = [b.series for b in analysis.verdict.basis if b.role == "eval"]
    for name in dict.fromkeys([*cited_series(analysis), *evals]):
        if name not in drawn and view.has(name):
            plots.panels.append(_cited_panel(view, analysis, name, to_x, flagged, buckets, plots))
    heat = _rank_panel(analysis, to_x)
    if heat is not None:
        plots.panels.append(heat)
    return plots


# ---------------------------------------------------------------- x axis and flags


def _x_mapping(view: SeriesView, x_axis: str):
    if x_axis == "steps":
        return (lambda steps: np.asarray(steps, dtype=np.float64)), "step"
    if x_axis != "tokens":
        raise StabUsageError(f"--x must be steps or tokens, got {x_axis!r}")
    for metric in ("tokens", "samples"):
        if view.has(metric):
            steps, values = view.points(metric)
            ok = np.isfinite(values)
            if ok.sum() >= 2:
                s, v = steps[ok].astype(np.float64), values[ok]
                # consumed tokens grow linearly between logged points; extrapolate at the same rate
                return (
                    lambda at, s=s, v=v: _interp_linear(np.asarray(at, dtype=np.float64), s, v)
                ), metric
    raise StabUsageError(
        f"{view.source.path}: --x tokens needs a tokens or samples series in the log; use --x steps"
    )


def _interp_linear(at: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    out = np.interp(at, xs, ys)
    lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0]) if xs[1] != xs[0] else 0.0
    hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if xs[-1] != xs[-2] else 0.0
    out = np.where(at < xs[0], ys[0] + (at - xs[0]) * lo_slope, out)
    return np.where(at > xs[-1], ys[-1] + (at - xs[-1]) * hi_slope, out)


def _flagged_steps(analysis: Analysis) -> np.ndarray:
    steps: set[int] = set()
    for f in analysis.findings:
        for value in (f.step, f.end_step):
            if value is not None:
                steps.add(int(value))
        for key in (
            "onset_step",
            "peak_step",
            "recovery_step",
            "first_step",
            "start_step",
            "end_step",
        ):
            value = f.evidence.get(key)
            if isinstance(value, (int, np.integer)):
                steps.add(int(value))
        for cause in f.evidence.get("causes") or []:
            for key in ("grad_norm_step", "lr_step", "repeat_of_step", "restart_step"):
                if isinstance(cause.get(key), (int, np.integer)):
                    steps.add(int(cause[key]))
        if f.kind is BLIP:
            steps.update(int(s) for s in f.evidence.get("steps", []))
    return np.array(sorted(steps), dtype=np.int64)


# ---------------------------------------------------------------- downsampling


def keep_indices(
    values: np.ndarray, buckets: int, must_keep: np.ndarray | None = None
) -> np.ndarray:
    """Indices to draw: min and max of each of `buckets` equal-count buckets, ends, and `must_keep`.

    Non-finite values take part as the first NaN, +Inf and -Inf of each bucket,
    so a run of NaNs stays visible however long the log, and so does an Inf beside it.
    """
    n = values.size
    if n <= 2 * buckets:
        return np.arange(n)
    bucket = (np.arange(n, dtype=np.int64) * buckets) // n
    finite = np.isfinite(values)
    starts = np.searchsorted(bucket, np.arange(buckets))
    low_first = np.lexsort((np.where(finite, values, np.inf), bucket))
    high_first = np.lexsort((np.where(finite, -values, np.inf), bucket))
    keep = np.zeros(n, dtype=bool)
    keep[low_first[starts]] = True
    keep[high_first[starts]] = True
    keep[[0, n - 1]] = True
    bad = np.flatnonzero(~finite)
    if bad.size:
        # the first NaN, the first +Inf and the first -Inf of each bucket: a bucket that holds
        # several kinds shows each, so no kind of non-finite value is cut from the page
        kind = np.where(np.isnan(values[bad]), 0, np.where(values[bad] > 0, 1, 2))
        _, first_per_bucket = np.unique(bucket[bad] * 3 + kind, return_index=True)
        keep[bad[first_per_bucket]] = True
    if must_keep is not None:
        keep |= must_keep
    return np.flatnonzero(keep)


def _series(view: SeriesView, metric: str, flagged: np.ndarray, buckets: int, plots: Plots):
    steps, values = view.points(metric)
    must = np.isin(steps, flagged)
    idx = keep_indices(values, buckets, must)
    plots.points_in += int(steps.size)
    plots.points_drawn += int(idx.size)
    return steps, values, idx


def round_significant(values: np.ndarray, digits: int = DISPLAY_DIGITS) -> np.ndarray:
    """`values` rounded to `digits` significant digits; non-finite values pass through."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v) & (v != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log10(np.abs(np.where(finite, v, 1.0))))
    shift = (digits - 1 - exponent).astype(np.int64)
    # divide or multiply by an exact power of ten (up to 1e22), so the result is the double
    # nearest the rounded decimal and JSON writes it with no trailing ...0000001
    up = np.power(10.0, np.clip(shift, 0, 308))
    down = np.power(10.0, np.clip(-shift, 0, 308))
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.where(shift >= 0, np.round(v * up) / up, np.round(v / down) * down)
    return np.where(finite, rounded, v)


def display_values(values: np.ndarray) -> list[float | str | None]:
    """Rounded numbers for the page; non-finite ones as the words the logs use, never a gap."""
    v = np.asarray(values, dtype=np.float64)
    # whole numbers (batch ids, loss scales, token counts) are identities or exact: kept as is
    whole = np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 2**53)
    out = np.where(whole, v, round_significant(v)).astype(object)
    out[np.isnan(v)] = "NaN"
    out[np.isposinf(v)] = "+Inf"
    out[np.isneginf(v)] = "-Inf"
    return out.tolist()


def display_x(x: np.ndarray) -> list[float]:
    """x positions: whole numbers (steps, tokens) written as integers, which JSON spells shorter."""
    x = np.asarray(x, dtype=np.float64)
    if x.size and np.all(np.isfinite(x)) and np.all(x == np.round(x)) and np.abs(x).max() < 2**53:
        return x.astype(np.int64).tolist()
    return x.tolist()


def _band(values: np.ndarray) -> list[float | str | None]:
    """A band line: where the trailing window has too few points the band is not drawn (None)."""
    v = np.asarray(values, dtype=np.float64)
    out = round_significant(v).astype(object)
    out[~np.isfinite(v)] = None
    return out.tolist()


def _nonfinite_markers(name: str, steps, values, idx, to_x, at_y: float) -> Markers | None:
    sel = idx[~np.isfinite(values[idx])]
    if not sel.size:
        return None
    labels = [numfmt.nonfinite(v) for v in values[sel].tolist()]
    return Markers(
        f"{name} non-finite",
        display_x(to_x(steps[sel])),
        [at_y] * sel.size,
        [
            f"{name} = {lab} at step {int(s)}"
            for lab, s in zip(labels, steps[sel].tolist(), strict=True)
        ],
        "nonfinite",
    )


def _top(values: np.ndarray) -> float:
    """The height non-finite markers sit at: the highest finite value, else 1 (a height that
    exists on a linear and a log axis alike, so the markers of an all-NaN series still show)."""
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else 1.0


def _marker_y(values: np.ndarray, fallback: float) -> list[float]:
    """Marker heights: the value where it is finite, else `fallback` (a marker is never hidden)."""
    v = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(v), v, fallback).tolist()


# ---------------------------------------------------------------- panels


def _loss_panel(view, analysis, thr: Thresholds, to_x, flagged, buckets, plots) -> Panel | None:
    if not view.has("loss"):
        return None
    steps, loss, idx = _series(view, "loss", flagged, buckets, plots)
    x = display_x(to_x(steps[idx]))
    panel = Panel("loss", "Loss", "loss")
    stats = trailing_stats(
        steps, loss, thr.spike_window_steps, thr.min_points_per_window, thr.widened_window_points
    )
    sigma = np.maximum(np.nan_to_num(stats.std, nan=0.0), thr.sigma_floor_frac * np.abs(stats.mean))
    mean, high = stats.mean.copy(), stats.mean + thr.spike_sigma * sigma
    spikes = [f for f in analysis.findings if f.kind is SPIKE]
    for f in spikes:
        # the rule judges an event against the baseline frozen at its onset, until the loss is
        # back (or, never back, for a trailing window): the band drawn is that one, not the
        # trailing window that the spike's own points inflate
        ev = f.evidence
        onset, end = int(ev["onset_step"]), int(ev["end_step"])
        back = ev.get("recovery_step")
        until = (
            max(end, int(back) - 1)
            if back is not None
            else max(end, onset + thr.spike_window_steps)
        )
        frozen = (steps >= onset) & (steps <= until)
        mean[frozen], high[frozen] = float(ev["mu"]), float(ev["threshold"])
    frozen_note = "; frozen at a spike's onset until it is over" if spikes else ""
    band_label = f"trailing mu + {thr.spike_sigma:g} sigma ({stats.description}{frozen_note})"
    panel.lines.append(Line("trailing mean mu", x, _band(mean[idx]), "band-low"))
    panel.lines.append(Line(band_label, x, _band(high[idx]), "band-high"))
    panel.lines.append(Line("loss", x, display_values(loss[idx])))
    panel.lines += _abandoned_branches(view, "loss", to_x, buckets)
    top = _top(loss)
    bad = _nonfinite_markers("loss", steps, loss, idx, to_x, top)
    if bad:
        panel.markers.append(bad)
    if spikes:
        xs, ys, texts = [], [], []
        for f in spikes:
            ev = f.evidence
            onset, peak_step = int(ev["onset_step"]), int(ev["peak_step"])
            peak = float(ev["peak"])
            cause = (ev.get("causes") or [{}])[0].get("cause", "no evident cause")
            text = (
                f"spike at step {onset}: peak {peak:.4g} at step {peak_step} > baseline mean "
                f"{float(ev['mu']):.4g} + {thr.spike_sigma:g}*sigma {float(ev['sigma']):.3g}; "
                f"{'recovered' if ev.get('recovered') else 'did not recover'}; cause: {cause}"
            )
            xs.append(float(to_x(np.array([peak_step]))[0]))
            ys.append(peak if math.isfinite(peak) else top)
            texts.append(text)
        panel.markers.append(Markers(SPIKE.code, xs, ys, texts, SPIKE.marker))
    for f in analysis.findings:
        if f.kind is DIVERGENCE:
            _mark_divergence(panel, f, steps, loss, to_x)
    blip = next((f for f in analysis.findings if f.kind is BLIP), None)
    if blip is not None:
        bs = np.array(blip.evidence.get("steps", []), dtype=np.int64)
        vals = value_at_or_before(steps, loss, bs) if bs.size else np.array([])
        panel.markers.append(
            Markers(
                "blip (noise, not a spike)",
                display_x(to_x(bs)),
                _marker_y(vals, _top(loss)),
                [f"blip at step {int(s)}" for s in bs.tolist()],
                BLIP.marker,
            )
        )
    return panel


def _abandoned_branches(view: SeriesView, metric: str, to_x, buckets: int) -> list[Line]:
    """The steps a resume logged again, as first logged: one dotted branch per abandoned
    segment, leaving the drawn curve where the resume went back (the mean over ranks, like
    the main curve)."""
    import polars as pl

    from stabilitycli.frame import SEGMENT

    rows = view.abandoned
    if rows is None or metric not in rows.columns:
        return []
    means = (
        rows.group_by([SEGMENT, "step"])
        .agg(pl.col(metric).cast(pl.Float64).mean())
        .drop_nulls(metric)
        .sort([SEGMENT, "step"])
    )
    lines = []
    for _, part in means.group_by([SEGMENT], maintain_order=True):
        steps = part["step"].to_numpy().astype(np.int64)
        values = part[metric].to_numpy()
        idx = keep_indices(values, buckets)
        lines.append(
            Line(
                f"{metric} before the resume, abandoned (steps {steps[0]}-{steps[-1]})",
                display_x(to_x(steps[idx])),
                display_values(values[idx]),
                "abandoned",
            )
        )
    return lines


def _mark_divergence(panel: Panel, f, steps: np.ndarray, loss: np.ndarray, to_x) -> None:
    """The onset (a line and a marker on the loss), the stretch after it, and the window the
    trend test ran on, with the numbers the verdict quotes."""
    ev = f.evidence
    onset = int(ev.get("start_step", f.step))
    last = int(f.end_step if f.end_step is not None else steps[-1])
    at = float(to_x(np.array([onset]))[0])
    panel.events.append((at, f"divergence onset: step {onset}"))
    panel.regions.append(
        Region(at, float(to_x(np.array([last]))[0]), f"diverged: steps {onset}-{last}", "diverged")
    )
    if "window_start_step" in ev and "end_step" in ev:
        a, b = int(ev["window_start_step"]), int(ev["end_step"])
        z = ev.get("z")
        test = f" (Mann-Kendall z = {float(z):.1f})" if isinstance(z, (int, float)) else ""
        panel.regions.append(
            Region(
                float(to_x(np.array([a]))[0]),
                float(to_x(np.array([b]))[0]),
                f"trend window: steps {a}-{b}{test}",
                "trend-window",
            )
        )
    value = value_at_or_before(steps, loss, np.array([onset]))
    rise = ev.get("relative_rise")
    said = f", then rose {100 * float(rise):.1f}%" if isinstance(rise, (int, float)) else ""
    panel.markers.append(
        Markers(
            "divergence onset",
            [at],
            _marker_y(value, _top(loss)),
            [f"divergence from step {onset}: loss {numfmt.number(float(value[0]))}{said}"],
            "onset",
        )
    )


def _grad_panel(view, analysis, thr, to_x, flagged, buckets, plots) -> Panel | None:
    if not view.has("grad_norm"):
        return None
    steps, grad, idx = _series(view, "grad_norm", flagged, buckets, plots)
    panel = Panel("grad_norm", "Pre-clip grad norm (log scale)", "grad norm", log_y=True)
    panel.lines.append(Line("grad_norm", display_x(to_x(steps[idx])), display_values(grad[idx])))
    _log_axis(panel, grad)
    bad = _nonfinite_markers("grad_norm", steps, grad, idx, to_x, _top(grad))
    if bad:
        panel.markers.append(bad)
    xs: list[float] = []
    ys: list[float] = []
    texts: list[str] = []
    for f in analysis.findings:
        for cause in f.evidence.get("causes") or []:
            if cause.get("cause") == "long-tail-token":
                xs.append(float(to_x(np.array([cause["grad_norm_step"]]))[0]))
                ys.append(float(cause["grad_norm"]))
                texts.append(
                    f"grad norm {cause['grad_norm']:.4g} at step {cause['grad_norm_step']} = "
                    f"{cause['ratio']:.1f}x its trailing mean {cause['grad_norm_baseline']:.4g}"
                )
    if xs:
        panel.markers.append(Markers("grad-norm spike (spike cause)", xs, ys, texts, "cause"))
    return panel


def _lr_panel(view, analysis, thr, to_x, flagged, buckets, plots) -> Panel | None:
    if not view.has("lr"):
        return None
    steps, lr, idx = _series(view, "lr", flagged, buckets, plots)
    panel = Panel("lr", "Learning rate", "LR")
    panel.lines.append(Line("lr", display_x(to_x(steps[idx])), display_values(lr[idx])))
    _lr_axis(panel, lr)
    jumps = [
        f for f in analysis.findings if f.kind in (LR_JUMP, LR_INCREASING) and f.step is not None
    ]
    if jumps:
        at = np.array([f.step for f in jumps], dtype=np.int64)
        panel.markers.append(
            Markers(
                "LR finding",
                display_x(to_x(at)),
                _marker_y(value_at_or_before(steps, lr, at), _top(lr)),
                [f.message for f in jumps],
                "jump",
            )
        )
    return panel


def _scale_panel(view, analysis, thr, to_x, flagged, buckets, plots) -> Panel | None:
    from stabilitycli.detect.mixed_precision import overflow_per_step
    from stabilitycli.detect.overflow_ledger import ledger_of

    counts = overflow_per_step(view)
    has_scale = view.has("loss_scale")
    fp16 = view.dtype == "fp16" or has_scale or view.has("overflow")
    if not has_scale and not (fp16 and counts.any()):
        return None
    panel = Panel("loss_scale", "Loss scale (log scale) and overflows", "loss scale", log_y=True)
    over = np.flatnonzero(counts > 0)
    top = 1.0
    if has_scale:
        steps, scale, idx = _series(
            view, "loss_scale", np.concatenate([flagged, view.steps[over]]), buckets, plots
        )
        panel.lines.append(
            Line("loss_scale", display_x(to_x(steps[idx])), display_values(scale[idx]))
        )
        top = _top(scale)
        _log_axis(panel, scale)
    else:
        _log_axis(panel, np.array([1.0]))  # overflow markers alone, drawn at 1
    if over.size:
        # one marker per overflow step, thinned to the display budget (the count says how many)
        shown = (
            over
            if over.size <= 2 * DISPLAY_BUCKETS
            else over[keep_indices(over.astype(float), DISPLAY_BUCKETS)]
        )
        at = view.steps[shown]
        ys = [1.0] * at.size
        if has_scale:
            scale_steps, scale_values = view.points("loss_scale")
            ys = _marker_y(value_at_or_before(scale_steps, scale_values, at), top)
        # the count is the ledger's, as in every other output; markers sit on logged steps
        ledger = ledger_of(view)
        panel.markers.append(
            Markers(
                f"{ledger.total_text()} overflow(s) at {over.size} logged step(s)",
                display_x(to_x(at)),
                ys,
                [f"overflow at step {int(s)}" for s in at.tolist()],
                "overflow",
            )
        )
    return panel


def _layer_panel(view, analysis, thr, to_x, flagged, buckets, plots) -> Panel | None:
    nan = next((f for f in analysis.findings if f.kind is NAN), None)
    layers = view.layer_columns()
    if nan is None or not layers:
        return None
    first = int(nan.evidence["first_step"])
    origin = nan.evidence.get("origin")
    from stabilitycli.detect.nan import forward_order_key

    panel = Panel(
        "layers", f"Per-layer norms before the first NaN (step {first})", "norm", log_y=True
    )
    ordered = sorted(
        layers, key=lambda n: (n.split("/", 1)[0], forward_order_key(n.split("/", 1)[1]))
    )
    seen: list[np.ndarray] = []
    for name in ordered:
        steps, values = view.points(name)
        a = np.searchsorted(steps, first - LAYER_WINDOW_STEPS)
        b = np.searchsorted(steps, first + thr.cause_lead_steps, side="right")
        s, v = steps[a:b], values[a:b]
        if not s.size:
            continue
        seen.append(v)
        label = name + ("  (first non-finite)" if origin and name.endswith("/" + origin) else "")
        panel.lines.append(Line(label, display_x(to_x(s)), display_values(v), "layer"))
        bad = _nonfinite_markers(name, s, v, np.arange(s.size), to_x, _top(v))
        if bad:
            panel.markers.append(bad)
    if not panel.lines:
        return None
    _log_axis(panel, *seen)
    return panel


def cited_series(analysis: Analysis) -> list[str]:
    """Every logged series a finding or its causes names (the verdict's evidence), in order."""
    names = [n for f in analysis.findings for n in _cited_by(f)]
    return list(dict.fromkeys(names))  # each once, first mention first


def _cited_by(f) -> list[str]:
    ev = f.evidence
    found = [f.metric, ev.get("series"), (ev.get("earliest_nonfinite") or {}).get("series")]
    found += [c.get("series") for c in ev.get("causes") or [] if isinstance(c, dict)]
    return [n for n in found if isinstance(n, str) and n]


def _cited_panel(view, analysis, name: str, to_x, flagged, buckets, plots) -> Panel:
    steps, values, idx = _series(view, name, flagged, buckets, plots)
    codes = sorted({f.code for f in analysis.findings if name in _cited_by(f)})
    checks = [c for b in analysis.verdict.basis if b.series == name for c in b.checks]
    title = f"cited by: {', '.join(codes)}" if codes else f"checked by: {', '.join(checks)}"
    panel = Panel(f"cited:{name}", f"{name} ({title})", name)
    panel.lines.append(Line(name, display_x(to_x(steps[idx])), display_values(values[idx])))
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        panel.log_y = True  # a norm that grew or collapsed by decades
        _log_axis(panel, values)
    bad = _nonfinite_markers(name, steps, values, idx, to_x, _top(values))
    if bad:
        panel.markers.append(bad)
    own = [f for f in analysis.findings if f.metric == name and f.step is not None]
    if own:
        at = np.array([f.step for f in own], dtype=np.int64)
        panel.markers.append(
            Markers(
                "finding",
                display_x(to_x(at)),
                _marker_y(value_at_or_before(steps, values, at), _top(values)),
                [f.message for f in own],
                "jump",
            )
        )
    return panel


def _lr_axis(panel: Panel, lr: np.ndarray) -> None:
    """Linear from 0 unless the schedule spans decades (then log, labelled 1e-5, 1e-4, ...).

    Decades are judged on the 10th and 90th percentiles of the positive values, so a warmup
    from 0 or a cosine decay to 0 does not by itself turn the axis to log; a step schedule
    1e-1 -> 1e-4 does. A constant LR gets 0..2x its value: left to itself plotly centres
    it on a -1..+1 axis where 0.001 reads as 0."""
    finite = lr[np.isfinite(lr)]
    if not finite.size:
        return
    positive = finite[finite > 0]
    if positive.size and finite.min() > 0:
        p10, p90 = np.percentile(positive, [10, 90])
        if p90 / p10 >= 100:
            panel.log_y = True
            panel.title = "Learning rate (log scale)"
            _log_axis(panel, lr)
            return
    low, high = float(finite.min()), float(finite.max())
    if low == high:
        span = abs(high) or 1.0
        panel.y_range = (min(0.0, 2 * low), max(0.0, 2 * high)) if high else (-span, span)
        return
    pad = 0.05 * (high - low)
    panel.y_range = (0.0 if low >= 0 else low - pad, high + pad)


def _log_axis(panel: Panel, *arrays: np.ndarray) -> None:
    values = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in (*arrays, [])])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size:
        panel.y_ticks = log_ticks(float(values.min()), float(values.max()))


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Ticks for a log axis from `low` to `high`, labelled as numbers people read.

    Powers of ten (1, 10, 100; every k-th when there are many) over three decades or more;
    1-2-5 per decade over a shorter span; 1..9 per decade when even that gives fewer than
    three ticks. Labels are whole numbers (`tick_label`), never plotly's bare minor digits
    ("5 ... 1 ... 5 ... 10 ... 2")."""
    lo_exp, hi_exp = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = math.log10(high / low)
    exps = np.arange(lo_exp, hi_exp + 1)
    ticks = np.array([])
    for mantissas in ([1.0], [1.0, 2.0, 5.0], [float(m) for m in range(1, 10)]):
        if len(mantissas) == 1 and decades < 3:
            continue
        cand = (np.asarray(mantissas)[None, :] * 10.0 ** exps[:, None]).ravel()
        ticks = cand[(cand >= low * (1 - 1e-9)) & (cand <= high * (1 + 1e-9))]
        if ticks.size >= 3:
            break
    if ticks.size < 2:  # a span inside one step of 1..9: the ends themselves
        ticks = np.unique(round_significant(np.array([low, high]), 2))
    if ticks.size > 8:
        ticks = ticks[:: math.ceil(ticks.size / 8)]
    values = round_significant(ticks, 3).tolist()
    return values, [tick_label(v) for v in values]


def tick_label(value: float) -> str:
    """1e-05, 0.001, 0.5, 20, 5000, 10k, 2.5M: full numbers, k/M/G/T from ten thousand up."""
    if value >= 1e4:
        for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if value >= scale:
                return f"{value / scale:g}{suffix}"
    if value < 1e-3:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:g}"


def _rank_panel(analysis: Analysis, to_x) -> Panel | None:
    report = analysis.rank_report
    picture = getattr(report, "picture", None) if report is not None else None
    if picture is None or picture.deviation.size == 0:
        return None
    edges = np.asarray(picture.step_edges, dtype=np.float64)
    centres = display_x(to_x((edges[:-1] + edges[1:]) / 2.0))
    dev = np.asarray(picture.deviation, dtype=np.float64)
    # the colour scale spans -10..+10 and the hover prints one decimal: two decimals are plenty
    z = np.round(np.where(np.isinf(dev), 11.0, dev), 2).astype(object)  # 11: non-finite's colour
    z[np.isnan(dev)] = None  # not reporting: no cell
    # only what differs per cell is written per cell; the rank and the step range come from the
    # axes through the hover template (60 bins x 64 ranks of full sentences were 160 kB)
    text = np.char.mod("robust z %+.1f", np.where(np.isfinite(dev), dev, 0.0)).astype(object)
    text[np.isnan(dev)] = "not reporting"
    text[np.isinf(dev)] = "non-finite"
    panel = Panel(
        "ranks", f"Per-rank deviation from the cohort ({report.metric}, robust z)", "rank"
    )
    panel.heatmap = Heatmap(
        centres,
        [int(r) for r in np.asarray(picture.ranks).tolist()],
        z.tolist(),
        text.tolist(),
        bin_steps=round(float(np.median(np.diff(edges)))),
    )
    return panel
