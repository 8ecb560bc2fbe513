"""The shared number spelling: what the rank messages, the rank table and the HTML hovers print."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stabilitycli.core import numfmt


@pytest.mark.parametrize(
    ("value", "sign", "text"),
    [
        (2.345678, False, "2.346"),
        (40.0, False, "40"),
        (123456.0, False, "1.235e+05"),
        (0.000123456, False, "0.0001235"),
        (0.25, True, "+0.25"),
        (-1.23456, True, "-1.23"),
        (math.nan, False, "NaN"),
        (math.inf, True, "+Inf"),
        (-math.inf, False, "-Inf"),
        (np.float32(1.5), False, "1.5"),
        (np.float64("nan"), True, "NaN"),
    ],
)
def test_number(value: float, sign: bool, text: str) -> None:
    assert numfmt.number(value, sign) == text


def test_nonfinite_keeps_the_sign_of_inf() -> None:
    assert [numfmt.nonfinite(v) for v in (math.nan, math.inf, -math.inf)] == ["NaN", "+Inf", "-Inf"]


def test_step_runs_joins_consecutive_steps():
    from stabilitycli.core.numfmt import step_runs

    assert step_runs([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    assert step_runs([40]) == "40"
    assert step_runs([]) == ""
