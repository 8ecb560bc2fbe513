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

from stabilitycli.ingest import _textline as tx

_NUM = (
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|\.\d+(?:[eE][-+]?\d+)?|nan|infinity|inf)"
)
_WORD = r"[A-Za-z_][\w./%-]*"
FIELD = re.compile(
    rf"(?<![\w.%/-])(?P<key>{_WORD}(?: (?:{_WORD}|\([\w%/. ]+\))){{0,5}}?)"
    rf"\s*(?:[:=]\s*|\s+)(?P<val>{_NUM})(?:/(?P<total>\d+))?"
    r"(?:(?P<unit>[A-Za-z%]+)| (?P<spaced>ms|s|GiB|GB|MiB|MB)\b)?"
    r"(?![\w.]|:\d)",
    re.IGNORECASE,
)
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
        for key in STEP_KEYS:
            if key in self.axes:
                return int(self.axes[key][0])
        return None


def fields(line: str) -> Fields:
    out = Fields()
    for m in FIELD.finditer(line):
        key = " ".join(m.group("key").split())
        name, known = tx.keyed(key, m.group("unit") or m.group("spaced"))
        if not known:
            out.skipped.append(key)
            continue
        try:
            number = tx.value(m.group("val"))
        except ValueError:  # pragma: no cover - the regex only admits numbers
            out.skipped.append(key)
            continue
        lower = name.lower()
        if lower in AXES:
            if lower not in out.axes and number == number and abs(number) != float("inf"):
                total = m.group("total")
                out.axes[lower] = (number, int(total) if total else None)
            continue
        out.metrics.setdefault(name, number)
    return out
