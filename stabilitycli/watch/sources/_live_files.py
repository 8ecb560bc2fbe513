"""What the binary and store followers share: reading a growing file from an offset, and
putting the per-file accounting back together the way one whole read counts it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from stabilitycli.core.errors import (
    NOT_ERRORS,
    StabInputError,
    StabUsageError,
    from_the_input,
    input_error_from,
)
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass

_NOT_WRAPPED: tuple[type[BaseException], ...] = (StabInputError, StabUsageError, *NOT_ERRORS)


@contextlib.contextmanager
def input_boundary(where: str, name: str) -> Iterator[None]:
    """What `ingest.read` makes of a reader's failure, for a snapshot built outside it:
    a failure that comes from the input is a `StabInputError` naming it."""
    try:
        yield
    except _NOT_WRAPPED:
        raise
    except BaseException as err:
        if not from_the_input(err):
            raise  # a bug in stab: the command reports it as an internal error
        raise input_error_from(where, err, name) from err


@dataclass
class Stretch:
    """The bytes a file gained since `offset`, or why there are none."""

    data: bytes = b""
    # the file is shorter than what was read, or another file now has its name: the
    # caller reads it again from its start
    shrunk: bool = False
    problem: str | None = None  # one line: gone, permission lost, unreadable
    identity: tuple[int, int] | None = None  # (device, inode) of the file read


def read_from(path: Path, offset: int, identity: tuple[int, int] | None = None) -> Stretch:
    """The bytes of `path` from `offset` to its size now (a write landing meanwhile waits)."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            now = (stat.st_dev, stat.st_ino)
            if stat.st_size < offset or (identity is not None and now != identity):
                return Stretch(shrunk=True, identity=now)
            handle.seek(offset)
            return Stretch(handle.read(stat.st_size - offset), identity=now)
    except FileNotFoundError:
        return Stretch(problem=f"{path}: gone (deleted or moved); waiting for it")
    except PermissionError:
        return Stretch(problem=f"{path}: permission denied; waiting for it to be readable")
    except OSError as err:
        return Stretch(problem=f"{path}: cannot read ({err.strerror or err})")


def merge_sources(target: SourceInfo, parts: list[SourceInfo]) -> None:
    """Add each part's rejections, warnings and notes to `target`, in the parts' order.

    `SourceInfo.reject` names the first five rejections only; the parts' named ones
    taken in order, up to five, are the ones a single pass over the parts names.
    """
    for part in parts:
        target.rows_rejected += part.rows_rejected
        for reason, count in part.rejection_counts.items():
            target.rejection_counts[reason] = target.rejection_counts.get(reason, 0) + count
        room = 5 - len(target.rejections)
        target.rejections.extend(part.rejections[: max(0, room)])
        target.warnings.extend(part.warnings)
        target.notes.extend(part.notes)


class Once:
    """Problems said once each until they clear: a file gone for an hour is one line, and
    a different problem with the same thing (gone, then unreadable) is a line of its own."""

    def __init__(self) -> None:
        self.said: dict[str, str] = {}

    def tell(self, problems: list[str], key: str, line: str) -> None:
        if self.said.get(key) != line:
            self.said[key] = line
            problems.append(line)

    def clear(self, key: str) -> None:
        self.said.pop(key, None)

    def read(
        self, problems: list[str], path: Path, offset: int, identity: tuple[int, int] | None
    ) -> Stretch | None:
        """`read_from`, its problem said once (None then), and cleared once it reads again."""
        stretch = read_from(path, offset, identity)
        if stretch.problem is not None:
            self.tell(problems, str(path), stretch.problem)
            return None
        self.clear(str(path))
        return stretch
