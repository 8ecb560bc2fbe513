"""One dict / JSON-object line of trainer stdout, and every line of its shape at once (`dictlog`).

`parse` reads one line: the first flat `{...}` on it, its numeric values
(numbers written as strings too, fairseq's `"13.7"`), and what the line is: a
record (with the key that holds its step, if any) or a rejected summary.
Lines of one shape (the same text once numbers and blank runs are set aside)
are the same kind of line with their values in the same number tokens, so
`vectorised` reads one line of a shape with `parse` and the rest of that
shape from their tokens, in polars.
"""

from __future__ import annotations

import re

from stabilitycli.core.records import dataclass
from stabilitycli.frame.step_fraction import step_like
from stabilitycli.ingest.text import _kvfields as kf
from stabilitycli.ingest.text import _textline as tx
from stabilitycli.ingest.text._kvscan import shape_key_of
from stabilitycli.ingest.text.hf_trainer import SUMMARY_KEYS, SUMMARY_REASON

DICT = re.compile(r"\{([^{}]*)\}")
_PAIR = re.compile(r"""(['"])([^'"]+)\1\s*:\s*('[^']*'|"[^"]*"|[^,}\s]+)""")
STEP_KEYS = ("step", "global_step", "num_updates", "train_num_updates", "valid_num_updates")
# ms-swift's `'global_step/max_steps': '8280/11043'`: the step and the planned length as text
_FRACTION = re.compile(r"(\d+)\s*/\s*(\d+)\Z")
# the M of an `N/M` step: a row's column `_planned:<key>` until the note is written
PLANNED = "_planned:"
_FAIRSEQ_TAG = re.compile(r"\|\s*(train_inner|train|valid\w*)\s*\|\s*\{")
EPOCH_SUMMARY = "fairseq epoch summary (a mean over the epoch, not a step's value)"
# U+FFFD is what a byte that is not UTF-8 became when the log was decoded; NUL and the
# other C0 controls (but tab, CR, backspace and ESC, which progress bars use) are what a
# dying process or a disk fault writes: a record holding one is damaged, and its numbers
# are not to be trusted one by one
_DAMAGE = re.compile(r"[\ufffd\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f]")
DAMAGED = "record holds a byte that is not text (not UTF-8, or a control character)"


@dataclass
class Parsed:
    values: dict[str, float]  # metric -> value, the step key taken out
    starts: dict[str, int]  # metric (and step key) -> where its value starts on the line
    step_key: str | None = None
    step: float | None = None
    rejected: str | None = None  # the reason, for a summary that is no step's value
    planned: float | None = None  # M of a step written `N/M` (its start is starts[PLANNED])


def parse(text: str) -> Parsed | None:
    """The dict on a line, or None when there is none with a number."""
    match = DICT.search(text) if "{" in text else None
    if match is None:
        return None
    values: dict[str, float] = {}
    starts: dict[str, int] = {}
    if _DAMAGE.search(match.group(0)) is not None:
        return Parsed(values, starts, rejected=DAMAGED)
    base = match.start(1)
    fraction: tuple[str, re.Match[str], int] | None = None  # key, `N/M`, where its text starts
    for pair in _PAIR.finditer(match.group(1)):
        raw = pair.group(3)
        at = base + pair.start(3) + (1 if raw[:1] in "'\"" else 0)
        try:
            values[pair.group(2)] = tx.value(raw.strip("'\""))
        except ValueError:
            frac = _FRACTION.match(raw.strip("'\""))
            if fraction is None and frac is not None and step_like(pair.group(2)):
                fraction = (pair.group(2), frac, at)
            continue  # a string, True, None: not a metric
        starts[pair.group(2)] = at
    if not values:
        return None
    tag = _FAIRSEQ_TAG.search(text)
    if tag is not None and tag.group(1) == "train":
        return Parsed(values, starts, rejected=EPOCH_SUMMARY)
    if any(k in values for k in SUMMARY_KEYS):
        return Parsed(values, starts, rejected=SUMMARY_REASON)
    key = next((k for k in STEP_KEYS if k in values), None)
    if key is None and fraction is not None:
        key, frac, at = fraction
        starts[key], starts[PLANNED] = at + frac.start(1), at + frac.start(2)
        return Parsed(values, starts, key, float(frac.group(1)), planned=float(frac.group(2)))
    step = values.pop(key) if key is not None else None
    return Parsed(values, starts, key, step)


def vectorised(frame):
    """Rows of the plain dict lines read by shape; lines left to read one by one; rejections.

    `frame`: `_line`, `text`, `_bar` (the last bar position above the line).
    Returns (rows frame or None, [(line, text, bar)] left over, [(line, reason)] rejected).
    """
    import polars as pl

    frame = frame.with_columns(shape_key_of(pl.col("text")).alias("_shape"))
    out, left, rejected = [], [], []
    for (_shape,), group in frame.group_by(["_shape"], maintain_order=True):
        parsed = parse(group["text"][0])
        if parsed is None:
            continue
        if parsed.rejected is not None:
            rejected.extend((n, parsed.rejected) for n in group["_line"].to_list())
            continue
        tokens = {m.start(): i for i, m in enumerate(kf.TOKEN_RE.finditer(group["text"][0]))}
        names = [*parsed.values, *([parsed.step_key] if parsed.step_key else [])]
        names += [PLANNED] if parsed.planned is not None else []
        if any(parsed.starts[n] not in tokens for n in names):
            left.extend(group.select("_line", "text", "_bar").rows())
            continue
        group = group.with_columns(pl.col("text").str.extract_all(kf.TOKEN).alias("_t"))
        fits = pl.col("_t").list.len() == len(tokens)
        left.extend(group.filter(~fits).select("_line", "text", "_bar").rows())
        index = {n: tokens[parsed.starts[n]] for n in names}
        step = (
            _token(index[parsed.step_key]) if parsed.step_key else pl.col("_bar").cast(pl.Float64)
        )
        how = "key" if parsed.step_key else "bar"
        out.append(
            group.filter(fits).select(
                pl.col("_line").alias("_row"),
                step.alias("step"),
                pl.lit(how).alias("_how"),
                *[_token(index[n]).alias(n) for n in parsed.values],
                *(
                    [_token(index[PLANNED]).alias(PLANNED + str(parsed.step_key))]
                    if parsed.planned is not None
                    else []
                ),
            )
        )
    rows = pl.concat(out, how="diagonal_relaxed") if out else None
    return rows, left, rejected


def _token(index: int):
    import polars as pl

    token = pl.col("_t").list.get(index)
    return token.str.replace_all(",", "").cast(pl.Float64, strict=False)
