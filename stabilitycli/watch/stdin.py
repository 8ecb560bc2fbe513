"""`stab watch -`: standard input (`tail -f log | stab watch -`, `kubectl logs -f ... | ...`).

A thread copies the bytes as they arrive into a private spool file; once the first lines
are there, the format is picked from them as `stab analyze -` picks it, and the spool is
followed as a growing file by that format's follower. The final verdict is read from the
same spool, so it is computed on exactly the bytes that came in.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.follow import Follower, Poll

_CHUNK_BYTES = 1 << 16
# what the format is picked from: these many bytes, or this many whole lines, or the end
_HEAD_BYTES = 65536
_HEAD_LINES = 5


class StdinFollower:
    display = "<stdin>"

    def __init__(self, stream: BinaryIO, options: ReadOptions, follow_format):
        self.options = options
        self._follow_format = follow_format  # (name, path, options) -> Follower
        self._dir = Path(tempfile.mkdtemp(prefix="stab-watch-stdin-"))
        self.spool = self._dir / "stdin"
        self.spool.touch()
        self.name: str | None = None
        self._inner: Follower | None = None
        self._tail_lines = 0  # the lines of the log a tail judgment reads; 0: none kept
        self._closed = threading.Event()
        self._problem: str | None = None
        self._size = 0
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: BinaryIO) -> None:
        read = getattr(stream, "read1", stream.read)  # whatever has arrived, not a full chunk
        limit = self.options.limits.max_input_bytes
        try:
            with open(self.spool, "ab") as sink:
                while chunk := read(_CHUNK_BYTES):
                    if self._size + len(chunk) > limit:
                        self._problem = (
                            f"<stdin>: standard input goes on past max_input_bytes ({limit}); "
                            "stopped reading there"
                        )
                        break
                    sink.write(chunk)
                    sink.flush()
                    self._size += len(chunk)
        except OSError as err:
            self._problem = f"<stdin>: reading failed: {err.strerror or err}"
        finally:
            self._closed.set()

    def _pick(self, closed: bool) -> bool:
        """Pick the format once the head is there; whether it is picked."""
        from stabilitycli.ingest import choose_reader, stdin_spool_name

        with open(self.spool, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
        if not closed and len(head) < _HEAD_BYTES and head.count(b"\n") < _HEAD_LINES:
            return False
        if not head.strip():
            return False
        named = self.spool.with_name(stdin_spool_name(head))
        self.spool.rename(named)  # the copying thread writes on through its open handle
        self.spool = named
        name, _, options = choose_reader(str(named), self.options)
        self.name = name
        self._inner = self._follow_format(name, named, options)
        keep = getattr(self._inner, "keep_tail", None)
        if self._tail_lines and keep is not None:
            keep(self._tail_lines)
        return True

    def poll(self) -> Poll:
        closed = self._closed.is_set()  # before reading: what is there now is all there is
        if self._inner is None and not self._pick(closed):
            return Poll(ended="standard input closed" if closed else None)
        assert self._inner is not None
        poll = self._inner.poll()
        if self._problem:
            poll.problems.append(self._problem)
            self._problem = None
        if closed:
            poll.ended = "standard input closed"
        return poll

    def keep_tail(self, lines: int) -> bool:
        """A tail is kept once the format is picked, if that format has one."""
        self._tail_lines = lines
        return True

    def tail(self):
        tail = getattr(self._inner, "tail", None)
        return tail() if tail is not None else None

    def snapshot(self):
        from stabilitycli.ingest import read_stdin_spool

        if self._inner is None:
            raise StabInputError("<stdin>", "nothing on standard input yet")
        spool = self._inner.mirror.spool  # type: ignore[attr-defined]
        return read_stdin_spool(spool, replace(self.options, format_in=self.name))

    def final(self):
        """The run `stab analyze -` reads from the same bytes (the last line too)."""
        from stabilitycli.ingest import read_stdin_spool

        self._thread.join(timeout=1.0)
        if self._inner is None:
            raise StabInputError("<stdin>", "nothing on standard input")
        return read_stdin_spool(self.spool, self.options)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        shutil.rmtree(self._dir, ignore_errors=True)
