"""What a small log's rules ask of numpy and polars, without loading `numpy.ma`.

`import numpy` leaves `numpy.ma` out, and its import was some 10 ms of a small
`stab analyze` (issue #40), but three calls load it: polars' Series of a numpy array (it
asks whether the array is masked), `np.unique` without its index options (the same
question) and `np.nanmedian` along an axis shorter than 600 values (worked out with
`numpy.ma`'s median), and so does `np.median` (its check for NaN). These give the same
values to the bit without it, for an array of up to `SMALL_ARRAY_ITEMS` values (a small
log's); a larger one, or one of another kind, goes to numpy or polars itself, which is
faster there and makes fewer copies, and where that one import is nothing beside the run.
Checked against numpy on random arrays with NaN, infinities, signed zeros and ties
(`tests/frame/test_plain_numpy.py`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

# past this a list (or a sort where numpy partitions) costs more than the import it saves
SMALL_ARRAY_ITEMS = 4096
# numpy's own switch (`_nanfunctions_impl._nanmedian`): from here on it does not use numpy.ma
NUMPY_SMALL_AXIS = 600

_DTYPES: dict[np.dtype, type[pl.DataType]] = {
    np.dtype(np.float64): pl.Float64,
    np.dtype(np.float32): pl.Float32,
    np.dtype(np.int64): pl.Int64,
    np.dtype(np.int32): pl.Int32,
    np.dtype(np.int16): pl.Int16,
    np.dtype(np.int8): pl.Int8,
    np.dtype(np.uint64): pl.UInt64,
    np.dtype(np.uint32): pl.UInt32,
    np.dtype(np.uint16): pl.UInt16,
    np.dtype(np.uint8): pl.UInt8,
    np.dtype(np.bool_): pl.Boolean,
}


def series(values: np.ndarray, name: str = "") -> pl.Series:
    """`pl.Series(name, values)` for a 1-d array: a small one of a plain number type goes
    over as a list of the same values (floats keep their bits, NaN stays NaN, not null)."""
    dtype = _DTYPES.get(values.dtype)
    if dtype is None or values.ndim != 1 or values.size > SMALL_ARRAY_ITEMS:
        return pl.Series(name, values)
    return pl.Series(name, values.tolist(), dtype=dtype)


def frame(columns: dict[str, np.ndarray]) -> pl.DataFrame:
    """`pl.DataFrame(columns)` for 1-d arrays of one length."""
    return pl.DataFrame([series(values, name) for name, values in columns.items()])


def unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` for integers (sorted, each once); other dtypes go to numpy."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" or values.size > SMALL_ARRAY_ITEMS:
        return np.unique(values)
    ordered = np.sort(values, axis=None)
    if ordered.size == 0:
        return ordered
    first = np.empty(ordered.size, dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def nanmedian(values: np.ndarray, axis: int) -> np.ndarray:
    """`np.nanmedian(values, axis=axis)`, along an axis shorter than 600 values worked out
    as numpy does there, step by step: NaN sorted last as +inf by the same `argsort`, the
    two middle values of each row's count (the one middle value twice for an odd count)
    summed and halved, NaN for a row of NaN only. Unlike numpy it does not warn about a
    row of NaN only: every caller silences that warning."""
    values = np.asarray(values)
    if (
        values.ndim < 2
        or values.size == 0
        or values.shape[axis] >= NUMPY_SMALL_AXIS
        or values.dtype.kind != "f"
        or values.size > SMALL_ARRAY_ITEMS
    ):
        return np.nanmedian(values, axis=axis)
    missing = np.isnan(values)
    filled = np.where(missing, np.inf, values)
    ordered = np.take_along_axis(filled, np.argsort(filled, axis=axis), axis=axis)
    counts = np.expand_dims(values.shape[axis] - missing.sum(axis=axis), axis)
    high = counts // 2
    low = np.where(counts % 2 == 1, high, high - 1)
    middle = np.take_along_axis(ordered, np.concatenate([np.maximum(low, 0), high], axis), axis)
    median = middle.sum(axis=axis) / 2.0
    median[np.squeeze(counts, axis) == 0] = np.nan
    return median


def setdiff(values: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """`np.setdiff1d(values, taken)`: its steps, with `unique` above."""
    if np.size(values) + np.size(taken) > SMALL_ARRAY_ITEMS:
        return np.setdiff1d(values, taken)
    values, taken = unique(values), unique(taken)
    return values[np.isin(values, taken, assume_unique=True, invert=True)]


def median(values: np.ndarray, overwrite_input: bool = False) -> np.floating:
    """`np.median(values, overwrite_input=...)` of all the values, as numpy works it out:
    the middle value, or the mean of the two middle ones, of the values in order; NaN (the
    log's own) if any is. A small array is left as it was (numpy may reorder it: no caller
    reads its order after)."""
    values = np.asarray(values)
    if values.dtype.kind != "f" or values.size == 0 or values.size > SMALL_ARRAY_ITEMS:
        return np.median(values, overwrite_input=overwrite_input)
    ordered = np.sort(values, axis=None)  # NaN last
    if np.isnan(ordered[-1]):
        return ordered[-1]
    count = ordered.size
    return ordered[(count - 1) // 2 : count // 2 + 1].mean()
