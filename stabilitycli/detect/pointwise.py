"""Per-point series computed only where they are read.

The spike rule asks for the grad norm's ratio to its trailing mean and the LR's
relative change at a few hundred rows (the flagged points' lead windows and the
events), yet building them whole costs a copy of the log each (80 MB at 10M
steps), held for the whole rule. These compute the same numbers, element by
element with the same operations, at the rows asked for: `series[i]`,
`series[a:b]` or `series[rows]` with an array of rows of any shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Pointwise(ABC):
    """A per-point series of `size` points, indexed as an array is."""

    size: int

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key):
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.size))
        rows = np.asarray(key)
        if not np.issubdtype(rows.dtype, np.integer):
            raise TypeError(f"rows must be integers, a slice or an integer array, not {key!r}")
        one = rows.ndim == 0
        rows = np.atleast_1d(np.where(rows < 0, rows + self.size, rows))
        out = self._at(rows)
        return out[0] if one else out

    @abstractmethod
    def _at(self, rows: np.ndarray) -> np.ndarray:
        """The series at `rows`, a one-dimensional or larger array of row indices."""


class Ratio(Pointwise):
    """`numerator / denominator`, NaN wherever the numerator is not finite (an overflowed
    or NaN grad norm is not a long-tail batch)."""

    def __init__(self, numerator: np.ndarray, denominator: np.ndarray | Pointwise):
        self.numerator, self.denominator, self.size = numerator, denominator, numerator.size

    def _at(self, rows: np.ndarray) -> np.ndarray:
        top = self.numerator[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.divide(top, self.denominator[rows])
        out[~np.isfinite(top)] = np.nan
        return out


class RelativeChange(Pointwise):
    """`(values[i] - values[i-1]) / |values[i-1]|`, 0 at the first point."""

    def __init__(self, values: np.ndarray):
        self.values, self.size = values, values.size

    def _at(self, rows: np.ndarray) -> np.ndarray:
        before = self.values[rows - 1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.divide(self.values[rows] - before, np.abs(before))
        out[rows == 0] = 0.0
        return out


class ForwardChange(Pointwise):
    """`(values[i + 1] - values[i]) / values[i]` where values[i] > 0, else 0: the change
    to the next point (one point fewer than `values`); `magnitude`: its absolute value."""

    def __init__(self, values: np.ndarray, *, magnitude: bool = False):
        self.values, self.magnitude, self.size = values, magnitude, max(0, values.size - 1)

    def _at(self, rows: np.ndarray) -> np.ndarray:
        here = self.values[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.where(here > 0, (self.values[rows + 1] - here) / here, 0.0)
        return np.abs(out, out=out) if self.magnitude else out


class Rise(Pointwise):
    """`max(values[i] - values[i - 1], 0)`, 0 at the first point."""

    def __init__(self, values: np.ndarray):
        self.values, self.size = values, values.size

    def _at(self, rows: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.maximum(self.values[rows] - self.values[np.maximum(rows - 1, 0)], 0.0)
        out[rows == 0] = 0.0
        return out


class KeptAt(Pointwise):
    """A series of `size` points kept at `rows` only (sorted), the only rows its rule
    reads it at; any other row is refused rather than made up."""

    def __init__(self, size: int, rows: np.ndarray, values: np.ndarray):
        self.size, self.rows, self.values = size, rows, values

    def _at(self, rows: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.rows, rows)
        kept = at < self.rows.size
        kept[kept] = self.rows[at[kept]] == rows[kept]
        if not kept.all():
            raise IndexError("this series is kept at some rows only, and a row asked is not one")
        return self.values[at]
