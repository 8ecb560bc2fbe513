"""Wall-clock bounds on the requests to an object store (issue 33).

pyarrow's S3 and GCS clients give up on a silent connection, but a store that
keeps sending a few bytes a second is never silent: a listing or a download can
last for ever. Each request runs in a daemon thread that the caller waits for
with a deadline: `server_request_seconds` without progress (a listing, or one
chunk of a download) and `server_total_seconds` for all requests to the store
together, the bounds a tracking server's requests already have. A request past
its deadline is abandoned, not joined (`on_abandon` is told, to cut its
connection); a download stops at its next chunk, which it drops.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits, limit_hit

_POLL_SECONDS = 0.05


class Progress:
    """What a request tells its waiter: it moved on (`tick`), or it is abandoned."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.abandoned = threading.Event()

    def tick(self) -> None:
        self.last = time.monotonic()


class StoreClock:
    """The deadlines of the requests for one object-store URI."""

    def __init__(
        self,
        where: str,
        limits: InputLimits,
        on_abandon: Callable[[threading.Thread], None] | None = None,
    ):
        self.where = where
        self.limits = limits
        self.started = time.monotonic()
        self.on_abandon = on_abandon  # told when a request is left running

    def call(self, what: str, work: Callable[[Progress], Any]) -> Any:
        """`work(progress)`, or an input error once it is past a deadline."""
        progress = Progress()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = work(progress)
            except BaseException as err:  # handed to the waiting thread as it is
                outcome["error"] = err

        worker = threading.Thread(target=run, name="stab-object-store", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(_POLL_SECONDS)
            if worker.is_alive():
                late = self._late(what, progress)
                if late is not None:
                    progress.abandoned.set()
                    if self.on_abandon is not None:
                        self.on_abandon(worker)
                    raise late
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _late(self, what: str, progress: Progress) -> StabInputError | None:
        now = time.monotonic()
        total_seconds = self.limits.server_total_seconds
        if now > self.started + total_seconds:
            return limit_hit(
                self.where,
                f"{what}: the requests to the store took too long in all",
                "server_total_seconds",
                total_seconds,
            )
        request_seconds = self.limits.server_request_seconds
        if now > progress.last + request_seconds:
            return limit_hit(
                self.where,
                f"{what}: the store did not answer in time",
                "server_request_seconds",
                request_seconds,
            )
        return None


_GIVE_UP_SECONDS = 30.0  # a cut request and its retries end in about a second


def cut_when_abandoned(worker: threading.Thread, port: int) -> None:
    """A request abandoned inside the store's client cannot be cancelled through it, and
    pyarrow's exit hook would wait for it (for ever, from a store that trickles): the
    connections to the store's port are shut down until the request has given up, its
    retries included. Linux only (/proc); elsewhere the request runs on."""

    import atexit

    def cut() -> None:
        while worker.is_alive():
            _shut_down_connections(port)
            worker.join(0.05)

    threading.Thread(target=cut, name="stab-object-store-cut", daemon=True).start()
    # pyarrow's exit hook holds the interpreter while it waits, so the cut could not run
    # then: the process waits for the request first (hooks run last registered first)
    atexit.register(worker.join, _GIVE_UP_SECONDS)


def _shut_down_connections(port: int) -> None:
    """Shut down every TCP connection of this process to `port` (a store's): during a
    staging no other connection to a store is open."""
    import socket

    for descriptor in range(_descriptor_table_size()):
        try:
            copy = os.dup(descriptor)
        except OSError:  # not open
            continue
        try:
            conn = socket.socket(fileno=copy)
        except OSError:  # not a socket
            os.close(copy)
            continue
        with conn:
            if conn.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                if conn.getpeername()[1] == port:
                    conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue


def _descriptor_table_size() -> int:
    """How many file descriptors this process's table holds (`FDSize`, Linux), which
    bounds the numbers of the open ones; 0 where there is no /proc to say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("FDSize:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
