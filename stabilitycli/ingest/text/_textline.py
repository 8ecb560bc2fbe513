"""What surrounds a record on a line of pasted or captured stdout, and how to take it away.

A trainer prints `iter 3010: loss nan, time 1019.95ms`; what reaches stab is
that line behind whatever the way there added: a Markdown quote marker (`> `)
from a GitHub issue, a timestamp the user's shell or logger put in front, a
launcher tag (`[rank3]:`, `[default7]:`, `0: `), ANSI colours (torchtitan
colours every field), and tqdm progress bars that share the physical line
with a record through carriage returns. Nothing here knows a trainer: it
turns one physical line into the logical lines a terminal would have shown,
cleaned of those wrappers, and reads a logged number with its unit.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves) and OSC titles. The patterns are written for
# both regex engines (Python's `re` line by line, polars' Rust `regex` vectorised).
ANSI_PATTERN = r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07"
# Wrappers in front of a record, repeated in any order (a quoted, timestamped, tagged line).
PREFIX_PATTERN = (
    r"^(?:\s*(?:"
    r">+"  # Markdown quote markers
    r"|\[(?:default|rank)\d+\]:"  # torchrun --tee / --log-prefix
    r"|\[\d+,\d+\]<std(?:out|err)>:"  # Open MPI --tag-output
    r"|\d{1,5}:\s"  # srun -l
    r"|\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?"
    r"|\[[A-Za-z_]+\]"  # a logger's name tag: torchtitan's `[titan]`
    r"|-\s*[\w.]+\s*-\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*-"  # `- root - INFO -`
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:"  # logging.basicConfig: `INFO:root:`
    r"))+\s*"
)
# the rank a launcher tag names: torchrun's `[rank3]:` / `[default3]:`, Open MPI's `[1,3]<stdout>:`
# the rank: 1-9 ASCII digits (a damaged tag of thousands is no rank an Int64 column holds)
RANK_PATTERN = r"^\s*(?:>+\s*)?\[(?:default|rank|\d+,)([0-9]{1,9})\]"
_ANSI = re.compile(ANSI_PATTERN)
_RANK = re.compile(RANK_PATTERN)
_PREFIX = re.compile(PREFIX_PATTERN)
# keras writes `\b` runs to redraw its bar in place, as tqdm writes `\r`
_REDRAW = re.compile(r"[\r\b]+")


def logical_lines(line: str) -> list[str]:
    """The segments a terminal shows one after another on this physical line, cleaned.

    Empty segments (a bar cleared with spaces) are dropped; a line without
    carriage returns is one segment.
    """
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line or "\b" in line:
        parts = [strip_prefix(p) for p in _REDRAW.split(line)]
        return [p for p in parts if p.strip()]
    return [strip_prefix(line)]


def rank_of(line: str) -> int | None:
    """The rank a launcher tag in front of the line names, or None."""
    match = _RANK.match(line)
    return int(match.group(1)) if match else None


def strip_prefix(line: str) -> str:
    match = _PREFIX.match(line)
    return line[match.end() :] if match else line


# Units read as part of a value; anything else glued to a number (`5.7TFLOPS`,
# `1d`) makes the field unreadable and it is skipped, not guessed.
UNITS = {"ms": "ms", "s": "s", "%": "%", "gib": "GiB", "gb": "GB", "mib": "MiB", "mb": "MB"}


def value(text: str) -> float:
    """A logged number: `nan`, `-inf`, `1.0E+00`, `1,234` (thousands) all read; else ValueError."""
    return float(text.replace(",", "") if "," in text else text)


def keyed(key: str, unit: str | None) -> tuple[str, bool]:
    """The column name for a field and whether its unit is one stab reads.

    A known unit is kept in the name (`time (ms)`), as Megatron names
    `elapsed time per iteration (ms)`, so that a value is never read in the
    wrong unit.
    """
    if not unit:
        return key, True
    known = UNITS.get(unit.lower())
    if known is None:
        return key, False
    return f"{key} ({known})", True
