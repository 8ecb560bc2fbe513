"""A second core for the chunks of one rule, when the pipeline lends it (issue 40).

A long log's rules work a chunk of rows at a time (`detect.windows.CHUNK_ROWS`), and a
chunk's work is a pure function of the chunk: polars and numpy let go of the GIL in it,
so two chunks can be worked out at once, or the next chunk's polars statistics made
while this one's numpy reads them. The results come back in the chunks' order, so what
a rule makes of them is the same, bit for bit, as in one thread.

Only the pipeline knows whether a second thread is worth its memory (a capped process
takes turns: `core.memory_cap`), so it lends one (`lending`) for the length of the rules;
a rule called directly, a test or a library caller that lends none, works in turn. The
loan lives in a ContextVar: the pipeline's rule threads hear it (they run in a copy of
its context), a batch worker's other run does not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lent: ContextVar[int] = ContextVar("stab_chunk_threads", default=0)


@contextmanager
def lending(threads: int) -> Iterator[None]:
    """Let `in_order` inside the block (in this context) use up to `threads` threads."""
    token = _lent.set(threads)
    try:
        yield
    finally:
        _lent.reset(token)


def lent() -> int:
    """The threads lent to this context (1 when none were: work in turn)."""
    return max(1, _lent.get())


def in_order(func: Callable[[T], R], items: Iterable[T], workers: int = 1) -> Iterator[R]:
    """`map(func, items)` in `items`' order; when threads are lent, the calls are made on
    up to `workers` worker threads (at most the threads lent) while the caller works
    on the results already made.

    One worker makes the next chunk's result while the caller reads this one's (the
    memory of two chunks at once); two make two chunks' results at once, for a caller
    that does little with each."""
    items = list(items)
    workers = min(workers, _lent.get())
    if _lent.get() < 2 or len(items) < 2 or workers < 1:
        yield from map(func, items)
        return
    # each call hears what the caller hears (the progress listener, this loan)
    context = copy_context()
    with ThreadPoolExecutor(workers, thread_name_prefix="stab-chunk") as pool:
        ahead: deque[Future[R]] = deque()
        for item in items:
            ahead.append(pool.submit(context.copy().run, func, item))
            if len(ahead) > workers:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()
