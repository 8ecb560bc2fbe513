"""`frame.plain_numpy` gives what numpy and polars give, to the bit (start-up, #40): on
random small arrays with NaN, infinities, signed zeros, ties and values near overflow."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
import pytest

from stabilitycli.frame import plain_numpy

SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308)


def _floats(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    values = rng.normal(size=shape).astype(dtype)
    if rng.random() < 0.5:
        values = np.round(values, 1)  # ties
    for special in SPECIALS:
        values[rng.random(size=shape) < rng.random() * 0.3] = special
    return values


def _same(want: object, got: object) -> bool:
    want, got = np.asarray(want), np.asarray(got)
    return want.dtype == got.dtype and want.shape == got.shape and want.tobytes() == got.tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_medians_are_numpys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row of NaN only: numpy warns
        for trial in range(400):
            dtype = np.float32 if trial % 5 == 0 else np.float64
            shape = tuple(int(n) for n in rng.integers(1, 10, size=2 + trial % 2))
            values = _floats(rng, shape, dtype)
            axis = int(rng.integers(0, len(shape)))
            assert _same(np.nanmedian(values, axis=axis), plain_numpy.nanmedian(values, axis))
            flat = values.ravel()
            assert _same(np.median(flat), plain_numpy.median(flat))
            before = flat.copy()
            plain_numpy.median(flat, overwrite_input=True)
            assert np.array_equal(flat, before, equal_nan=True)  # a small array is left as it was


@pytest.mark.parametrize("seed", range(4))
def test_sets_and_series_are_numpys_and_polars(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        values = rng.integers(-6, 6, size=int(rng.integers(0, 30)))
        taken = rng.integers(-6, 6, size=int(rng.integers(0, 8))).astype(np.int32)
        assert _same(np.unique(values), plain_numpy.unique(values))
        assert _same(np.setdiff1d(values, taken), plain_numpy.setdiff(values, taken))
        floats = _floats(rng, (int(rng.integers(0, 30)),), np.float64)
        for array in (floats, values, values.astype(np.uint32), values > 0):
            want, got = pl.Series("v", array), plain_numpy.series(array, "v")
            assert want.dtype == got.dtype and want.null_count() == got.null_count() == 0
            assert _same(want.to_numpy(), got.to_numpy())
        frame = plain_numpy.frame({"a": floats, "b": floats[::-1].copy()})
        assert frame.equals(pl.DataFrame({"a": floats, "b": floats[::-1].copy()}))


def test_large_arrays_go_to_numpy() -> None:
    # past the bound numpy does it all (the helpers only repeat its answer)
    values = np.arange(plain_numpy.SMALL_ARRAY_ITEMS + 1, dtype=np.float64)[::-1].copy()
    assert plain_numpy.median(values) == np.median(values)
    assert _same(plain_numpy.unique(values.astype(np.int64)), np.arange(values.size))
