"""Handing freed memory back when something caps the run's memory (`core.memory_cap`).

Two allocators hold a run's arrays: polars' (jemalloc, told in `cli` how soon to return
freed pages) and the C library's malloc, under numpy's. glibc keeps what numpy frees
in its heap for the next array, which numpy reuses quickly, but polars cannot: on the
30M-row benchmark log the read and each rule left tens to hundreds of MB there, counted
against a memory limit while polars' next stage asked for its own. Under a cap the
pipeline asks glibc to hand it back between stages (`release_freed`); without one, the
reuse is kept, which is faster on a machine that backs memory on first touch
(`docs/scale.md`).
"""

from __future__ import annotations

import functools
import os

from stabilitycli.core.memory_cap import memory_capped


@functools.cache
def _malloc_trim():
    if os.name != "posix":
        return None
    # asked under a memory cap only: a run without one never loads ctypes.util
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS): nothing to ask
        return None


def release_freed() -> None:
    """Under a memory cap, the C heap's freed pages handed back to the system (glibc's
    `malloc_trim`); otherwise nothing. What the run computes does not change."""
    if not memory_capped():
        return
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
