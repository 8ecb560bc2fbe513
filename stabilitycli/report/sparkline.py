"""Unicode sparklines for a terminal: one character per bucket."""

from __future__ import annotations

import math

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], marks: set[int] | None = None) -> str:
    """A sparkline; non-finite buckets show as '×', `marks` (bucket indices) as '▲' markers."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "×" * len(values)
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    chars = []
    for v in values:
        if v is None or not math.isfinite(v):
            chars.append("×")
        else:
            chars.append(_BARS[min(len(_BARS) - 1, int((v - low) / span * (len(_BARS) - 1) + 0.5))])
    return "".join(chars)
