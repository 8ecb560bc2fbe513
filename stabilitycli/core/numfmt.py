"""Numbers written for people: the spelling of NaN and Inf, and how many digits.

The rank check's messages, the rank table and the HTML hover labels all print
the same value the same way, so a number quoted in one can be found in the
other. Formatters that print differently on purpose (the post-mortem's `Inf`
without a sign, the compare table's 3 digits) stay with their renderers.
"""

from __future__ import annotations

import math


def nonfinite(value: float) -> str:
    """'NaN', '+Inf' or '-Inf': the words the logs themselves use, signed so -Inf stands out."""
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def number(value: float, sign: bool = False) -> str:
    """4 significant digits (3 with an explicit sign, for differences); NaN/Inf spelled out."""
    if not math.isfinite(value):
        return nonfinite(value)
    return f"{value:+.3g}" if sign else f"{value:.4g}"


def step_runs(steps: list[int]) -> str:
    """'1-3, 7': sorted steps, each run of consecutive ones as its two ends."""
    runs: list[list[int]] = []
    for step in steps:  # a loop over the few steps a sentence names, not over rows
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
