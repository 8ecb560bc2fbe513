"""`key: value`, `key=value` and `key value` fields on one cleaned line of trainer stdout.

One regex finds every field: a key of one to six words (`loss`, `train loss`,
`Learning Rate`, `approx flops per GPU`, `mfu(%)`), a separator (`:`, `=` or
spaces) and a number, optionally `/total` (`step:2068/20344`) and a unit
(`330.12ms`, `31.2%`, `5.20GiB`, `123.45 ms`). A key starts a word, so the
`m` of `54m 11s` is not a key; a number followed by `:digit` is a clock
(`0:01:00`), not a value. A number glued to a unit stab does not read
(`5.7TFLOPS`, `1d`) skips that field only.
"""

from __future__ import annotations

import re

from stabilitycli.core.records import dataclass
from stabilitycli.ingest.text import _textline as tx

_NUM = (
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|\.\d+(?:[eE][-+]?\d+)?|nan|infinity|inf)"
)
# a word that stands for a missing value (`loss n/a lr 0.1`) is never part of a key: a key
# of several words would otherwise swallow it and the key before it ("loss n/a lr" = 0.1)
_NO_VALUE = r"(?!(?:n/a|na|none|null|nil|nan)(?![\w./%-]))"
_WORD = rf"{_NO_VALUE}[A-Za-z_][\w./%-]*"
FIELD = re.compile(
    rf"(?<![\w.%/-])(?P<key>{_WORD}(?: (?:{_WORD}|\([\w%/. ]+\))){{0,5}}?)"
    rf"\s*(?:[:=]\s*|\s+)(?P<val>{_NUM})(?:/(?P<total>\d+))?"
    r"(?:(?P<unit>[A-Za-z%]+)| (?P<spaced>ms|s|GiB|GB|MiB|MB)\b)?"
    r"(?![\w.]|:\d)",
    re.IGNORECASE,
)
# a logger's `%(filename)s:%(lineno)d` looks like `key:value`
_SOURCE_FILES = (".py", ".cc", ".cpp", ".cu", ".c", ".h", ".rs", ".go", ".java")
# the keys that say which step a record is, strongest first (normalised: lower case)
STEP_KEYS = ("global_step", "num_updates", "step", "iteration", "iter", "it")
EPOCH_KEY = "epoch"
AXES = (*STEP_KEYS, EPOCH_KEY)


class Fields:
    """The numeric fields of one line, its step, and the fields skipped for their value."""

    __slots__ = ("axes", "metrics", "skipped")

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.axes: dict[str, tuple[float, int | None]] = {}  # key -> (value, total)
        self.skipped: list[str] = []

    def step(self) -> int | None:
        """The step, None when the line names none or one that is no whole number
        (`iteration 0.5/...`: never step 0)."""
        for key in STEP_KEYS:
            if key in self.axes:
                value = self.axes[key][0]
                return int(value) if float(value).is_integer() else None
        return None

    def names_a_step(self) -> bool:
        return any(key in self.axes for key in STEP_KEYS)


def fields(line: str) -> Fields:
    return _slow(line)[0]


def _slow(line: str) -> tuple[Fields, list[tuple[int, int, str | None, str]]]:
    """The fields, and the span of each value with the field it fills (None: skipped)."""
    out = Fields()
    spans: list[tuple[int, int, str | None, str]] = []
    for m in FIELD.finditer(line):
        key = " ".join(m.group("key").split())
        if key.endswith(_SOURCE_FILES):
            continue  # `train.py:123`: where a logger call is, not a field
        unit = m.group("unit") or m.group("spaced")
        name, known = tx.keyed(key, unit)
        tail = line[m.end("val") : m.end()]  # `/20344`, `ms`, ` ms` as written
        # `_line`, `_kind`...: the reader's own columns; such a key would overwrite them
        if not known or key.startswith("_"):
            out.skipped.append(key)
            spans.append((m.start("val"), m.end(), None, key))
            continue
        number = tx.value(m.group("val"))
        lower = name.lower()
        if lower in AXES:
            # an axis past the 64-bit range (a damaged line's run of digits) is no step
            if lower in out.axes or number != number or not abs(number) < 2**63:
                continue
            total = m.group("total")
            out.axes[lower] = (number, int(total) if total and len(total) <= 18 else None)
            spans.append((m.start("val"), m.end(), "axis:" + lower, tail))
            continue
        if name in out.metrics:
            continue
        out.metrics[name] = number
        spans.append((m.start("val"), m.end(), name, tail))
    return out, spans


# A number token, the same for both regex engines (Python's `re` here, polars' Rust `regex`
# over a whole log): lines of one shape have their tokens in the same places.
TOKEN = (
    r"[-+]?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
    r"|[nN][aA][nN]|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?"
)
TOKEN_RE = re.compile(TOKEN)


@dataclass(frozen=True)
class Shape:
    """Where each field's value is among the number tokens of a line of this shape.

    Lines of one shape (the same text once digits and blank runs are set
    aside) hold their number tokens in the same order, so the value of a
    field is token `index` of every such line. `roles`: `axis:<key>` or a
    metric name, per index; `skipped`: the keys of fields skipped there.
    """

    tokens: int
    indices: tuple[int, ...]
    roles: tuple[str, ...]
    skipped: tuple[str, ...]


def shape_of(line: str) -> tuple[Fields, Shape | None]:
    """The fields of a line and the shape of lines like it (None: no field, or no shape)."""
    found, spans = _slow(line)
    if not spans:
        return found, None
    starts = {m.start(): i for i, m in enumerate(TOKEN_RE.finditer(line))}
    indices, roles, skipped = [], [], []
    for start, _end, role, extra in spans:
        if role is None:
            skipped.append(extra)
            continue
        if start not in starts:
            return found, None  # a value the tokens split otherwise: read line by line
        indices.append(starts[start])
        roles.append(role)
    return found, Shape(len(starts), tuple(indices), tuple(roles), tuple(skipped))
