"""The words of evidence schemas: what the number under one evidence key is.

Each finding kind declares its schema beside its rule (`stabilitycli/detect/kinds/`)
in these words; `stabilitycli.quantities` walks a finding's evidence by it (the
kinds of number and what they mean are listed there, in `KINDS`). A key a kind
does not declare is a number without a meaning: `tests/test_quantities.py` fails on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

FINDING_METRIC = "@metric"  # the finding's own `metric`


@dataclass(frozen=True)
class Spec:
    """What the number under one evidence key is.

    Step references: an evidence key ("peak_step"; inside a list of dicts, the item's own
    key first, then the top level), an element of a list ("noise_steps[0]"), the element at
    the same index as this one ("halving_steps[]", with `each`), or the finding's own step
    ("@step", "@end_step").
    """

    kind: str
    metric: str | None = FINDING_METRIC
    step: str | None = None
    first_step: str | None = None
    last_step: str | None = None
    metric_key: str | None = None  # an evidence key that names the series instead
    own_rank: bool = False  # the finding's rank's own series, not the all-rank mean
    each: bool = False  # a list whose elements are each a quantity


@dataclass(frozen=True)
class By:
    """The spec chosen by the value of another evidence key (a missing key reads None)."""

    key: str
    specs: Mapping[Any, Spec]


@dataclass(frozen=True)
class EachItem:
    """A list of dicts, each described by the schema its `key` value picks."""

    key: str
    schemas: Mapping[str, Schema]


Schema = Mapping[str, Union[Spec, By, EachItem, "Schema"]]

STEP = Spec("step", None)
STEPS = Spec("steps", None)
COUNT = Spec("count", None)
DURATION = Spec("duration_steps", None)
LABEL = Spec("label", None)
BOUND = Spec("bound")
RATIO = Spec("ratio")
FRACTION = Spec("fraction", None)


def over(kind: str, first: str, last: str, **extra: Any) -> Spec:
    """A number taken over the steps `first`-`last` (two step references)."""
    return Spec(kind, first_step=first, last_step=last, **extra)


def two(key: str) -> tuple[str, str]:
    """The two ends of a `[first, last]` pair of steps under `key`."""
    return f"{key}[0]", f"{key}[1]"


# every code: keys a later stage may add to any finding
COMMON: Schema = {"explained_by_ranks": LABEL}
