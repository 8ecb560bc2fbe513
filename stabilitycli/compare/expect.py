"""`--expect` checks: a tiny grammar of our own, parsed by hand (never `eval`).

    check  := [SIDE ':'] (point | aggregate) OP NUMBER
    SIDE   := 'candidate' | 'baseline'           (default: candidate)
    point  := METRIC '@' STEP                      loss@312 < 2.5
    aggregate := AGG '(' METRIC ')' ['[' [STEP] ':' [STEP] ']']
                                                   max(grad_norm)[300:400] < 3.0
    AGG    := max | min | mean | last
    OP     := <  <=  >  >=  ==
    NUMBER := a decimal or exponent number, or inf / -inf

Steps are optimizer steps (whatever the compare x-axis), a range `[A:B]`
includes both ends and either end may be left out. A check reads the raw
logged values: no smoothing, no interpolation. A NaN or Inf inside the range
makes `max`/`min`/`mean` non-finite, so `max(loss)[0:500] < 3` fails on a NaN,
as a verification should. Whitespace is allowed between tokens.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.records import dataclass

AGGREGATES = ("max", "min", "mean", "last")
SIDES = ("candidate", "baseline")
# longest first, so '<=' is not read as '<' followed by '='
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
# metric names as logged: canonical (`grad_norm`) or raw (`act_norm/h.0.attn`, `lm-loss`)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]*")
_INT = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(?:inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", re.IGNORECASE)


# every --expect error ends with what is allowed, so the fix needs no trip to the docs
FORMS = (
    "a check is METRIC@STEP OP NUMBER or AGG(METRIC)[A:B] OP NUMBER, "
    f"AGG one of {', '.join(AGGREGATES)}, OP one of < <= > >= =="
)


class ExpectSyntaxError(StabUsageError):
    """A malformed --expect expression; `position` is the 1-based column of the problem."""

    def __init__(self, expression: str, position: int, reason: str):
        self.expression = expression
        self.position = position
        self.reason = reason
        super().__init__(f"--expect {expression!r}: {reason} at column {position} ({FORMS})")


@dataclass(frozen=True)
class Check:
    """One parsed check. `start`/`end` are inclusive steps; `at` is set for a point check."""

    text: str
    side: str
    metric: str
    aggregate: str | None
    at: int | None
    start: int | None
    end: int | None
    op: str
    threshold: float

    @property
    def target(self) -> str:
        """The left-hand side as written canonically, e.g. `max(grad_norm)[300:400]`."""
        if self.aggregate is None:
            return f"{self.metric}@{self.at}"
        span = (
            ""
            if self.start is None and self.end is None
            else (
                f"[{'' if self.start is None else self.start}"
                f":{'' if self.end is None else self.end}]"
            )
        )
        return f"{self.aggregate}({self.metric}){span}"

    def evaluate(self, steps: Any, values: Any) -> CheckResult:
        """Evaluate on one series.

        `steps` (int64) and `values` (float64, NaN/Inf kept) where logged."""
        import numpy as np

        steps = np.asarray(steps)
        values = np.asarray(values, dtype=np.float64)
        if self.aggregate is None:
            assert self.at is not None  # a point check always names its step
            hits = np.flatnonzero(steps == self.at)
            if hits.size == 0:
                return self._result(None, False, _missing_step(self.at, steps))
            value = float(values[hits[-1]])
        else:
            lo = -np.inf if self.start is None else self.start
            hi = np.inf if self.end is None else self.end
            chosen = values[(steps >= lo) & (steps <= hi)]
            if chosen.size == 0:
                return self._result(
                    None, False, f"no {self.metric} value logged in steps {self._span_text()}"
                )
            value = _aggregate(self.aggregate, chosen)
        holds = bool(_OPERATORS[self.op](value, self.threshold)) if not math.isnan(value) else False
        reason = "" if holds else ("the value is NaN" if math.isnan(value) else "")
        return self._result(value, holds, reason)

    def _span_text(self) -> str:
        return (
            f"[{'start' if self.start is None else self.start}, "
            f"{'end' if self.end is None else self.end}]"
        )

    def _result(self, value: float | None, holds: bool, reason: str) -> CheckResult:
        return CheckResult(check=self, value=value, holds=holds, reason=reason)


@dataclass(frozen=True)
class CheckResult:
    check: Check
    value: float | None
    holds: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        from stabilitycli.core.model import jsonable

        c = self.check
        return jsonable(
            {
                "expression": c.text,
                "side": c.side,
                "metric": c.metric,
                "aggregate": c.aggregate,
                "step": c.at,
                "start": c.start,
                "end": c.end,
                "op": c.op,
                "threshold": c.threshold,
                "value": self.value,
                "holds": self.holds,
                "reason": self.reason or None,
            }
        )


def _aggregate(name: str, values: Any) -> float:
    import numpy as np

    if name == "last":
        return float(values[-1])
    # NaN propagates through max/min/mean on purpose: a NaN in the window is a failed check
    if np.isnan(values).any():
        return math.nan
    reducers: dict[str, Callable[[Any], Any]] = {"max": np.max, "min": np.min, "mean": np.mean}
    return float(reducers[name](values))


def _missing_step(step: int, steps: Any) -> str:
    if steps.size == 0:
        return "the metric is never logged"
    import numpy as np

    i = int(np.searchsorted(steps, step))
    near = sorted({int(steps[j]) for j in (i - 1, i) if 0 <= j < steps.size})
    return f"no value logged at step {step} (nearest logged: {', '.join(map(str, near))})"


class _Cursor:
    """A position in the expression; errors name the 1-based column."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self, literal: str) -> bool:
        self.skip_space()
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def need(self, literal: str, what: str) -> None:
        if not self.take(literal):
            self.fail(f"expected {what}")

    def match(self, pattern: re.Pattern[str]) -> str | None:
        self.skip_space()
        found = pattern.match(self.text, self.pos)
        if found is None:
            return None
        self.pos = found.end()
        return found.group(0)

    def fail(self, reason: str) -> None:
        self.skip_space()
        got = self.text[self.pos : self.pos + 12]
        suffix = f", found {got!r}" if got else ", found the end of the expression"
        raise ExpectSyntaxError(self.text, self.pos + 1, reason + suffix)


def parse_expect(text: str) -> Check:
    """Parse one `--expect` expression; raise `ExpectSyntaxError` (a usage error) if malformed."""
    cur = _Cursor(text)
    if not text.strip():
        raise ExpectSyntaxError(text, 1, "empty expression")
    side = "candidate"
    name = cur.match(_NAME)
    if name is None:
        cur.fail("expected a metric name, max(...), min(...), mean(...) or last(...)")
    if name in SIDES and cur.take(":"):
        side = name
        name = cur.match(_NAME)
        if name is None:
            cur.fail(f"expected a metric name after '{side}:'")
    assert name is not None
    aggregate = at = start = end = None
    if name not in AGGREGATES and cur.peek() == "(":
        cur.fail(f"{name!r} is not an aggregate stab knows")
    if name in AGGREGATES and cur.peek() == "(":
        aggregate = name
        cur.need("(", "'('")
        metric = cur.match(_NAME)
        if metric is None:
            cur.fail(f"expected a metric name inside {aggregate}(...)")
        cur.need(")", "')' to close the aggregate")
        cur.skip_space()
        bracket = cur.pos + 1
        if cur.take("["):
            start = _optional_int(cur)
            cur.need(":", "':' between the start and end steps, as in [300:400]")
            end = _optional_int(cur)
            cur.need("]", "']' to close the step range")
            if start is not None and end is not None and end < start:
                raise ExpectSyntaxError(
                    text, bracket, f"empty step range [{start}:{end}] (end before start)"
                )
    else:
        metric = name
        if not cur.take("@"):
            cur.fail(f"expected '@STEP' after {name!r} (or an aggregate like max({name})[A:B])")
        at = _required_int(cur, "a step number after '@'")
    op = _operator(cur)
    number = cur.match(_NUMBER)
    if number is None:
        cur.fail("expected a number after the operator")
    cur.skip_space()
    if cur.pos != len(text):
        cur.fail("unexpected text after the number")
    assert metric is not None and number is not None
    return Check(
        text=text.strip(),
        side=side,
        metric=metric,
        aggregate=aggregate,
        at=at,
        start=start,
        end=end,
        op=op,
        threshold=float(number),
    )


def _operator(cur: _Cursor) -> str:
    for op in _OPERATORS:
        if cur.take(op):
            return op
    cur.fail("expected a comparison operator (< <= > >= ==)")
    raise AssertionError("unreachable")


def _optional_int(cur: _Cursor) -> int | None:
    found = cur.match(_INT)
    return None if found is None else int(found)


def _required_int(cur: _Cursor, what: str) -> int:
    found = cur.match(_INT)
    if found is None:
        cur.fail(f"expected {what}")
    assert found is not None
    return int(found)
