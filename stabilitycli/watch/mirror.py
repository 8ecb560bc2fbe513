"""A private copy of what is complete in a growing file or folder, read by the format's reader.

A follower of local files keeps, for each file it follows, the offset up to which its
bytes are complete records (whole lines; for a multi-line format, whole records) and
copies only the new complete bytes into a spool folder that has the same names. The
snapshot is the format's reader run on the spool: by construction the same `RunData`
the reader gives on the bytes complete at that poll (its path named as the original).

A file that is rewritten in place rather than appended to (a `trainer_state.json`, a
Parquet table, a gzip stream) is copied whole when it changed and still reads.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.tail import LINE_FORMATS, TailKeeper, headed, read_tail

# complete(data) -> how many leading bytes of data are whole records
Boundary = Callable[[bytes], int]

# how many names at the end of a path the spool copy keeps
KEPT_NAMES = 4
# bytes read from a file at one poll at most: a huge backlog is taken over several polls
READ_BYTES = 16 << 20


def whole_lines(data: bytes) -> int:
    """Bytes up to and including the last newline: a line without one may still grow."""
    return data.rfind(b"\n") + 1


_RECORD_START = re.compile(rb"(?m)^(?!(?:>+ ?)?[ \t]|\r?$)")


def whole_blocks(data: bytes) -> int:
    """Bytes before the last record's first line (a line not indented): a record of a header
    and indented lines is whole only once the next one begins."""
    lines = whole_lines(data)
    start = None
    for start_match in _RECORD_START.finditer(data, 0, lines):
        start = start_match.start()
    return lines if start is None else start


@dataclass
class _Tracked:
    """One file followed: where its complete bytes end, and which file it was."""

    offset: int = 0
    inode: int | None = None
    signature: tuple[int, int] | None = None  # (size, mtime_ns) of a whole-copied file
    gone: bool = False
    denied: bool = False


class Mirror:
    """The spool copy of one file or of every file below one folder."""

    def __init__(
        self,
        target: Path,
        boundary: Boundary | None,
        appended: Callable[[Path], bool],
        keep: Callable[[Path], bool] = lambda _path: True,
    ):
        self.target = target
        self.keep = keep  # which files of a folder the reader may read (never the weights)
        self.boundary = boundary or whole_lines
        self.appended = appended  # whether a file grows by appending (else it is copied whole)
        self._dir = Path(tempfile.mkdtemp(prefix="stab-watch-"))
        # the last names of the path are kept: readers name the run after its folders
        # (`runs/x/log.jsonl`, `x/lightning_logs/version_0/metrics.csv`)
        kept = [part for part in target.resolve().parts[-KEPT_NAMES:] if part != "/"]
        self.spool = self._dir.joinpath(*kept)
        self.scratch = self._dir / ".scratch"
        (self.spool if target.is_dir() else self.spool.parent).mkdir(parents=True, exist_ok=True)
        self._files: dict[Path, _Tracked] = {}
        self.depth = 3  # rank_7/metrics.jsonl, version_0/metrics.csv: a run's own folders
        self.tails: TailKeeper | None = None  # each file's last lines, once a watch asks
        self._copy_sidecar()

    def _copy_sidecar(self) -> None:
        # the manifest beside a log gives its dtype to `stab analyze`: the copy has it too
        folder = self.target if self.target.is_dir() else self.target.parent
        manifest = folder / "manifest.json"
        if manifest.is_file() and not self.target.is_dir():
            shutil.copyfile(manifest, self.spool.parent / manifest.name)

    def files(self) -> list[Path]:
        if not self.target.is_dir():
            return [self.target]
        from stabilitycli.ingest.folders import walk

        found: list[Path] = []
        for folder, subfolders, others in walk(self.target, max_depth=self.depth):
            subfolders[:] = [d for d in subfolders if not d.name.startswith(".")]
            found += [folder / p.name for p in others if not p.name.startswith(".")]
        return sorted(p for p in found if self.keep(p) and p.is_file())

    def poll(self) -> Poll:
        poll = Poll()
        if not self.target.exists():
            self._lost(self.target, poll)
            return poll
        for path in self.files():
            self._poll_file(path, poll)
        return poll

    def _lost(self, path: Path, poll: Poll) -> None:
        tracked = self._files.setdefault(path, _Tracked())
        if not tracked.gone:
            tracked.gone = True
            poll.problems.append(
                f"{path}: deleted; keeping the {tracked.offset} bytes read "
                "and watching for it to come back"
            )

    def _copy_of(self, path: Path) -> Path:
        if path == self.target:
            return self.spool
        return self.spool / path.relative_to(self.target)

    def _poll_file(self, path: Path, poll: Poll) -> None:
        tracked = self._files.setdefault(path, _Tracked())
        try:
            stat = path.stat()
            with open(path, "rb") as handle:
                if tracked.gone:
                    tracked.gone = False
                    poll.problems.append(f"{path}: back; following it again")
                tracked.denied = False
                if self.appended(path):
                    self._append(path, handle, stat, tracked, poll)
                else:
                    self._whole(path, handle, stat, tracked, poll)
        except FileNotFoundError:
            self._lost(path, poll)
        except PermissionError:
            if not tracked.denied:
                tracked.denied = True
                poll.problems.append(
                    f"{path}: permission denied; keeping what was read and trying again"
                )

    def _append(self, path: Path, handle, stat: os.stat_result, tracked: _Tracked, poll: Poll):
        copy = self._copy_of(path)
        why = None
        if tracked.inode is not None and stat.st_ino != tracked.inode:
            why = "replaced by a new file (rotated)"
        elif stat.st_size < tracked.offset:
            why = f"truncated ({stat.st_size} bytes, {tracked.offset} read)"
        if why is not None:
            poll.reread = f"{path}: {why}; reading it again from its start"
            tracked.offset = 0
            copy.unlink(missing_ok=True)
            if self.tails is not None:
                self.tails.reset(path)
        tracked.inode = stat.st_ino
        if stat.st_size == tracked.offset:
            return
        handle.seek(tracked.offset)
        data = handle.read(READ_BYTES)
        done = self.boundary(data)
        if done == 0:
            return
        copy.parent.mkdir(parents=True, exist_ok=True)
        with open(copy, "ab") as sink:
            sink.write(data[:done])
        tracked.offset += done
        poll.records_read += data.count(b"\n", 0, done)
        if self.tails is not None:
            self.tails.take(path, data[:done])

    def _whole(self, path: Path, handle, stat: os.stat_result, tracked: _Tracked, poll: Poll):
        signature = (stat.st_size, stat.st_mtime_ns)
        if signature == tracked.signature:
            return
        data = handle.read()
        copy = self._copy_of(path)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
        if tracked.signature is not None:
            poll.reread = f"{path}: rewritten; reading it again"
        tracked.signature = signature
        tracked.offset = len(data)
        poll.records_read += 1

    def rename(self, run) -> None:
        """Name the spool's paths in the run as the original ones."""
        spool, original = str(self.spool), str(self.target)
        source = run.source
        source.path = source.path.replace(spool, original)
        source.warnings[:] = [w.replace(spool, original) for w in source.warnings]
        source.notes[:] = [n.replace(spool, original) for n in source.notes]
        source.rejections[:] = [
            replace(r, reason=r.reason.replace(spool, original)) for r in source.rejections
        ]

    def renamed_error(self, err: StabInputError) -> StabInputError:
        """The reader's error on the spool, naming the original path."""
        spool, original = str(self.spool), str(self.target)
        return StabInputError(
            err.path.replace(spool, original),
            err.reason.replace(spool, original),
            line=err.line,
            record=err.record,
        )

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class MirrorFollower:
    """A `Follower` of local files: the format's reader on the spool of what is complete."""

    def __init__(
        self,
        target: Path,
        options: ReadOptions,
        name: str,
        boundary: Boundary | None = None,
        appended: Callable[[Path], bool] | None = None,
        keep: Callable[[Path], bool] | None = None,
    ):
        self.name = name
        self.display = str(target)
        # the first bytes picked the reader; a later poll's bytes must not re-pick it
        self.options = replace(options, format_in=name)
        # ...but where analyze picked it by sniffing, its fallback to the other text
        # families applies to the watch's judgments too
        self._sniffed = not (options.format_in or options.pattern)
        self.mirror = Mirror(target, boundary, appended or (lambda _p: True), keep or _a_log)

    def poll(self) -> Poll:
        return self.mirror.poll()

    def snapshot(self):
        from stabilitycli.ingest import read

        try:
            run = read(self.mirror.spool, self.options)
        except StabInputError as err:
            if not self._may_fall_back():
                raise self.mirror.renamed_error(err) from None
            run = None
        if run is None or ("loss" not in run.frame.columns and self._may_fall_back()):
            try:  # as analyze reads it: another text family may read what this one cannot
                run = read(self.mirror.spool, replace(self.options, format_in=None))
            except StabInputError as err:
                raise self.mirror.renamed_error(err) from None
        self.mirror.rename(run)
        return run

    def keep_tail(self, lines: int) -> bool:
        """Keep each file's last `lines` lines from now on; whether this format has a tail."""
        if self.name not in LINE_FORMATS:
            return False
        self.mirror.tails = TailKeeper(lines, headed(self.name))
        return True

    def tail(self):
        """The last lines of each file, read by the format's reader (None: none to read)."""
        if self.mirror.tails is None:
            return None
        scratch = self.mirror.scratch / "tail"  # beside the spool, never read with it
        return read_tail(self.mirror.target, self.mirror.tails.current(), self.options, scratch)

    def _may_fall_back(self) -> bool:
        from stabilitycli.ingest.fallback import TEXT_FAMILIES

        return self._sniffed and self.name in TEXT_FAMILIES and self.mirror.spool.is_file()

    def close(self) -> None:
        self.mirror.close()


def _a_log(path: Path) -> bool:
    """A file in a run's folder that a reader may read: not weights, code or documents."""
    from stabilitycli.ingest import NOT_LOGS

    name = path.name.lower()
    return name.endswith(("hparams.yaml", "manifest.json")) or not name.endswith(NOT_LOGS)
