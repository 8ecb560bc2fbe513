"""Steps written as `N/M` text under a step-like key (ms-swift's `"global_step/max_steps":
"8280/11043"`): N is the step, M the planned length of the run.

Such a record has no numeric step, so without this its rows would be numbered in order
and a NaN at step 8280 reported at step 2. M is no step's value: it is kept in a note
(the source info has no field for a planned length), every distinct M named.
"""

from __future__ import annotations

import polars as pl

from stabilitycli.core import aliases
from stabilitycli.core.model import SourceInfo

FRACTION = r"^\s*(\d+)\s*/\s*(\d+)\s*$"
_NOTE_MAX_PLANNED = 3  # distinct planned lengths named in the note (a resume may change it)


def step_like(key: str) -> bool:
    """`step`, `iter`, `global_step/max_steps`: a step key, alone or before a slash."""
    low = key.strip().lower()
    return low in aliases.STEP_KEYS or low.split("/")[0] in aliases.STEP_KEYS


def split(raw: pl.DataFrame, source: SourceInfo, step_key: str | None):
    """`raw` with the `N/M` text of its step key (or, with none, of the first step-like
    text key holding such text) replaced by N, and that key; else both unchanged."""
    if step_key is not None:
        if step_key not in raw.columns or raw.schema[step_key] != pl.String:
            return raw, step_key
        keys = [step_key]
    else:
        keys = [k for k in raw.columns if raw.schema[k] == pl.String and step_like(k)]
    for key in keys:
        parts = raw[key].str.extract_groups(FRACTION)
        steps = parts.struct.field("1").cast(pl.Int64, strict=False)
        if steps.is_null().all():
            continue
        planned = parts.struct.field("2").cast(pl.Int64, strict=False)
        planned = planned.drop_nulls().unique(maintain_order=True)
        example = raw[key].filter(steps.is_not_null())[0]
        source.notes.append(planned_note(key, example, planned.to_list()))
        return raw.with_columns(steps.alias(key)), key
    return raw, step_key


def planned_note(key: str, example: str, planned: list[int]) -> str:
    """What was read from an `N/M` step key, and every planned length M (a resume may
    change it)."""
    named = ", ".join(str(m) for m in planned[:_NOTE_MAX_PLANNED])
    more = len(planned) - _NOTE_MAX_PLANNED
    return f"steps read from {key!r} written as text N/M ({example!r}): the step is N; " + (
        f"the planned length M = {named} is not a step's value and is kept here only"
        if len(planned) == 1
        else f"planned lengths M changed during the log: {named}"
        + (f" and {more} more" if more > 0 else "")
    )
