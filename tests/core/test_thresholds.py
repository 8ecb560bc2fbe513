"""`Thresholds` writes its own `__eq__`, `__hash__` and `__repr__` (start-up, #40): they
must give what the ones `@dataclass` generates gave."""

from __future__ import annotations

import dataclasses
import math

import pytest

from stabilitycli.core.config import Thresholds

FIELDS = dataclasses.fields(Thresholds)
# the same fields in a class whose methods `@dataclass` generates, as Thresholds' did
Generated = dataclasses.make_dataclass(
    "Thresholds",
    [(spec.name, spec.type, dataclasses.field(default=spec.default)) for spec in FIELDS],
    frozen=True,
    kw_only=True,
)


def _twin(thresholds: Thresholds):
    return Generated(**{s.name: getattr(thresholds, s.name) for s in FIELDS})


NAN = math.nan
CASES = [
    Thresholds(),
    Thresholds(spike_sigma=4.0),
    Thresholds(spike_sigma=NAN),  # one NaN object: equal to itself inside a tuple
    Thresholds(spike_sigma=float("nan")),  # another NaN object: unequal
    Thresholds(min_points_per_window=9, spike_window_steps=200),
    Thresholds(planned_lr_restart_steps=(1000, 2000)),
]


@pytest.mark.parametrize("one", CASES, ids=repr)
@pytest.mark.parametrize("other", CASES, ids=repr)
def test_equality_and_hash_are_the_generated_ones(one: Thresholds, other: Thresholds) -> None:
    assert (one == other) is (_twin(one) == _twin(other))
    assert (one != other) is (_twin(one) != _twin(other))
    assert hash(one) == hash(_twin(one))


@pytest.mark.parametrize("one", CASES, ids=repr)
def test_repr_is_the_generated_one(one: Thresholds) -> None:
    assert repr(one) == repr(_twin(one))


def test_other_types_are_not_equal_and_frozen_stays() -> None:
    assert Thresholds().__eq__(_twin(Thresholds())) is NotImplemented
    assert Thresholds() != _twin(Thresholds())
    assert Thresholds() != {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        Thresholds().spike_sigma = 4.0  # type: ignore[misc]
    assert {Thresholds(): 1}[Thresholds()] == 1
    assert Thresholds.__dataclass_params__.frozen  # type: ignore[attr-defined]
