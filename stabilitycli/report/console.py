"""The one place that decides how terminal output is laid out for where it lands.

A terminal gets rich's panels at its own width, in colour. A pipe or a file (a CI log,
`| less`, `> out.txt`) has no width to fit: it gets plain lines of at most
`PLAIN_WIDTH` columns, tables only as wide as their content, no panel borders and no
trailing padding, unless `COLUMNS` or `stab --width` names a width (then the panels are
laid out at that width, as on a terminal of that size). Colour only on a terminal;
`NO_COLOR` turns it off and `FORCE_COLOR` on (for CI logs that show ANSI colours).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, TextIO

from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

# prose in a pipe wraps here: a CI log viewer, a PR diff and `less` all show 100 columns
PLAIN_WIDTH = 100

# set while output for a pipe or a file is rendered: panels give way to plain lines
# (`layout.Boxed`)
PLAIN: ContextVar[bool] = ContextVar("stab_plain_layout", default=False)

# `stab --width N`, set by the app callback for this invocation
WIDTH: ContextVar[int | None] = ContextVar("stab_width", default=None)

# spaces left at the end of a line (before any closing colour codes) by rich's padding
_TRAILING = r"[ ]+((?:\x1b\[[0-9;]*m)*)$"


@functools.cache
def _trailing() -> re.Pattern[str]:
    # compiled at the first coloured text: plain text never asks it (start-up, #40)
    return re.compile(_TRAILING, re.MULTILINE)


@dataclass(frozen=True)
class Medium:
    """How output is laid out: `width` in columns (None: the terminal's own), panels or
    plain lines, colour or none."""

    width: int | None
    panels: bool
    colour: bool


def medium(
    stream: TextIO | None = None, width: int | None = None, env: Mapping[str, str] | None = None
) -> Medium:
    """The medium of `stream` (stdout by default): a terminal, or a pipe/file; `width` (or
    `stab --width`, else `COLUMNS`) names a width and keeps the panels."""
    stream = sys.stdout if stream is None else stream
    env = os.environ if env is None else env
    tty = _isatty(stream)
    asked = width or WIDTH.get() or _columns(env)
    colour = not env.get("NO_COLOR") and (tty or bool(env.get("FORCE_COLOR")))
    if tty or asked:
        return Medium(asked, panels=True, colour=colour)
    return Medium(PLAIN_WIDTH, panels=False, colour=colour)


def console(where: Medium, stderr: bool = False, file: TextIO | None = None) -> Console:
    """A rich console for `where`. No markup or emoji codes: every string in a renderable
    is shown as written, so a run, metric or layer name holding `[/]` or `:x:` is text,
    never a style or a crash."""
    from rich.console import Console

    return Console(
        file=file,
        stderr=stderr,
        width=where.width,
        force_terminal=True if where.colour else None,
        color_system="auto" if where.colour else None,
        no_color=not where.colour,
        markup=False,
        emoji=False,
    )


def render_text(rendered: RenderableType, where: Medium) -> str:
    """`rendered` as the text `where` shows: panels or plain lines, without trailing spaces."""
    out = console(where)
    token = PLAIN.set(not where.panels)
    try:
        with out.capture() as captured:
            # a table of paths may run past the width in a pipe (`layout.Natural`): not cut
            out.print(rendered, crop=where.panels)
    finally:
        PLAIN.reset(token)
    return _without_trailing_spaces(captured.get())


def _without_trailing_spaces(text: str) -> str:
    """Each line of `text` without the spaces at its end (before any closing colour codes).
    Without colour codes, each line stripped: the pattern, which tries every space of a
    cell's padding and backtracks over the rest of it, took some 13 million instructions
    on a small `stab analyze`'s plain text (#40); the same text."""
    if "\x1b" in text:
        return _trailing().sub(r"\1", text)
    return "\n".join(line.rstrip(" ") for line in text.split("\n"))


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream is not a terminal
        return False


def _columns(env: Mapping[str, str]) -> int | None:
    value = env.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
