"""Folder walks that always end: iterative, loop-proof, and bounded by `InputLimits`.

A folder nobody curated can be 1,500 levels deep (a recursive walk would hit
Python's recursion limit), hold a symlink back to itself (a walk that follows
it never ends), or hold millions of files. Every walk in stab goes through
here: an explicit stack instead of recursion, each folder entered once by its
(st_dev, st_ino), and `max_walk_files` / `max_walk_depth` enforced with the
message `limit_hit` gives.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path

from stabilitycli.core.errors import os_reason
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.limits import InputLimits, limit_hit, limits_in_force


@dataclass
class WalkReport:
    """What a walk did not enter, so the caller can say so instead of dropping it silently."""

    # symlinked folders that lead back to a folder already walked (entered once, not again)
    loops: list[Path] = field(default_factory=list)
    # folders that could not be listed, and why
    unreadable: list[tuple[Path, str]] = field(default_factory=list)

    def warnings(self) -> list[str]:
        out = [
            f"{folder}: not walked again: it leads back to a folder already walked (a symlink loop)"
            for folder in self.loops
        ]
        out += [f"{folder}: not walked: {reason}" for folder, reason in self.unreadable]
        return out


def walk(
    root: Path,
    *,
    limits: InputLimits | None = None,
    max_depth: int | None = None,
    follow_symlinks: bool = True,
    report: WalkReport | None = None,
) -> Iterator[tuple[Path, list[Path], list[Path]]]:
    """(folder, sub-folders, other entries) for `root` and every folder below it, top-down,
    in name order, like `os.walk` without its recursion.

    The caller may remove sub-folders from the list to keep the walk out of them.
    With `follow_symlinks=False` a symlinked folder is listed among the sub-folders
    but not entered (os.walk's default); with it, each folder is still entered once.
    `max_depth` is the caller's own reach (1: `root` and its children), never an
    error; going past `limits.max_walk_depth` or looking at more than
    `limits.max_walk_files` entries raises the limit's `StabInputError`.
    """
    limits = limits or limits_in_force()
    report = report if report is not None else WalkReport()
    entered: set[tuple[int, int]] = set()
    looked_at = 0
    try:
        info = root.stat()
        entered.add((info.st_dev, info.st_ino))
    except OSError as err:
        report.unreadable.append((root, os_reason(err)))
        return
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if depth > limits.max_walk_depth:
            raise limit_hit(
                str(folder),
                f"folder {depth} levels below {root}",
                "max_walk_depth",
                limits.max_walk_depth,
            )
        folders: list[Path] = []
        others: list[Path] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    looked_at += 1
                    if looked_at > limits.max_walk_files:
                        raise limit_hit(
                            str(root),
                            f"more than {limits.max_walk_files} files and folders below it",
                            "max_walk_files",
                            limits.max_walk_files,
                        )
                    if _is_folder(entry):
                        folders.append(Path(entry.path))
                    else:
                        others.append(Path(entry.path))
        except OSError as err:
            report.unreadable.append((folder, os_reason(err)))
            continue
        folders.sort()
        others.sort()
        yield folder, folders, others
        if max_depth is not None and depth >= max_depth:
            continue
        below: list[Path] = []
        for sub in folders:
            if not follow_symlinks and sub.is_symlink():
                continue  # listed as a folder, as os.walk does, but not entered
            try:
                info = sub.stat()
            except OSError as err:
                report.unreadable.append((sub, os_reason(err)))
                continue
            key = (info.st_dev, info.st_ino)
            if key in entered:
                report.loops.append(sub)
                continue
            entered.add(key)
            below.append(sub)
        # reversed onto the stack, so the walk goes in name order like os.walk
        stack.extend((sub, depth + 1) for sub in reversed(below))


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def list_folder(folder: Path, limits: InputLimits | None = None) -> list[Path]:
    """The entries of one folder in name order, refusing a folder of more than
    `max_walk_files` entries (stops counting there rather than listing them all)."""
    limits = limits or limits_in_force()
    found: list[Path] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if len(found) >= limits.max_walk_files:
                raise limit_hit(
                    str(folder),
                    f"more than {limits.max_walk_files} entries in this folder",
                    "max_walk_files",
                    limits.max_walk_files,
                )
            found.append(Path(entry.path))
    return sorted(found)
