"""The `stab` command's entry point (the console script and `python -m stabilitycli`).

It only sets how often the garbage collector runs, then hands over to `cli.main()`. Set
here, before typer, click and the CLI's modules are imported, and not in `cli`: at the
default threshold the collector ran while they were imported, each pass scanning objects
that all survive (some 12 million instructions of a small `stab analyze`). A library
caller (`from stabilitycli import analyze`) never runs this and keeps its own collector.
"""

from __future__ import annotations

import gc

# Start-up builds some 10^5 objects that live as long as the process (modules, classes, the
# functions dataclasses generate) and leaves almost no cyclic garbage. At the default first
# threshold (700 new objects) the collector ran ~130 times while `stab analyze` of a small
# log started, each pass scanning objects that would all survive: 10-15% of that command's
# time. Past this threshold a small run collects not once; a large one's data lives in
# polars and numpy buffers, freed by reference counting, not by the collector.
GC_FIRST_THRESHOLD = 100_000


def collect_less() -> None:
    """Raise the collector's first threshold to `GC_FIRST_THRESHOLD` (the others as they are)."""
    gc.set_threshold(GC_FIRST_THRESHOLD, *gc.get_threshold()[1:])


def main() -> None:
    collect_less()
    from stabilitycli.cli import main as run

    run()
