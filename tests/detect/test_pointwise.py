"""The spike rule's lazily computed series give, at any rows, exactly the numbers of the
whole-series computation they replace (NaN and Inf included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli.detect.pointwise import Ratio, RelativeChange

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
    ):
        assert len(lazy) == x.size
        assert same(lazy[:], whole)
        i = data.draw(st.integers(-x.size, x.size - 1))
        assert same(lazy[i], whole[i]) and np.ndim(lazy[i]) == 0
        a, b = sorted(data.draw(st.lists(st.integers(0, x.size), min_size=2, max_size=2)))
        assert same(lazy[a:b], whole[a:b])
        rows = np.array(
            data.draw(st.lists(st.integers(0, x.size - 1), max_size=12)), dtype=np.int64
        )
        assert same(lazy[rows], whole[rows])
        grid = np.resize(rows, (3, rows.size // 3)) if rows.size >= 3 else rows.reshape(1, -1)
        assert same(lazy[grid], whole[grid])


def test_lazy_series_refuse_a_non_integer_key():
    with pytest.raises(TypeError, match="integers"):
        RelativeChange(np.ones(3))[np.array([0.5])]
