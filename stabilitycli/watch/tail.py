"""The last lines of each followed file, kept as they arrive: what the watch's bounded-tail
judgment reads between two judgments of the whole run.

A judgment of the whole run costs in proportion to the run (1.6 CPU s on 64 ranks x 36k
steps), so on a long run it is throttled and comes every few tens of seconds. The local
rules (a spike's onset, NaN/Inf, the loss scaler, a rank gone NaN, silent or shifted) need
only their trailing windows, so the tail judgment reads only the last `lines` complete
lines of each file: its cost is that of the window and the new points, not of the run.

Only formats whose every line stands alone as a record (or a table's header and its rows)
have a tail: a multi-line record format (`blocklog`) or a file saved whole has none, and
is alerted from the whole-run judgment alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.options import ReadOptions

# readers that take any run of whole lines as a log: the tail is their last lines
LINE_FORMATS = frozenset(
    {"jsonl", "kvlog", "dictlog", "megatron", "deepspeed", "llmc", "tabular", "rank_dir"}
)
# a table's rows need its header line before them
_TABLES = (".csv", ".tsv", ".txt")


def headed(name: str) -> Callable[[Path], bool]:
    """Which files of reader `name` need their first line (a table's header) in a tail."""
    if name == "tabular":
        return lambda _path: True
    if name == "rank_dir":  # per-rank tables among per-rank JSONL files
        return lambda path: path.name.lower().endswith(_TABLES)
    return lambda _path: False


@dataclass
class _Tail:
    data: bytes = b""
    head: bytes = b""  # the file's first line (a table's header), when the format needs it
    from_start: bool = True  # `data` begins at the file's first byte


class TailKeeper:
    """Per file, its last `lines` complete lines (and its header line where needed)."""

    def __init__(self, lines: int, headed: Callable[[Path], bool]):
        self.lines = lines
        self.headed = headed
        self._tails: dict[Path, _Tail] = {}

    def take(self, path: Path, complete: bytes) -> None:
        """`complete`: whole lines just appended to the file."""
        tail = self._tails.setdefault(path, _Tail())
        joined = tail.data + complete
        if tail.from_start and not tail.head and self.headed(path):
            tail.head = joined[: joined.find(b"\n") + 1]
        cut = _start_of_last_lines(joined, self.lines)
        if cut:
            tail.from_start = False
        tail.data = joined[cut:]

    def reset(self, path: Path) -> None:
        """The file is read again from its start (truncated, rotated)."""
        self._tails.pop(path, None)

    def current(self) -> dict[Path, bytes]:
        """Each file's tail as a reader should see it: its header line, then its last lines."""
        out: dict[Path, bytes] = {}
        for path, tail in self._tails.items():
            if not tail.data:
                continue
            header = b"" if tail.from_start else tail.head
            out[path] = header + tail.data
        return out


def _start_of_last_lines(data: bytes, lines: int) -> int:
    """The offset where the last `lines` lines of `data` (which ends with a newline) begin."""
    end = len(data) - 1
    for _ in range(lines):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            return 0
    return end + 1


def read_tail(target: Path, tails: dict[Path, bytes], options: ReadOptions, scratch: Path):
    """The tails read as the format's reader reads a log of those lines (None: nothing to
    read yet, or they do not read as a log on their own)."""
    from stabilitycli.ingest import read

    if not tails:
        return None
    if options.format_in == "rank_dir":
        from stabilitycli.ingest.rank_dir import read_joined

        try:
            run = read_joined(target, tails, options)
        except StabInputError:
            run = None
        if run is not None:
            return run
    shutil.rmtree(scratch, ignore_errors=True)
    copy = scratch / target.name
    for path, data in tails.items():
        where = copy if path == target else copy / path.relative_to(target)
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(data)
    try:
        return read(copy, options)
    except StabInputError:
        return None
