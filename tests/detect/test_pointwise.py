"""The rules' lazily computed series give, at any rows, exactly the numbers of the
whole-series computation they replace (NaN and Inf included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli.detect.pointwise import ForwardChange, Ratio, RelativeChange, Rise

values_strategy = st.lists(
    st.one_of(
        st.floats(-1e6, 1e6, allow_nan=False),
        st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf]),
    ),
    min_size=1,
    max_size=80,
)


def whole_ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.divide(top, bottom)
    out[~np.isfinite(top)] = np.nan
    return out


def whole_relative_change(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.size)
    out[:1] = 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.subtract(values[1:], values[:-1], out=out[1:])
        np.divide(out[1:], np.abs(values[:-1]), out=out[1:])
    return out


def whole_forward_change(values: np.ndarray) -> np.ndarray:
    """What the lr-jump rule computed over the whole LR before it went lazy."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(values[:-1] > 0, np.diff(values) / values[:-1], 0.0)


def whole_rise(values: np.ndarray) -> np.ndarray:
    """What the lr-increasing rule computed over the whole LR before it went lazy."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.concatenate(([0.0], np.maximum(np.diff(values), 0.0)))


def same(a, b) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@settings(max_examples=150, deadline=None)
@given(values_strategy, st.data())
def test_lazy_series_equal_the_whole_series_at_every_kind_of_key(values, data):
    x = np.array(values, dtype=np.float64)
    y = np.array(data.draw(st.permutations(values)), dtype=np.float64)
    for lazy, whole in (
        (Ratio(x, y), whole_ratio(x, y)),
        (RelativeChange(x), whole_relative_change(x)),
        (ForwardChange(x), whole_forward_change(x)),
        (ForwardChange(x, magnitude=True), np.abs(whole_forward_change(x))),
        (Rise(x), whole_rise(x)),
    ):
        assert len(lazy) == whole.size
        assert same(lazy[:], whole)
        if whole.size == 0:
            continue
        i = data.draw(st.integers(-whole.size, whole.size - 1))
        assert same(lazy[i], whole[i]) and np.ndim(lazy[i]) == 0
        a, b = sorted(data.draw(st.lists(st.integers(0, whole.size), min_size=2, max_size=2)))
        assert same(lazy[a:b], whole[a:b])
        rows = np.array(
            data.draw(st.lists(st.integers(0, whole.size - 1), max_size=12)), dtype=np.int64
        )
        assert same(lazy[rows], whole[rows])
        grid = np.resize(rows, (3, rows.size // 3)) if rows.size >= 3 else rows.reshape(1, -1)
        assert same(lazy[grid], whole[grid])


def test_lazy_series_refuse_a_non_integer_key():
    with pytest.raises(TypeError, match="integers"):
        RelativeChange(np.ones(3))[np.array([0.5])]
