"""The words of evidence schemas: what the number under one evidence key is.

Each finding kind declares its schema beside its rule (`stabilitycli/detect/kinds/`)
in these words; `stabilitycli.core.quantities` walks a finding's evidence by it (the
kinds of number and what they mean are listed there, in `KINDS`). A key a kind
does not declare is a number without a meaning: `tests/core/test_quantities.py` fails on it.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator, Mapping
from dataclasses import fields, replace
from functools import cached_property
from typing import Any, Union

from stabilitycli.core.records import dataclass

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


# ---------------------------------------------------------------- typed evidence


class _Absent:
    """The value of an evidence field the finding does not state (the key is left out)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "ABSENT"  # one sentinel in every process: unpickled by name


ABSENT: Any = _Absent()
_QUANTITY = "quantity"


def measure(what: Spec | By | EachItem | Schema | None) -> dict[str, Any]:
    """An evidence field's metadata: what its number is (None: not a number, like a name).

    Declared as `mu: float = field(metadata=measure(Spec("mean", ...)))`; a key the rule
    states only sometimes defaults to `ABSENT` (left out of the JSON).
    """
    return {_QUANTITY: what}


@dataclass(frozen=True, eq=False, repr=False)
class Evidence(Mapping[str, Any]):
    """A finding's evidence as typed fields, declared beside its kind.

    `to_dict()` is the JSON object: the fields in declaration order, an `ABSENT` one left
    out. It reads as that mapping too (`ev["mu"]`, `ev.get("causes")`, `ev == {...}`), so
    a reader may take either view. Subclasses are `@dataclass(frozen=True, eq=False,
    repr=False)`: equal as mappings, like the dicts they replace, and shown by the one
    `__repr__` here (start-up, #40: `@dataclass` would write one from source for each
    class, compiled anew in every process; this one shows what that one showed).
    """

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{self.__class__.__qualname__}({shown})"

    @classmethod
    def schema(cls) -> Schema:
        """Per evidence key, what its number is: the fields' declarations."""
        return {
            f.name: f.metadata[_QUANTITY]
            for f in fields(cls)
            if f.metadata.get(_QUANTITY) is not None
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not ABSENT:
                out[f.name] = _plain(value)
        return out | self.__dict__.get("_added", {})

    def adding(self, **keys: Any) -> Evidence:
        """A copy with keys a later stage adds to any finding (`COMMON`), written last."""
        copy = replace(self)
        object.__setattr__(copy, "_added", {**self.__dict__.get("_added", {}), **keys})
        return copy

    @cached_property
    def _view(self) -> dict[str, Any]:
        return self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._view[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view)

    def __len__(self) -> int:
        return len(self._view)


def _plain(value: Any) -> Any:
    if isinstance(value, Evidence):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
