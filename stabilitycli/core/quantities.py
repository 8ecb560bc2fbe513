"""What each evidence number is: a typed view of a finding's evidence.

A finding's `evidence` is a flat dict of named numbers that the renderers
print from. The name alone does not say what a number is: `mu` is a mean, but
over which steps? Each finding kind's `evidence` schema declares, per
evidence key, the number's kind (one of `KINDS`: a point value at step S, a
mean over steps A-B, a peak at step S...), the series it was read from, and
where its step or steps are found (another evidence key, or the finding's own
`step`/`end_step`). `quantities(finding)` walks the evidence by that schema.
The evidence dict itself stays as it is: this is a view, added beside it in
the JSON.

No polars and no numpy here: `model.py` imports this module.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from stabilitycli.core.quantity_schema import FINDING_METRIC, By, EachItem, Schema, Spec
from stabilitycli.core.records import dataclass


class _Kind(Protocol):
    @property
    def evidence(self) -> Schema: ...


class Finding(Protocol):
    """What the walk reads of a `model.Finding` (typed here so that neither module imports
    the other both ways)."""

    @property
    def kind(self) -> _Kind: ...

    @property
    def step(self) -> int | None: ...

    @property
    def end_step(self) -> int | None: ...

    @property
    def rank(self) -> int | None: ...

    @property
    def metric(self) -> str | None: ...

    @property
    def evidence(self) -> Mapping[str, Any]: ...


# The closed set of kinds, each with what it means. A number whose meaning fits none of
# them gets a kind of its own here rather than the nearest one.
KINDS: dict[str, str] = {
    "point": "the value of the series logged at `step`",
    "previous_point": "the last value of the series logged before `step`",
    "peak": "the largest value of the series over the event, logged at `step`",
    "min": "the lowest value of the series over steps `first_step`-`last_step` (the whole "
    "log when they are null), logged at `step`",
    "max": "the highest value of the series over steps `first_step`-`last_step` (the whole "
    "log when they are null), logged at `step`",
    "mean": "the mean of the finite values logged over steps `first_step`-`last_step`",
    "median": "the median of the finite values logged over steps `first_step`-`last_step`",
    "mean_of_medians": "the mean of the trend bins' medians (`bin_points` consecutive points "
    "each) that tile steps `first_step`-`last_step`",
    "min_of_medians": "the lowest trend-bin median after the trend window, up to `last_step`",
    "trailing_mean": "the mean of the series over the spike window before `step` "
    "([step - spike_window_steps, step))",
    "trailing_median": "the median of the series over the spike window before `step`",
    "local_level": "where the series' curve was at `step`, read from its trend over steps "
    "`first_step`-`last_step` (the trend at `step`, at least the mean of the window's last "
    "quarter, at most the window's mean)",
    "median_around": "where the series' curve was at `step`: the median of the finite values "
    "logged over steps `first_step`-`last_step`, the one at `step` left out (the points either "
    "side of it)",
    "slope": "the change of the series per step, from its trend over steps "
    "`first_step`-`last_step`",
    "cohort_median": "over steps `first_step`-`last_step`, the median of the per-step median "
    "across ranks (with two ranks, of the other rank)",
    "mean_others": "the mean over steps `first_step`-`last_step` of the per-step mean of every "
    "rank but the finding's",
    "sigma": "the noise scale (a standard deviation, floored or pooled as the rule says) "
    "measured over steps `first_step`-`last_step`",
    "z": "(value - baseline mean) / sigma, the baseline taken over steps "
    "`first_step`-`last_step`; the value is the one at `step` when given",
    "robust_z": "the rank's median robust z against its cohort over steps `first_step`-`last_step`",
    "cusum": "the one-sided CUSUM of the rank's robust z against its cohort (each step's z "
    "clipped at rank_z, less the drift allowance rank_cusum_k, summed and floored at 0), "
    "reached at `step`",
    "trend_z": "the Mann-Kendall statistic of the bin medians over steps `first_step`-`last_step`",
    "ratio": "one value over another (x times)",
    "autocorrelation": "the lag-1 autocorrelation of the series' noise around its rolling mean "
    "(of the trend bins' medians for a trend test), between -1 and 1",
    "relative_change": "(after - before) / abs(before) (a fall counts positive where the key says "
    "drop)",
    "fraction": "a share: a count over a count, between 0 and 1 (a rate per step for overflows)",
    "difference": "one value of the series minus another (its size where the key says abs)",
    "mean_difference": "a difference averaged over steps `first_step`-`last_step` (of its size "
    "where the key says abs)",
    "bound": "a level or bar a rule compares against (a threshold, a tolerance band)",
    "count": "how many points, events, windows or ranks",
    "step": "a step of the run",
    "steps": "a list of steps (`first_step` and `last_step` are its ends)",
    "duration_steps": "a number of steps between two events",
    "label": "a number that names something (a spike type, a batch id, a rank, a restart "
    "index, a row of the log), not a measure",
}


@dataclass(frozen=True)
class Quantity:
    """One evidence number and what it is."""

    key: str  # its path in the evidence: "mu", "causes[0].grad_norm", "halving_scales[3]"
    value: float | int | tuple[float | int, ...]
    kind: str  # one of KINDS
    metric: str | None  # the series it was read from ("loss", "grad_norm"...), None if none
    step: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    rank: int | None = None  # the rank whose own series it is; None: the run's (all ranks)

    def to_dict(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {
            "key": self.key,
            "value": _json_number(value),
            "kind": self.kind,
            "metric": self.metric,
            "step": self.step,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "rank": self.rank,
        }


def quantities(finding: Finding) -> tuple[Quantity, ...]:
    """Every number of the finding's evidence that its kind's schema describes."""
    return tuple(_walk(finding, finding.evidence, finding.evidence, finding.kind.evidence, ""))


def _walk(
    finding: Finding, top: Mapping, here: Mapping, schema: Schema, prefix: str
) -> Iterator[Quantity]:
    for key, value in here.items():
        spec = schema.get(key)
        if isinstance(spec, By):
            spec = spec.specs.get(_lookup(spec.key, here, top))
        path = prefix + key
        if spec is None:
            continue
        if isinstance(spec, EachItem):
            for i, item in enumerate(value if isinstance(value, (list, tuple)) else ()):
                if isinstance(item, Mapping):
                    sub = spec.schemas.get(str(item.get(spec.key)), {})
                    yield from _walk(finding, top, item, sub, f"{path}[{i}].")
        elif not isinstance(spec, Spec):  # a nested dict
            if isinstance(value, Mapping):
                yield from _walk(finding, top, value, spec, path + ".")
        elif spec.each:
            for i, element in enumerate(value if isinstance(value, (list, tuple)) else ()):
                if is_number(element):
                    yield _quantity(finding, spec, f"{path}[{i}]", element, top, here, i)
        elif isinstance(value, (list, tuple)):
            listed = tuple(v for v in value if is_number(v))
            if listed:
                yield _quantity(finding, spec, path, listed, top, here, None)
        elif is_number(value):
            yield _quantity(finding, spec, path, value, top, here, None)


def is_number(value: Any) -> bool:
    """A number the evidence states (a bool is a yes/no, not a number)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _quantity(
    finding: Finding,
    spec: Spec,
    path: str,
    value: Any,
    top: Mapping,
    here: Mapping,
    index: int | None,
) -> Quantity:
    def step(ref: str | None) -> int | None:
        return _step(_resolve(ref, finding, top, here, index))

    first, last = step(spec.first_step), step(spec.last_step)
    if spec.kind == "steps" and isinstance(value, tuple):
        first, last = _step(value[0]), _step(value[-1])
    metric = spec.metric
    if spec.metric_key is not None:
        named = _lookup(spec.metric_key, here, top)
        metric = str(named) if named is not None else None
    elif metric == FINDING_METRIC:
        metric = finding.metric
    return Quantity(
        key=path,
        value=value,
        kind=spec.kind,
        metric=metric,
        step=step(spec.step),
        first_step=first,
        last_step=last,
        rank=finding.rank if spec.own_rank else None,
    )


def _lookup(key: str, here: Mapping, top: Mapping) -> Any:
    return here[key] if key in here else top.get(key)


def _resolve(
    ref: str | None, finding: Finding, top: Mapping, here: Mapping, index: int | None
) -> Any:
    if ref is None:
        return None
    if ref == "@step":
        return finding.step
    if ref == "@end_step":
        return finding.end_step
    if ref.endswith("]"):
        name, _, position = ref[:-1].partition("[")
        listed = _lookup(name, here, top)
        at = index if position == "" else int(position)
        if (
            not isinstance(listed, (list, tuple))
            or at is None
            or not -len(listed) <= at < len(listed)
        ):
            return None
        return listed[at]
    return _lookup(ref, here, top)


def _step(value: Any) -> int | None:
    """A step reference as an int (a warmup end is a float step); None if not a number."""
    if not is_number(value) or not math.isfinite(value):
        return None
    return int(value)


def _json_number(value: Any) -> Any:
    if isinstance(value, list):
        return [_json_number(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _json_number(value.item())
    return value
