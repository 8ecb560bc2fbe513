"""When the text family that claimed a log cannot read it, the other text families try.

A sniff looks at a log's first megabytes for one marker (`iteration N/ T |`,
`step=N, skipped=K`, `{'loss'`), and a stdout capture often holds another
framework's lines too: a nanoGPT-style script trained by a DeepSpeed engine
prints the engine's `step=N, skipped=K` lines beside its own `step 10 | loss 2.3`
records. The family that claimed the file may then read nothing, or rows without
a loss, where another family reads the loss. So, for a log a text family claimed
(never one named by `--format-in` or read with `--pattern`):

* the claimer reads first; if it finds a loss, that is the answer, as before;
* otherwise every other text family reads it, in the sniff order, and the first
  that finds a loss wins, with a note naming the claimer and why it lost;
* none finds a loss: the claimer's rows are kept if it read any (its loss-scale
  evidence can still decide a §3 verdict), else the family that read the most
  rows; the families tried and what each found go with the run, and the
  no-loss error names them;
* none reads a row: the error names every family tried and the closest one
  (records it rejected make a family closer than one that found none).

A family that reads rows but finds no loss never wins over one that finds a loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stabilitycli.core.errors import StabInputError, from_the_input, input_error_from
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.formats import ENTRIES, reader
from stabilitycli.ingest.options import ReadOptions

if TYPE_CHECKING:
    from stabilitycli.frame import RunData

# every family that reads a text log, in the sniff order; `jsonl` takes a `.log` of JSON objects
TEXT_FAMILIES: tuple[str, ...] = tuple(
    e.name for e in ENTRIES if e.takes.text_log or e.name == "jsonl"
)


@dataclass
class Attempt:
    """What one family made of the log: its run (None when it raised) and why it did not win."""

    name: str
    run: RunData | None
    reason: str
    line: int | None = None

    @property
    def rows(self) -> int:
        return 0 if self.run is None else self.run.frame.height

    @property
    def has_loss(self) -> bool:
        return self.run is not None and "loss" in self.run.frame.columns

    def said(self) -> str:
        return f"{self.name} ({self.rows} row(s), no loss)" if self.rows else f"{self.name} (none)"


def read_text_log(path: Path, name: str, options: ReadOptions) -> RunData:
    """Read `path`, claimed by the text family `name` (see the module doc)."""
    first = _attempt(path, name, options, claimer=True)
    if first.run is not None and first.has_loss:
        return first.run
    tried = [first]
    for other in TEXT_FAMILIES:
        if other == name:
            continue
        attempt = _attempt(path, other, options)
        if attempt.has_loss:
            run = attempt.run
            assert run is not None  # a family that found the loss read a run
            run.source.notes.insert(
                0,
                f"read as {other}: {name} claimed the log first (its sniff matched): "
                f"{first.reason}; {other} found the loss",
            )
            return run
        tried.append(attempt)
    with_rows = [a for a in tried if a.rows]
    if not with_rows:
        best = max(tried, key=lambda a: a.line is not None)  # the first such, claimer first
        names = ", ".join(a.name for a in tried)
        raise StabInputError(
            str(path),
            f"{best.reason} (read as {best.name}, the closest of the text formats tried: {names})",
            line=best.line,
        )
    kept = first if first.rows else max(with_rows, key=lambda a: a.rows)
    assert kept.run is not None  # `with_rows` holds only families that read a run
    source = kept.run.source
    source.tried = [a.said() for a in tried if a is not kept]
    if kept is not first:
        source.notes.insert(
            0,
            f"read as {kept.name} (the most rows): {name} claimed the log first: {first.reason}",
        )
    return kept.run


def _attempt(path: Path, name: str, options: ReadOptions, claimer: bool = False) -> Attempt:
    try:
        run = reader(name).read(path, options)
    except StabInputError as err:
        if _about_the_file(err.reason):
            raise  # the file itself could not be read, or a bound was reached: no family can
        return Attempt(name, None, err.reason, err.line)
    except BaseException as err:
        if claimer or not from_the_input(err):
            raise  # the caller's boundary names the claimer, or reports stab's bug
        return Attempt(name, None, input_error_from(str(path), err, name).reason)
    if "loss" in run.frame.columns:
        return Attempt(name, run, "")
    keys = run.metric_columns
    listing = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
    return Attempt(name, run, f"it read {run.frame.height} row(s) and no loss (keys: {listing})")


def _about_the_file(reason: str) -> bool:
    """An error about the file or a bound in force, not about its format."""
    return reason.startswith(_FILE_ERRORS) or ": over the limit " in reason


_FILE_ERRORS = ("the file is empty", "permission denied", "no such file")
