"""One timed run of a command for `benchmarks/run.py`: wall time, peak RSS, exit code."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Sample:
    seconds: float
    maxrss_mb: float
    exit_code: int
    output: dict = field(default_factory=dict)
    killed: bool = False
    stderr_tail: str = ""


TIME = "/usr/bin/time"  # GNU time: forks the command from a small process (see measure)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _child_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            found = handle.read().split()
    except OSError:
        return None
    return int(found[0]) if found else None


def measure(argv: list[str], env: dict[str, str], max_rss_mb: float) -> Sample:
    """Run `argv` once: wall time, peak RSS (of it and the children it waited for), exit code,
    and the JSON line a floor prints on stdout.

    The peak RSS comes from GNU time, not from our own wait4: a process spawned from
    this one (vfork + exec) starts its ru_maxrss at this process's peak, which grows
    with the inputs generated here; GNU time's forked child starts from time's few MB."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as rss,
    ):
        timed = [TIME, "-f", "%M", "-o", rss.name, *argv]
        start = time.perf_counter()
        pid = os.posix_spawn(
            TIME,
            timed,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
            ],
        )
        done = threading.Event()
        killed = []

        def watch() -> None:  # a thread, so that the timing is not rounded to a poll interval
            while not done.wait(0.2):
                child = _child_of(pid)
                if child is not None and _rss_mb(child) > max_rss_mb:
                    killed.append(True)
                    os.kill(child, 9)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, _ = os.wait4(pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        out.seek(0)
        tail = out.read()[-4096:].decode(errors="replace").strip().splitlines()
        err.seek(0)
        errors = err.read()[-2000:].decode(errors="replace")
        reported = rss.read().split()  # "Command exited with non-zero status N" comes first
    parsed: dict = {}
    if tail and tail[-1].startswith("{"):
        with contextlib.suppress(ValueError):  # a command that printed no JSON line
            parsed = json.loads(tail[-1])
    return Sample(
        seconds=seconds,
        maxrss_mb=int(reported[-1]) / 1024 if reported else float("nan"),  # time reports KiB
        exit_code=os.waitstatus_to_exitcode(status),
        output=parsed,
        killed=bool(killed),
        stderr_tail=errors,
    )
