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


class _Pointwise(ABC):
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


class Ratio(_Pointwise):
    """`numerator / denominator`, NaN wherever the numerator is not finite (an overflowed
    or NaN grad norm is not a long-tail batch)."""

    def __init__(self, numerator: np.ndarray, denominator: np.ndarray):
        self.numerator, self.denominator, self.size = numerator, denominator, numerator.size

    def _at(self, rows: np.ndarray) -> np.ndarray:
        top = self.numerator[rows]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.divide(top, self.denominator[rows])
        out[~np.isfinite(top)] = np.nan
        return out


class RelativeChange(_Pointwise):
    """`(values[i] - values[i-1]) / |values[i-1]|`, 0 at the first point."""

    def __init__(self, values: np.ndarray):
        self.values, self.size = values, values.size

    def _at(self, rows: np.ndarray) -> np.ndarray:
        before = self.values[rows - 1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.divide(self.values[rows] - before, np.abs(before))
        out[rows == 0] = 0.0
        return out
