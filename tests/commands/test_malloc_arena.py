"""`stab` holds glibc's allocator to one arena (`cli.one_malloc_arena`): threads that free
numpy temporaries into arenas of their own raised a 10M-row log's peak memory by a tenth."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's arenas only",
)

# four threads allocate arrays at once, then glibc's malloc_info counts the arenas (<heap>)
_THREADS_THEN_HEAPS = """
import ctypes, sys, tempfile, threading
import numpy as np
from stabilitycli import cli
if sys.argv[1] == "stab":  # the console script's entry, before any thread starts
    sys.argv = ["stab", "--version"]
    try:
        cli.main()
    except SystemExit:
        pass
def work():
    for _ in range(50):
        np.ones(1 << 17).sum()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    handle = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(handle))
    libc.fclose(ctypes.c_void_p(handle))
    print(open(out.name).read().count("<heap nr="))
"""


def _heaps(mode: str, **env: str) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", _THREADS_THEN_HEAPS, mode],
        capture_output=True,
        text=True,
        env=environ,
        check=True,
    )
    return int(done.stdout.split()[-1])  # after `stab --version`'s line


def test_threads_share_one_arena_once_stab_has_set_it():
    assert _heaps("default") > 1  # what the setting is for: each thread an arena
    assert _heaps("stab") == 1


def test_the_users_own_setting_stands():
    assert _heaps("stab", MALLOC_ARENA_MAX="4") > 1
