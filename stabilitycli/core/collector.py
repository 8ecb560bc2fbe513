"""How often the `stab` command's garbage collector runs: the command's choice, never the
library's (a caller of `from stabilitycli import analyze` keeps its own collector).

Start-up builds some 10^5 objects that live as long as the process (modules, classes, the
functions dataclasses generate) and leaves almost no cyclic garbage. At the default first
threshold (700 new objects) the collector ran ~130 times while `stab analyze` of a small
log started, each pass scanning objects that would all survive: 10-15% of that command's
time. Past `GC_FIRST_THRESHOLD` a small run collects not once; a large one's data lives in
polars and numpy buffers, freed by reference counting, not by the collector.
"""

from __future__ import annotations

import gc

GC_FIRST_THRESHOLD = 100_000


def collect_less() -> None:
    """Raise the collector's first threshold to `GC_FIRST_THRESHOLD` (the others as they are)."""
    gc.set_threshold(GC_FIRST_THRESHOLD, *gc.get_threshold()[1:])
