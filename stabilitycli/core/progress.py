"""How far one long analysis has got, told to whoever listens, or to nobody.

The library never draws anything: a reader or the pipeline says where it is
(`tell`), and the CLI, which alone knows whether a person is watching, listens
for the length of one analysis (`listening`). The listener lives in a
ContextVar, so a batch worker or another thread never hears a run that is not
its own, and a library caller that does not listen pays one lookup a call.

Stages and their units:

* `read`: bytes of the log read so far, of the file's size (the JSONL reader
  that reads a big log a piece at a time tells it after each piece);
* `rules`: rules finished, of the rules selected;
* `ranks`: parts of the per-rank check finished (the cohort's per-step
  statistics, the judgement, the throughput cohort), of its parts.

With each, `rows`: how many of the log's rows the stage has got through (0
when it does not know), from which a listener tells the rows a second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# (stage, done, total, rows): total and rows are 0 when they are not known
Listener = Callable[[str, int, int, int], None]

_listener: ContextVar[Listener | None] = ContextVar("stab_progress_listener", default=None)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every `tell` made inside the block (in this context) to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def tell(stage: str, done: int, total: int = 0, rows: int = 0) -> None:
    """Say how far `stage` has got; nothing happens when nobody listens."""
    listener = _listener.get()
    if listener is not None:
        listener(stage, done, total, rows)
