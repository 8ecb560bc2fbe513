"""Every evidence type is shown by `Evidence.__repr__` (start-up, #40: `@dataclass` is told
`repr=False`), and that shows what the `__repr__` `@dataclass` generates showed."""

from __future__ import annotations

import dataclasses
import math

import pytest

from stabilitycli.core.quantity_schema import ABSENT, Evidence
from stabilitycli.detect.kinds import all_kinds


def _subclasses(kind: type) -> list[type]:
    return [t for sub in kind.__subclasses__() for t in (sub, *_subclasses(sub))]


assert all_kinds()  # every kind's module imported: every evidence type (a spike's causes too)
TYPES = sorted(
    {t for t in _subclasses(Evidence) if t.__module__.startswith("stabilitycli.")},
    key=lambda t: t.__qualname__,
)


def _generated_twin(kind: type[Evidence]) -> type:
    """The same fields in a class whose `__repr__` `@dataclass` generates."""
    specs = []
    for f in dataclasses.fields(kind):
        extra = {"kw_only": f.kw_only, "repr": f.repr}
        if f.default is not dataclasses.MISSING:
            extra["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            extra["default_factory"] = f.default_factory
        specs.append((f.name, f.type, dataclasses.field(**extra)))
    return dataclasses.make_dataclass(kind.__qualname__, specs, frozen=True, eq=False)


def _values(kind: type[Evidence], absent: bool) -> dict[str, object]:
    """A value for every field: numbers, text, a list, a NaN; `absent`: defaults left out."""
    samples = [3, 2.5, "text", [1, 2], math.nan, None, -7]
    return {
        f.name: samples[i % len(samples)]
        for i, f in enumerate(dataclasses.fields(kind))
        if not absent or f.default is dataclasses.MISSING
    }


def test_every_evidence_type_has_the_one_repr() -> None:
    assert TYPES
    assert [t for t in TYPES if t.__repr__ is not Evidence.__repr__] == []


@pytest.mark.parametrize("kind", TYPES, ids=lambda t: t.__qualname__)
@pytest.mark.parametrize("absent", [False, True], ids=["every-field", "defaults"])
def test_repr_is_the_generated_one(kind: type[Evidence], absent: bool) -> None:
    values = _values(kind, absent)
    shown = repr(kind(**values))
    assert shown == repr(_generated_twin(kind)(**values))
    if absent and any(f.default is ABSENT for f in dataclasses.fields(kind)):
        assert "ABSENT" in shown
