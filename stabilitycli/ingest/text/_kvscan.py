"""Find the records of a `key: value` text log, vectorised over the lines that share a shape.

A trainer prints its records with a few format strings, so a log holds a
few line *shapes* (the line with every number replaced). Lines are cleaned
and keyed by shape in polars; one line of each shape is read field by field
(`_kvfields.shape_of`), which gives the regex and the meaning of every line
of that shape, read in one vectorised `extract_groups`. Lines redrawn with
carriage returns or backspaces (progress bars), and lines the regex of their
shape does not fit, are read one by one with the same rules.

What a line is follows from the fields its shape has (see `kind`): a record
(a step, or Keras' epoch, and a number), the `Epoch N/M` line that gives the
records after it their step ("context"), numbers waiting for such a line
("needs"), a step with no readable number (rejected), or text.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from stabilitycli.core.records import dataclass
from stabilitycli.ingest.text import _kvfields as kf
from stabilitycli.ingest.text import _lightningbar as lb
from stabilitycli.ingest.text import _textline as tx

LINE, SEG, KIND, STEP, EPOCH, RANK = "_line", "_seg", "_kind", "step", "_epoch", "_rank"
# a step and `key: something` after it: a record whose numbers could not be read
_LOOKS_LIKE_RECORD = re.compile(r"[A-Za-z_]\w*\s*[:=]\s*\S")
_REDRAWN = r"[\r\x08]"
_MAY_BE_RECORD = r"(?i)step|iter|epoch|updates|loss|\bit\b"
MIN_SHAPE_LINES = 4
_LIGHTNING_BAR = r"Epoch \d+:\s+\d+%\|"


def kind(found: kf.Fields) -> tuple[str, int | None]:
    """What a line with these fields is, and its step (or the epoch it opens)."""
    step = found.step()
    epoch = found.axes.get(kf.EPOCH_KEY)
    if found.metrics:
        if step is not None or found.names_a_step():  # a step no whole number: rejected
            return "record", step
        if epoch is not None:
            return "record", int(epoch[0])
        return "needs", None
    if epoch is not None and step is None:
        return "context", int(epoch[0])
    return ("step-only" if step is not None else "text"), None


@dataclass
class Found:
    """Every record, context line and rejected line of a log, and what was skipped."""

    frame: Any  # polars DataFrame: LINE, SEG, KIND, STEP, EPOCH, metric columns
    rejected: list[tuple[int, str]] = field(default_factory=list)
    skipped_fields: dict[str, int] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)  # line -> cleaned text of a record


def scan(lines: list[str], *, vectorised: bool = True) -> Found:
    """Every line's kind and fields; `vectorised=False` reads them all one by one (tests)."""
    import polars as pl

    raw = pl.DataFrame({"text": lines}).with_row_index(LINE, offset=1)
    raw = raw.with_columns(pl.col(LINE).cast(pl.Int64))
    one_by_one = (
        pl.col("text").str.contains(_REDRAWN)
        | pl.col("text").str.contains(_LIGHTNING_BAR)
        | (not vectorised)
    )
    redrawn = raw.filter(one_by_one)
    plain = raw.filter(~one_by_one)
    text = pl.col("text")
    if any("\x1b" in line for line in lines):
        text = text.str.replace_all(tx.ANSI_PATTERN, "")
    plain = plain.with_columns(
        pl.col("text").str.extract(tx.RANK_PATTERN).cast(pl.Int64).alias(RANK),
        text.str.replace(tx.PREFIX_PATTERN, ""),
    )
    # a record names a step, an epoch or a loss (and a line read in line order a loss):
    # other lines are text at once
    plain = plain.filter(pl.col("text").str.contains(_MAY_BE_RECORD))
    plain = plain.with_columns(shape_key_of(pl.col("text")).alias("_shape"))
    # a shape of a few lines is chatter, read line by line rather than as a group
    size = pl.len().over("_shape")
    few = plain.filter(size < MIN_SHAPE_LINES)
    plain = plain.filter(size >= MIN_SHAPE_LINES)
    found = Found(frame=None)
    frames: list[pl.DataFrame] = []
    leftovers: list[tuple[int, str]] = few.select(LINE, "text").rows()
    for (_key,), group in plain.group_by(["_shape"], maintain_order=True):
        first = group.row(0, named=True)
        fields, shape = kf.shape_of(first["text"])
        what, _ = kind(fields)
        if what == "text":
            continue
        if what == "step-only":
            if _LOOKS_LIKE_RECORD.search(first["text"]):
                reason = "a record with a step but no readable number"
                found.rejected.extend((n, reason) for n in group[LINE].to_list())
            continue
        if shape is None:
            leftovers.extend(group.select(LINE, "text").rows())
            continue
        tokens = group.with_columns(pl.col("text").str.extract_all(kf.TOKEN).alias("_t"))
        fits = pl.col("_t").list.len() == shape.tokens
        leftovers.extend(tokens.filter(~fits).select(LINE, "text").rows())
        fit = tokens.filter(fits)
        if fit.height:
            frames.append(_shape_frame(fit, shape, what))
            for key in shape.skipped:
                found.skipped_fields[key] = found.skipped_fields.get(key, 0) + fit.height
            if what in ("record", "needs"):
                found.texts.update(fit.head(50).select(LINE, "text").rows())
    rows = []
    for number, text in [*redrawn.select(LINE, "text").rows(), *leftovers]:
        rank = tx.rank_of(lines[number - 1])
        for seg, segment in enumerate(tx.logical_lines(text)):
            row = _one(number, seg, segment, found)
            if row is not None:
                rows.append({**row, RANK: rank})
    if rows:
        frames.append(pl.DataFrame(rows, infer_schema_length=None))
    frame = (
        pl.concat(frames, how="diagonal_relaxed").sort(LINE, SEG)
        if frames
        else pl.DataFrame(schema={LINE: pl.Int64, SEG: pl.Int64, KIND: pl.String})
    )
    found.frame = _with_context(frame)
    found.rejected.sort()
    return found


def shape_key_of(text):
    """The shape of a line: its text with numbers and blanks set aside.

    Digits inside a word stay (`layer_1` and `layer_2` are other keys, and take
    their names from their own lines). Lines of one shape are also checked to
    hold as many number tokens as the line read for the shape.
    """
    return text.str.replace_all(r"\b[0-9]+", "#").str.replace_all(" ", "", literal=True)


def _shape_frame(fit, shape: kf.Shape, what: str):
    import polars as pl

    cols = [
        pl.col(LINE),
        pl.col(RANK),
        pl.lit(0).cast(pl.Int64).alias(SEG),
        pl.lit(what).alias(KIND),
    ]
    axes = {r[5:]: i for i, r in zip(shape.indices, shape.roles, strict=True) if r[:5] == "axis:"}
    step_key = next((k for k in kf.STEP_KEYS if k in axes), None)

    def value(index: int) -> pl.Expr:
        token = pl.col("_t").list.get(index)
        return token.str.replace_all(",", "").cast(pl.Float64, strict=False)

    if step_key is not None:
        step = value(axes[step_key])
        # a step that is no whole number (`iteration 0.5/...`) is none, never truncated
        whole = pl.when(step == step.floor()).then(step)
        cols.append(whole.cast(pl.Int64, strict=False).alias(STEP))
    elif kf.EPOCH_KEY in axes:  # Keras: the epoch is the step, or opens the records below it
        epoch = value(axes[kf.EPOCH_KEY]).cast(pl.Int64, strict=False)
        cols.append(epoch.alias(EPOCH if what == "context" else STEP))
    for index, role in zip(shape.indices, shape.roles, strict=True):
        if role[:5] != "axis:":
            cols.append(value(index).alias(role))
    return fit.select(cols)


def _one(number: int, seg: int, text: str, found: Found) -> dict | None:
    bar = lb.parse(text)
    if bar is not None:  # Lightning's bar: the step is counted from the epoch and the count
        bar_step, metrics = bar
        if not metrics:
            return None
        if len(found.texts) < 50:
            found.texts.setdefault(number, text)
        return {LINE: number, SEG: seg, KIND: "record", STEP: bar_step, **metrics}
    fields = kf.fields(text)
    what, step = kind(fields)
    if what == "step-only":
        if _LOOKS_LIKE_RECORD.search(text):
            found.rejected.append((number, "a record with a step but no readable number"))
        return None
    if what == "text":
        return None
    for key in fields.skipped:
        found.skipped_fields[key] = found.skipped_fields.get(key, 0) + 1
    row: dict = {LINE: number, SEG: seg, KIND: what, **fields.metrics}
    row[EPOCH if what == "context" else STEP] = step
    if what in ("record", "needs") and len(found.texts) < 50:
        found.texts.setdefault(number, text)
    return row


def _with_context(frame):
    """Keras: numbers without a step take the epoch of the `Epoch N/M` line above them."""
    import polars as pl

    if EPOCH not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(EPOCH))
    if STEP not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(STEP))
    frame = frame.with_columns(pl.col(EPOCH).forward_fill())
    return frame.with_columns(
        pl.when(pl.col(KIND) == "needs").then(pl.col(EPOCH)).otherwise(pl.col(STEP)).alias(STEP),
        pl.when((pl.col(KIND) == "needs") & pl.col(EPOCH).is_not_null())
        .then(pl.lit("record"))
        .otherwise(pl.col(KIND))
        .alias(KIND),
    ).filter(pl.col(KIND) != "context")
