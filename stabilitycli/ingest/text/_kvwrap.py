"""Records a terminal hard-wrapped over several lines, joined back (`kvlog`).

A long record copied out of a terminal (tmux, a notebook cell) is cut at the
terminal's width, often inside a number (`tps: 7,0` / `23  tflops: ...`): the
first piece reads as a record with its last fields missing or wrong, the
rest as numbers without a step, or text. The width shows: most long lines of
such a paste are exactly as long. A record line of that width whose next
line is not a record is joined with it (cut inside a token first, then at a
blank), and with the line after while each piece is full width, up to three;
a join is kept when it reads as the same step with more fields, or with the
piece's last field completed and the others unchanged. Only those
records are read again, line by line.
"""

from __future__ import annotations

from stabilitycli.ingest.text import _kvfields as kf
from stabilitycli.ingest.text import _kvscan as ks
from stabilitycli.ingest.text import _textline as tx

MAX_PIECES = 4  # a record and up to three continuation lines, as Megatron's reader allows
LONG = 60  # lines shorter than this never set the width: a log's short chatter is not a wrap
TRIMMED = 3  # blanks a copy may trim from the end of a full-width piece


def join_wrapped(frame, lines: list[str]):
    """The scan's frame with wrapped records joined, the continuation lines joined, and each
    joined record's text by its first line (a cut one keeps its whole fields from it)."""
    import polars as pl

    length = pl.Series(lines, dtype=pl.String).str.len_chars()
    widths = length.filter(length >= LONG).value_counts(sort=True)
    if widths.height == 0 or widths["count"][0] < 2:
        return frame, set(), {}
    width = int(widths[0, 0])

    def full(number: int) -> bool:
        return width - TRIMMED <= length[number - 1] <= width

    starts = frame.filter(pl.col(ks.KIND) != "needs")[ks.LINE]
    at = pl.col(ks.LINE) - 1  # 0-based index into `length`
    candidates = frame.filter(
        (pl.col(ks.KIND) == "record")
        & (pl.col(ks.SEG) == 0)
        & (pl.col(ks.LINE) < len(lines))
        & ~(pl.col(ks.LINE) + 1).is_in(starts.implode())
    ).filter(at.map_batches(lambda i: length.gather(i)).is_between(width - TRIMMED, width))
    joined: list[dict] = []
    texts: dict[int, str] = {}
    consumed: set[int] = set()
    starting = set(starts.to_list()) if candidates.height else set()
    for number, step in candidates.select(ks.LINE, ks.STEP).rows():
        whole, pieces, texts[number] = _follow(lines, number, step, starting, full)
        if whole is None:
            continue
        joined.append({ks.LINE: number, ks.SEG: 0, ks.KIND: "record", ks.STEP: step,
                       ks.RANK: tx.rank_of(lines[number - 1]), **whole.metrics})  # fmt: skip
        consumed.update(range(number + 1, number + pieces))
    if not joined:
        return frame, set(), {}
    redone = [r[ks.LINE] for r in joined]
    kept = frame.filter(
        ~(pl.col(ks.LINE).is_in(redone) & (pl.col(ks.SEG) == 0))
        & ~pl.col(ks.LINE).is_in(list(consumed))
    )
    new = pl.DataFrame(joined, infer_schema_length=None)
    joined_frame = pl.concat([kept, new], how="diagonal_relaxed").sort(ks.LINE, ks.SEG)
    return joined_frame, consumed, {n: texts[n] for n in redone}


def _follow(lines: list[str], number: int, step: int, starts: set[int], full):
    """The record joined with the lines that continue it, how many pieces it took, its text."""
    text = _clean(lines[number - 1])
    if text is None:
        return None, 0, ""
    best, pieces = kf.fields(text), 1
    while pieces < MAX_PIECES and number + pieces <= len(lines):
        after = number + pieces
        more = _clean(lines[after - 1])
        if after in starts or more is None:
            break
        grown = None
        for glue in ("", " "):
            found = kf.fields(text + glue + more)
            more_fields = found.step() == step and _completes(found.metrics, best.metrics)
            if more_fields and (grown is None or len(found.metrics) > len(grown[0].metrics)):
                grown = (found, text + glue + more)
        if grown is None:
            break
        (best, text), pieces = grown, pieces + 1
        if not full(after):
            break  # a shorter piece ends the record
    return (best, pieces, text) if pieces > 1 else (None, 0, "")


def _completes(joined: dict[str, float], piece: dict[str, float]) -> bool:
    """The join reads more than the piece: more fields, or the piece's last field completed
    (`step_avg:1710` + `.67ms` is `step_avg (ms)` 1710.67, not 1710) with the others unchanged."""
    if set(joined) > set(piece):
        return True
    if not piece or joined == piece or len(joined) < len(piece):
        return False
    *whole, _last = piece
    return all(joined.get(key) == piece[key] for key in whole)


def _clean(line: str) -> str | None:
    parts = tx.logical_lines(line)
    return parts[0] if len(parts) == 1 else None  # a redrawn bar is not a wrapped record
