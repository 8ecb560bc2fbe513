"""Terminal layout shared by the rich renderers: hanging bullets, paths and sparklines that fit.

rich wraps a `Text` at the console width back to column 0 and cuts a panel's title or
subtitle mid-word. What is drawn here knows its width only when it is rendered, so the
path and the sparkline are renderables that fit themselves then, and measure at their
full size (a piped console is as wide as the widest line: nothing is shortened there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
from rich.cells import cell_len
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from stabilitycli.report.console import PLAIN

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.measure import Measurement

ELLIPSIS = "…"
_SEPARATORS = "/\\"


def bullets(heading: str, items: Iterable[str], style: str, mark: str = "•") -> Group:
    """`heading:` then one item a line, each wrapped under its own text, not under the mark.

    Items are plain strings (already escaped for the terminal), never parsed as markup."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row(Text(mark, style=style), Text(item, style=style))
    return Group(Text(heading, style=style), Padding(grid, (0, 0, 0, 2)))


def elide_path(path: str, width_cells: int) -> str:
    """`path` if it fits in `width_cells`, else its tail after a separator behind an ellipsis
    (`…/seed-17/run.jsonl`): the file name and the folders nearest it are what tell runs
    apart. A file name alone too long to fit keeps its end."""
    if cell_len(path) <= width_cells:
        return path
    cuts = [i for i, char in enumerate(path) if char in _SEPARATORS]
    for cut in cuts:  # a loop over the separators of one path, shortest tail last
        tail = ELLIPSIS + path[cut:]
        if cell_len(tail) <= width_cells:
            return tail
    keep = max(1, width_cells - 1)
    return ELLIPSIS + path[-keep:]


class Fitted:
    """A renderable made for the width it is given: `make(None)` is its full-size form
    (what it measures as), `make(width_cells)` one that fits in that many cells."""

    def __init__(self, make: Callable[[int | None], RenderableType]) -> None:
        self.make = make

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.make(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.make(None))


def merge_buckets(values: list[float], buckets: int) -> tuple[list[float], list[int]]:
    """`values` (each a bucket's maximum) merged into at most `buckets` buckets: the maximum of
    each group, NaN if any member is NaN (a non-finite bucket stays visible), and the index of
    each group's first member."""
    if len(values) <= buckets:
        return list(values), list(range(len(values)))
    starts = np.linspace(0, len(values), max(1, buckets) + 1).astype(int)[:-1]
    merged = np.maximum.reduceat(np.asarray(values, dtype=float), starts)
    return [float(v) for v in merged], [int(s) for s in starts]


class Boxed:
    """`boxed` (a panel) on a terminal, `plain` (the same lines without a border) in a pipe
    or a file, where a border padded to the widest line is noise in a log."""

    def __init__(self, boxed: RenderableType, plain: RenderableType) -> None:
        self.boxed = boxed
        self.plain = plain

    def _chosen(self) -> RenderableType:
        return self.plain if PLAIN.get() else self.boxed

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._chosen()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self._chosen())


class Natural:
    """A table of names and numbers (a run's path, a verdict, a step): in a pipe it is laid
    out as wide as its content, never folding a path to fit 100 columns (its rows are the
    only lines that may run past them); on a terminal it fits the terminal."""

    def __init__(self, table: RenderableType) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.measure import Measurement

        if not PLAIN.get():
            yield self.table
            return
        natural = Measurement.get(console, options.update_width(10_000), self.table).maximum
        yield from console.render(self.table, options.update_width(max(natural, 1)))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.table)


class Widest:
    """`wide` where the console can hold it without cutting a word (a table whose columns
    would otherwise be cut to `5.9…`), else `narrow`: the same content laid out to wrap.

    `probe`, if given, is measured in place of `wide`: a table whose one folding column
    (a run's path) should not count towards its minimum."""

    def __init__(
        self, wide: RenderableType, narrow: RenderableType, probe: RenderableType | None = None
    ) -> None:
        self.wide = wide
        self.narrow = narrow
        self.probe = wide if probe is None else probe

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.measure import Measurement

        # measured unbounded: a measurement is clamped to the width it is given
        unbounded = options.update_width(10_000)
        fits = Measurement.get(console, unbounded, self.probe).minimum <= options.max_width
        # in a pipe a table may run past the width by its content (`Natural`)
        yield self.wide if fits or PLAIN.get() else self.narrow

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.wide)


class Hanging:
    """A paragraph whose second and later lines are indented: one of a list of sentences
    (a legend, a per-rank effect) that would otherwise run into the next at column 0."""

    def __init__(self, text: Text, indent_cells: int = 2) -> None:
        self.text = text
        self.indent_cells = indent_cells

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self.text.wrap(console, max(1, options.max_width - self.indent_cells))
        for i, line in enumerate(lines):
            yield Text(" " * self.indent_cells) + line if i else line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.text)
