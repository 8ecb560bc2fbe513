"""Follow a W&B offline run while the client appends to its `run-<id>.wandb` file.

The file is a LevelDB-style log of 32 KiB blocks (see `ingest/wandb/offline.py`).
Each poll reads from the end of the last whole record: a record whose chunks
are not all written yet (or bytes that do not frame yet) wait for the next
poll, and the reader's own walk (`History`) reads the rest, so the snapshot is
`read` on the file up to its last whole record.
"""

from __future__ import annotations

import copy
from pathlib import Path

from stabilitycli.frame import RunData
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.wandb import offline
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.sources._live_files import Once, input_boundary, read_from


class WandbFollower:
    def __init__(self, target: str, options: ReadOptions) -> None:
        self.file = offline.resolve(Path(target), options)
        self.options = options
        self.display = str(target)
        self.history = offline.History(self.file, options)
        self.started = False  # the file header was read
        self.identity: tuple[int, int] | None = None
        self.bytes_read = 0  # what polls cost
        self.once = Once()

    def poll(self) -> Poll:
        result = Poll()
        offset = self.history.walk.pos if self.started else 0
        stretch = self.once.read(result.problems, self.file, offset, self.identity)
        if stretch is None:
            return result
        if stretch.shrunk:
            result.reread = f"{self.file}: the file shrank or was replaced; read again"
            self.history = offline.History(self.file, self.options)
            self.started, offset = False, 0
            stretch = read_from(self.file, 0)
        self.identity = stretch.identity
        self.bytes_read += len(stretch.data)
        if not self.started:
            if not self.history.header(stretch.data, live=True):
                return result
            self.started = True
        result.records_read = self.history.add(stretch.data, offset, live=True)
        return result

    def snapshot(self) -> RunData:
        with input_boundary(str(self.file), offline.NAME):
            return self.history.run_data(copy.deepcopy(self.history.source))

    def close(self) -> None:
        """Nothing is held open between polls."""


def follow(target: str, options: ReadOptions) -> WandbFollower:
    return WandbFollower(target, options)
