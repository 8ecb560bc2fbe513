"""Whether something caps this process's memory below the machine's own: a limit on its
data segment or address space, or a memory cgroup's limit (v1 or v2).

In `core` because more than the pipeline asks it: the JSONL reader parses one piece at a
time under a cap (`ingest.jsonl.pieces`), the rules take turns under one
(`pipeline.rules`), and `pipeline.memory.release_freed` hands freed memory back.
"""

from __future__ import annotations

import os
from pathlib import Path

# a cgroup "limit" at or above the machine's memory limits nothing (v1 writes 2^63 - 4096
# for none; v2 writes `max`)
_CGROUP_V1 = Path("/sys/fs/cgroup/memory")
_CGROUP_V2 = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")


def memory_capped(columns_bytes: int | None = None) -> bool:
    """Whether this process runs under a cap on its memory below the machine's own: a
    limit on its data segment or address space, or a memory cgroup's limit (v1 or v2).

    `columns_bytes`: what the run's columns hold. A cgroup then counts as a cap only when
    it allows less than `ROOM_PER_COLUMN_BYTE` times that: a container's limit that a run
    fits with room to spare should not cost it the second thread."""
    try:
        import resource
    except ImportError:  # not on every platform
        return False
    limits = (resource.RLIMIT_DATA, resource.RLIMIT_AS)
    if any(resource.getrlimit(limit)[0] != resource.RLIM_INFINITY for limit in limits):
        return True
    cap = _cgroup_limit()
    if cap is None or cap >= _machine_bytes():
        return False
    return columns_bytes is None or cap < ROOM_PER_COLUMN_BYTE * columns_bytes


# two rules at once peaked at about 1.6x the columns on the 30M-row log, one at a time at
# about 1.4x: under 2x the columns, a cap is close enough to take turns
ROOM_PER_COLUMN_BYTE = 2


def room_beside_files() -> int | None:
    """What this process may still take of its own memory under a limit that a mapped
    file's pages escape, in bytes; None when no such limit is set.

    Two limits leave a file's pages out: a memory cgroup's (it drops clean file pages under
    pressure and reads them back when touched), less the process's own anonymous memory;
    and the data segment's (RLIMIT_DATA counts no shared mapping), less the segment now.
    The smaller when both are set. An address-space limit (RLIMIT_AS) counts a mapped file
    as much as anything else, so nothing escapes it: it is not one of them."""
    data_limit, cap = _data_limit(), _cgroup_limit()
    if cap is not None and cap >= _machine_bytes():
        cap = None
    if data_limit is None and cap is None:
        return None
    status = _own_status()
    rooms = [] if data_limit is None else [data_limit - status.get("VmData", 0)]
    rooms += [] if cap is None else [cap - status.get("RssAnon", 0)]
    return max(0, min(rooms))


def _data_limit() -> int | None:
    """The data segment's soft limit in bytes; None when unlimited (or not known here)."""
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def _own_status() -> dict[str, int]:
    """This process's memory counts from /proc/self/status, in bytes (empty off Linux)."""
    counts = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:  # loop over some 60 lines
                name, _, value = line.partition(":")
                if value.strip().endswith(" kB"):
                    counts[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return {}
    return counts


def _machine_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes, or None (no cgroup, none set)."""
    try:
        entries = _PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    for entry in entries:  # a line per hierarchy: `id:controllers:path`
        _, controllers, path = entry.split(":", 2)
        if "memory" in controllers.split(","):
            found = _read_limit(_CGROUP_V1 / path.lstrip("/") / "memory.limit_in_bytes")
        elif controllers == "":
            found = _read_limit(_CGROUP_V2 / path.lstrip("/") / "memory.max")
        else:
            continue
        if found is not None:
            return found
    return None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
