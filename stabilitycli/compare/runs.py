"""`stab compare`: prove a fix worked, or that a resumed run is back on its path.

Three modes, one result type (`Comparison`, JSON schema `stab.compare/1`,
documented in docs/compare-contract.md):

* `compare(baseline, candidate, options)`: two runs aligned on steps (or on
  tokens), per metric max/mean |deviation|, where they part for good, and a
  verdict against a tolerance (absolute, relative, or by default the noise
  measured in the baseline itself);
* `compare_restart(run, n, options)`: restart n of one log, the abandoned
  trajectory against the resumed one over the replayed steps, with the noise
  of the 100 steps before the restart as the band (the restart-replay rule
  uses the same numbers);
* `check_run(run, options)`: only the `--expect` checks, on one run.

Which side of the band fails (`band`): `one-sided` (the default for two runs:
verifying a fix) fails only a candidate *worse* than the baseline beyond the
band - higher loss, eval loss or grad norm, lower accuracy or throughput; a
candidate better than the baseline is counted (`points_better`) but passes, and
a metric with no better side (the LR) is reported, not judged, since changing
it may be the fix. `two-sided` (the default for `--restart`: the resume should
replay what it abandoned; and what a determinism check wants) fails a point
outside the band on either side.

Tolerance bands (see `deviation.py` for how a point is judged):
absolute `--tolerance`, relative `--rel-tolerance` x |baseline|, or noise:
`noise_band_sigmas` x sqrt(2) x the baseline's local noise sigma - sqrt(2)
because two runs as noisy as the baseline differ by sqrt(2) sigma. Smoothed
curves use the noise shrunk by the smoother and `smoothed_noise_band_sigmas`.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

import numpy as np

from stabilitycli.compare.expect import Check, CheckResult
from stabilitycli.core.config import Thresholds
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.model import jsonable
from stabilitycli.core.records import dataclass
from stabilitycli.detect.deviation import (
    Aligned,
    Judgement,
    Smoothing,
    align,
    judge,
    local_noise,
)
from stabilitycli.detect.replay import replay_noise
from stabilitycli.frame import RunData

SCHEMA = "stab.compare/1"
# compared unless --metric names others: the trajectory, not the machine (throughput,
# step time and loss-scale history legitimately differ between two healthy runs)
DEFAULT_METRICS = ("loss", "grad_norm", "eval_loss", "lr")
PREVIEW_POINTS = 60
BANDS = ("one-sided", "two-sided")
# the mode that compares a resume's replay with the trajectory it abandoned; its details go
# under the same name in the JSON
RESTART_MODE = "restart"
# which way a metric gets better, by the words of its name (checked in this order)
_LOWER_IS_BETTER = ("loss", "perplexity", "ppl", "grad_norm", "step_time", "error")
_HIGHER_IS_BETTER = ("acc", "accuracy", "tokens_per_sec", "throughput", "mfu", "samples_per_sec")
MIN_NOISE_POINTS = 20  # fewer logged baseline points: the noise cannot be told from the trend


@dataclass(frozen=True)
class CompareOptions:
    """What to compare and how. Tolerances map a metric (or '*' for every metric) to a number."""

    metrics: tuple[str, ...] = ()
    tolerance: dict[str, float] = field(default_factory=dict)
    rel_tolerance: dict[str, float] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None
    x: str = "step"
    smoothing: Smoothing | None = None
    strict: bool = False
    expects: tuple[Check, ...] = ()
    thresholds: Thresholds = field(default_factory=Thresholds)
    # None: one-sided for two runs (verifying a fix), two-sided for --restart
    band: str | None = None

    @property
    def judge_points(self) -> int:
        return 1 if self.strict else self.thresholds.judge_points


@dataclass(frozen=True)
class Track:
    """One side of a comparison: per metric, (steps, values) where logged (NaN/Inf kept)."""

    label: str
    source: dict[str, Any]
    series: dict[str, tuple[np.ndarray, np.ndarray]]
    # what --expect reads, when it differs from `series` (restart mode: the whole log)
    checked: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def points(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        return self.series[metric]


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    passed: bool
    points: int
    first: float | None
    last: float | None
    grid: str
    interpolated_points: int
    tolerance: dict[str, Any]
    stats: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "metric": self.metric,
                "passed": self.passed,
                "points": self.points,
                "first": self.first,
                "last": self.last,
                "grid": self.grid,
                "interpolated_points": self.interpolated_points,
                "tolerance": self.tolerance,
                **self.stats,
            }
        )


@dataclass(frozen=True)
class Comparison:
    mode: str
    passed: bool
    baseline: dict[str, Any] | None
    candidate: dict[str, Any]
    x: str
    since: float | None
    until: float | None
    smoothing: str | None
    judge_points: int
    band: str | None  # "one-sided" or "two-sided"; None when only --expect checks ran
    metrics: tuple[MetricComparison, ...]
    checks: tuple[CheckResult, ...]
    restart: dict[str, Any] | None = None
    not_compared: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    preview: dict[str, Any] | None = None

    def metric(self, name: str) -> MetricComparison:
        return next(m for m in self.metrics if m.metric == name)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(
            {
                "schema": SCHEMA,
                "mode": self.mode,
                "passed": self.passed,
                "failed": {
                    "band": [m.metric for m in self.metrics if not m.passed],
                    "checks": [c.check.text for c in self.checks if not c.holds],
                    "problems": list(self.problems),
                },
                "baseline": self.baseline,
                "candidate": self.candidate,
                RESTART_MODE: self.restart,
                "x": self.x,
                "range": {"since": self.since, "until": self.until},
                "smoothing": self.smoothing,
                "judge_points": self.judge_points,
                "band": self.band,
                "metrics": [m.to_dict() for m in self.metrics],
                "checks": [c.to_dict() for c in self.checks],
                "not_compared": list(self.not_compared),
                "problems": list(self.problems),
                "notes": list(self.notes),
                "preview": self.preview,
            }
        )


# ---------------------------------------------------------------- entry points


def compare(
    baseline: RunData, candidate: RunData, options: CompareOptions | None = None
) -> Comparison:
    """Two runs, aligned on `options.x`; see the module doc."""
    options = options or CompareOptions()
    if not options.metrics:
        # the default comparison is the loss: a run whose loss was not read is refused
        baseline.require_loss()
        candidate.require_loss()
    base, cand = track_of(baseline, "baseline"), track_of(candidate, "candidate")
    options = _replace(options, band=options.band or "one-sided")
    notes: list[str] = []
    metrics = _choose_metrics(base, cand, options)
    results = [
        r for m in metrics if (r := _compare_metric(base, cand, m, options, notes)) is not None
    ]
    if not results:
        raise StabInputError(
            str(candidate.source.path),
            "no metric of the baseline overlaps the candidate's logged range; nothing to compare",
        )
    problems = _coverage(base, cand, options)
    checks = _run_checks(options.expects, base, cand)
    skipped = sorted((set(base.series) & set(cand.series)) - set(metrics) - {"tokens"})
    return _result("runs", base, cand, options, results, checks, problems, notes, skipped)


def compare_restart(run: RunData, index: int, options: CompareOptions | None = None) -> Comparison:
    """Restart `index` (1-based) of one log: abandoned vs resumed over the replayed steps."""
    from stabilitycli.detect.replay import replay_from_view, restart_events
    from stabilitycli.detect.series import build_view

    options = options or CompareOptions()
    if not options.metrics:
        run.require_loss()  # as in `compare`: the default comparison is the loss
    if options.x != "step":
        raise StabUsageError(
            "--restart compares on steps (a replay repeats the same steps); drop --x"
        )
    view = build_view(run)
    events = restart_events(view.restarts)
    if not events:
        raise StabUsageError(
            f"--restart {index}: {run.source.path} has no restart (its steps never go back)"
        )
    if not 1 <= index <= len(events):
        raise StabUsageError(
            f"--restart {index}: {run.source.path} has {len(events)} restart(s); "
            f"choose 1-{len(events)}"
        )
    wanted = list(options.metrics) or [m for m in DEFAULT_METRICS if view.has(m)]
    rep = replay_from_view(view, index, wanted)
    lo, hi = rep.window
    src = _source(run)
    kept = {m: view.points(m) for m in view.columns if view.has(m)}
    base = Track(f"abandoned (before restart {index})", src, rep.before)
    cand = Track(f"resumed (restart {index})", src, rep.resumed, checked=kept)
    window_opts = _replace(
        options,
        band=options.band or "two-sided",
        since=max(lo, options.since if options.since is not None else lo),
        until=min(hi, options.until if options.until is not None else hi),
    )
    notes: list[str] = []
    metrics = _choose_metrics(base, cand, options)
    results = []
    noise_info = {}
    for metric in metrics:
        sigma, first, last = replay_noise(rep, metric, options.thresholds)
        noise_info[metric] = (sigma, first, last)
        result = _compare_metric(base, cand, metric, window_opts, notes, noise=(sigma, first, last))
        if result is not None:
            results.append(result)
    if not results:
        raise StabInputError(
            str(run.source.path),
            f"restart {index}: no metric was logged on both sides of the replay (steps {lo}-{hi})",
        )
    checks = _run_checks(options.expects, base, cand)
    restart = {
        **rep.restart.to_dict(),
        "index": index,
        "replayed_steps": [lo, hi],
        "replayed_points": results[0].points,
    }
    return _result(
        RESTART_MODE, base, cand, window_opts, results, checks, (), notes, (), restart=restart
    )


def check_run(run: RunData, options: CompareOptions) -> Comparison:
    """Only the `--expect` checks, on one run (a post-mortem's verification line in CI)."""
    if not options.expects:
        raise StabUsageError(
            "one run and no --expect: give BASELINE CANDIDATE, --expect CHECK, or --restart N"
        )
    cand = track_of(run, "candidate")
    for check in options.expects:
        if check.side == "baseline":
            raise StabUsageError(
                f"--expect {check.text!r}: 'baseline:' needs a baseline run (give two runs)"
            )
    checks = _run_checks(options.expects, None, cand)
    return _result("checks", None, cand, options, [], checks, (), [], ())


# ---------------------------------------------------------------- tracks


def track_of(run: RunData, label: str) -> Track:
    """The per-metric logged points of a run (per-rank logs: the mean over ranks, as rules do)."""
    from stabilitycli.detect.series import build_view

    view = build_view(run)
    series = {m: view.points(m) for m in view.columns if view.has(m)}
    return Track(label, _source(run), series)


def _source(run: RunData) -> dict[str, Any]:
    s = run.source
    return {
        "path": s.path,
        "format": s.format,
        "run": s.run,
        "first_step": s.first_step,
        "last_step": s.last_step,
        "rows": s.rows_read,
        "rows_used": s.rows_used,
        "restarts": len(s.restarts),
        "warnings": list(s.warnings),
    }


def _choose_metrics(base: Track, cand: Track, options: CompareOptions) -> list[str]:
    if options.metrics:
        for m in options.metrics:
            for side in (base, cand):
                if m not in side.series:
                    shown = ", ".join(sorted(side.series)) or "none"
                    raise StabUsageError(
                        f"--metric {m}: the {side.label} has no {m} series (it has: {shown})"
                    )
        return list(dict.fromkeys(options.metrics))
    chosen = [m for m in DEFAULT_METRICS if m in base.series and m in cand.series]
    if not chosen:
        raise StabInputError(
            base.source["path"],
            f"the two runs share none of {', '.join(DEFAULT_METRICS)}; name one with --metric",
        )
    return chosen


def _axis(track: Track, metric: str, x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, steps, values) for a metric, sorted by x."""
    steps, values = track.points(metric)
    if x == "step":
        return steps.astype(np.float64), steps, values
    if "tokens" not in track.series:
        raise StabUsageError(
            f"--x tokens: the {track.label} ({track.source['path']}) logs no tokens "
            "series (consumed tokens: tokens, num_tokens, consumed_tokens, ...)"
        )
    t_steps, t_vals = track.points("tokens")
    ok = np.isfinite(t_vals)
    t_steps, t_vals = t_steps[ok], t_vals[ok]
    if t_vals.size < 2:
        raise StabUsageError(f"--x tokens: the {track.label} logs fewer than 2 finite token counts")
    back = np.flatnonzero(np.diff(t_vals) < 0)
    if back.size:
        raise StabUsageError(
            f"--x tokens: the {track.label}'s token count goes down at step "
            f"{int(t_steps[back[0] + 1])}; it cannot be an x-axis"
        )
    inside = (steps >= t_steps[0]) & (steps <= t_steps[-1])
    # tokens logged at other steps than the metric: consumed tokens grow linearly between logs
    xs = np.interp(steps[inside], t_steps, t_vals)
    return xs, steps[inside], values[inside]


# ---------------------------------------------------------------- one metric


def _compare_metric(
    base: Track,
    cand: Track,
    metric: str,
    options: CompareOptions,
    notes: list[str],
    noise: tuple[float, int, int] | None = None,
) -> MetricComparison | None:
    bx, bs, bv = _axis(base, metric, options.x)
    cx, cs, cv = _axis(cand, metric, options.x)
    if bx.size == 0 or cx.size == 0:
        notes.append(f"{metric}: not logged on the {options.x} axis by both runs")
        return None
    lo = max(bx[0], cx[0], -np.inf if options.since is None else options.since)
    hi = min(bx[-1], cx[-1], np.inf if options.until is None else options.until)
    grid = align((bx, bs, bv), (cx, cs, cv), lo, hi) if lo <= hi else None
    if grid is None or grid.x.size == 0:
        notes.append(f"{metric}: no overlapping points in the compared range")
        return None
    base_v, cand_v = grid.base, grid.cand
    if options.smoothing is not None:
        base_v, cand_v = options.smoothing.apply(base_v), options.smoothing.apply(cand_v)
    tol, tol_info = _tolerance(metric, grid, base_v, (bx, bv), options, noise)
    verdict = judge(base_v, cand_v, tol, options.judge_points)
    direction = better_direction(metric)
    sides = _sides(options.band, direction)
    better = np.zeros(verdict.outside.size, dtype=bool)
    if sides == "one-sided":
        verdict, better = _one_sided(verdict, base_v, cand_v, direction, options.judge_points)
    stats = verdict.stats(grid.x)
    # "not judged": the points outside are counted and shown, but do not fail the comparison
    stats["sides"] = sides
    stats["better_when"] = {-1: "lower", 1: "higher", 0: None}[direction]
    stats["points_better"] = int(better.sum())
    stats["first_better"] = _first(grid.x, better)
    if options.x != "step":
        stats["diverged_at_step"] = _step_at(grid, stats["diverged_at"])
        stats["within_from_step"] = _step_at(grid, stats["within_from"])
    return MetricComparison(
        metric=metric,
        passed=verdict.passed or sides == "not judged",
        points=int(grid.x.size),
        first=_num(grid.x[0]),
        last=_num(grid.x[-1]),
        grid=grid.grid_from,
        interpolated_points=grid.interpolated_points,
        tolerance=tol_info,
        stats={**stats, "_preview": _preview(grid, base_v, cand_v, verdict)},
    )


def better_direction(metric: str) -> int:
    """-1 when a lower value is better (loss, grad norm), +1 when higher is, 0 when neither."""
    from stabilitycli.core.metric_names import words

    name = metric.lower()
    ws = set(words(metric))
    for direction, names in ((-1, _LOWER_IS_BETTER), (1, _HIGHER_IS_BETTER)):
        if any(n == name or n in ws for n in names):
            return direction
    return 0


def _sides(band: str | None, direction: int) -> str:
    """How a metric is judged: 'two-sided', 'one-sided', or 'not judged' (no better side)."""
    if band == "two-sided":
        return "two-sided"
    return "one-sided" if direction else "not judged"


def _one_sided(
    verdict: Judgement, base_v: np.ndarray, cand_v: np.ndarray, direction: int, points: int
) -> tuple[Judgement, np.ndarray]:
    """Only a candidate worse than the baseline beyond the band is outside.

    Returns the judgement (outside = worse) and the points where the candidate is
    better than the baseline beyond the band. A NaN/Inf in the baseline where the
    candidate is finite is better; one in the candidate where the baseline is finite,
    or two different non-finite values, is worse."""
    import polars as pl

    base_bad, cand_bad = ~np.isfinite(base_v), ~np.isfinite(cand_v)
    mismatch = np.isinf(verdict.deviation) & (base_bad | cand_bad)
    fixed = mismatch & base_bad & ~cand_bad  # the baseline broke here, the candidate did not
    broken = mismatch & ~fixed
    # the deviation signed so that positive is worse, with the non-finite points as +-inf
    worse_by = np.where(mismatch, 0.0, verdict.deviation) * -direction
    worse_by = np.where(broken, np.inf, np.where(fixed, -np.inf, worse_by))
    judged = worse_by
    if points > 1 and worse_by.size:
        judged = pl.Series(worse_by).rolling_median(points, center=True, min_samples=1).to_numpy()
    tol = verdict.tolerance
    outside = ((judged > tol) | broken) & ~fixed
    better = ((judged < -tol) | fixed) & ~broken
    return (
        Judgement(verdict.deviation, judged * -direction, tol, outside, verdict.mismatches),
        better,
    )


def _first(x: np.ndarray, mask: np.ndarray) -> float | int | None:
    hits = np.flatnonzero(mask)
    return _num(x[hits[0]]) if hits.size else None


def _tolerance(
    metric: str,
    grid: Aligned,
    base_v: np.ndarray,
    base_raw: tuple[np.ndarray, np.ndarray],
    options: CompareOptions,
    noise: tuple[float, int, int] | None,
) -> tuple[np.ndarray, dict]:
    """The band per grid point, and how it was chosen (printed, and in the JSON)."""
    n = grid.x.size
    thr = options.thresholds
    if metric in options.tolerance or (
        "*" in options.tolerance and metric not in options.rel_tolerance
    ):
        value = options.tolerance.get(metric, options.tolerance.get("*"))
        return np.full(n, value), {
            "kind": "absolute",
            "value": value,
            "origin": f"--tolerance {value:g}",
        }
    rel = options.rel_tolerance.get(metric, options.rel_tolerance.get("*"))
    if rel is not None:
        tol = rel * np.abs(base_v)
        tol = np.where(np.isfinite(tol), tol, 0.0)
        return tol, {
            "kind": "relative",
            "value": rel,
            **_spread(tol),
            "origin": f"--rel-tolerance {rel:g} x |baseline|",
        }
    if noise is None and np.isfinite(base_raw[1]).sum() < MIN_NOISE_POINTS:
        # a sparse series (eval loss every 500 steps) has too few points to tell noise from trend
        return np.full(n, np.inf), {
            "kind": "none",
            "points": int(np.isfinite(base_raw[1]).sum()),
            "origin": f"not judged: too few baseline points to measure its noise "
            f"(fewer than {MIN_NOISE_POINTS}); give --tolerance {metric}=VALUE",
        }
    factor = options.smoothing.noise_factor(n) if options.smoothing is not None else np.ones(n)
    sigmas = (
        thr.smoothed_noise_band_sigmas if options.smoothing is not None else thr.noise_band_sigmas
    )
    if noise is not None:
        sigma, first, last = noise
        raw_sigma = np.full(n, sigma if math.isfinite(sigma) else 0.0)
        how = f"sigma over steps {first}-{last} before the restart"
    else:
        raw_sigma = local_noise(base_raw[0], base_raw[1], grid.x)
        how = "local sigma of the baseline (RMS of its residual around a rolling median)"
    tol = sigmas * math.sqrt(2.0) * raw_sigma * factor
    smooth = (
        f", x the {options.smoothing.label} noise shrink" if options.smoothing is not None else ""
    )
    return tol, {
        "kind": "noise",
        "sigmas": sigmas,
        "noise_sigma": float(np.median(raw_sigma)),
        **_spread(tol),
        "origin": f"noise: {sigmas:g} x sqrt(2) x {how}{smooth}",
    }


def _spread(tol: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(tol)), "min": float(tol.min()), "max": float(tol.max())}


def _step_at(grid: Aligned, x_value) -> int | None:
    if x_value is None:
        return None
    i = int(np.searchsorted(grid.x, x_value))
    return int(grid.steps[min(i, grid.steps.size - 1)])


def _preview(
    grid: Aligned, base_v: np.ndarray, cand_v: np.ndarray, verdict: Judgement
) -> dict[str, Any]:
    """Both curves in at most PREVIEW_POINTS buckets (max per bucket so spikes show; NaN if any)."""
    n = grid.x.size
    edges = np.linspace(0, n, min(n, PREVIEW_POINTS) + 1).astype(int)
    starts = edges[:-1]

    def bucket(values: np.ndarray) -> list[float]:
        bad = ~np.isfinite(values)
        top = np.maximum.reduceat(np.where(bad, -np.inf, values), starts)
        has_bad = np.add.reduceat(bad.astype(int), starts) > 0
        return [math.nan if b else float(v) for v, b in zip(top, has_bad, strict=True)]

    out_buckets = np.add.reduceat(verdict.outside.astype(int), starts) > 0
    return {
        "x": [_num(grid.x[i]) for i in starts],
        "baseline": bucket(base_v),
        "candidate": bucket(cand_v),
        "outside": [bool(b) for b in out_buckets],
    }


# ---------------------------------------------------------------- checks and assembly


def _run_checks(expects: tuple[Check, ...], base: Track | None, cand: Track) -> list[CheckResult]:
    results = []
    for check in expects:
        track = base if check.side == "baseline" else cand
        if track is None:
            raise StabUsageError(f"--expect {check.text!r}: 'baseline:' needs a baseline run")
        series = track.checked if track.checked is not None else track.series
        if check.metric not in series:
            shown = ", ".join(sorted(series)) or "none"
            raise StabUsageError(
                f"--expect {check.text!r}: the {track.label} has no {check.metric} series "
                f"(it has: {shown})"
            )
        results.append(check.evaluate(*series[check.metric]))
    return results


def _coverage(base: Track, cand: Track, options: CompareOptions) -> list[str]:
    """A verification 'through step T' fails when a run stops before T."""
    if options.until is None or options.x != "step":
        return []
    problems = []
    for side in (base, cand):
        last = side.source.get("last_step")
        if last is not None and last < options.until:
            problems.append(
                f"the {side.label} stops at step {last}, before --until {options.until:g}"
            )
    return problems


def _result(
    mode, base, cand, options, results, checks, problems, notes, skipped, restart=None
) -> Comparison:
    metrics = []
    preview = None
    for r in results:
        stats = dict(r.stats)
        pv = stats.pop("_preview")
        if preview is None:
            preview = {"metric": r.metric, **pv}
        metrics.append(
            MetricComparison(
                r.metric,
                r.passed,
                r.points,
                r.first,
                r.last,
                r.grid,
                r.interpolated_points,
                r.tolerance,
                stats,
            )
        )
    passed = all(m.passed for m in metrics) and all(c.holds for c in checks) and not problems
    return Comparison(
        mode=mode,
        passed=passed,
        baseline=base.source if base else None,
        candidate=cand.source,
        x=options.x,
        since=options.since,
        until=options.until,
        smoothing=options.smoothing.label if options.smoothing else None,
        judge_points=options.judge_points,
        band=options.band if mode != "checks" else None,
        metrics=tuple(metrics),
        checks=tuple(checks),
        restart=restart,
        not_compared=tuple(skipped),
        problems=tuple(problems),
        notes=tuple(notes),
        preview=preview,
    )


def _replace(options: CompareOptions, **changes) -> CompareOptions:
    from dataclasses import replace

    return replace(options, **changes)


def _num(value) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() else value
