"""Follow a TensorBoard log dir, run folder or event file while its writer appends to it.

Each event file is read from the end of its last complete record: a record cut
off mid-write (its length says more bytes than the file holds yet) is left for
the next poll, so nothing is rejected that the writer is still writing. New
event files (a resumed job opens one, a new rank folder appears) are picked up
on the poll that first sees them. `snapshot` hands what was collected to the
reader's own `read_runs`, so run selection, resumes, restarts and per-rank
folders are decided by the same code as `stab analyze`: the snapshot is the
reader's `read` on the bytes up to each file's last complete record.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData
from stabilitycli.ingest.limits import limits_in_force
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tensorboard import reader
from stabilitycli.watch.follow import Poll
from stabilitycli.watch.sources._live_files import Once, input_boundary, merge_sources

# a record's place in its run is (file, record): the file's index in these high bits keeps
# the order the reader gets by counting records across files, whatever each file grows to
_FILE_SHIFT = 40
# point frames kept per folder before they are joined into one
_PARTS_MAX = 64


@dataclass
class _EventFile:
    """How far one event file has been read."""

    path: Path
    offset: int = 0  # bytes read: the end of the last complete record
    numbers: int = 0  # record numbers used so far (damaged records use one too)
    records: int = 0  # valid records framed so far
    identity: tuple[int, int] | None = None
    source: SourceInfo = field(default_factory=lambda: SourceInfo(path="", format=reader.NAME))


@dataclass
class _Folder:
    """One run folder: its files in name order and the points collected from them."""

    files: list[_EventFile] = field(default_factory=list)
    collector: reader.Collector = field(default_factory=reader.Collector)


class TensorBoardFollower:
    """A growing TensorBoard run: see the module doc."""

    def __init__(self, target: str, options: ReadOptions) -> None:
        self.path = Path(target)
        self.options = options
        self.limits = options.limits or limits_in_force()
        self.display = str(target)
        self.folders: dict[str, _Folder] = {}
        self.bytes_read = 0  # every byte taken from the event files: what polls cost
        self.once = Once()

    def poll(self) -> Poll:
        result = Poll()
        if not self.path.exists():
            self.once.tell(result.problems, "", f"{self.path}: gone (deleted or moved)")
            return result
        self.once.clear("")
        try:
            runs = reader.find_runs(self.path)
        except (OSError, StabInputError) as err:
            why = err.reason if isinstance(err, StabInputError) else str(err)
            self.once.tell(result.problems, "list", f"{self.path}: cannot list it ({why})")
            return result
        self.once.clear("list")
        for name in [*runs, *(name for name in self.folders if name not in runs)]:
            files = runs.get(name, [])
            folder = self.folders.setdefault(name, _Folder())
            known = [f.path for f in folder.files]
            if files[: len(known)] != known and set(known) <= set(files):
                # a file sorts before one already read: the record order changed
                result.reread = f"{name}: an event file appeared before those already read"
                folder = self.folders[name] = _Folder()
                known = []
            folder.files += [_EventFile(p) for p in files if p not in known]
            if not self._read_folder(folder, files, result):
                result.reread = f"{name}: an event file shrank or was replaced; read again"
                folder = self.folders[name] = _Folder([_EventFile(f.path) for f in folder.files])
                self._read_folder(folder, files, result)
        return result

    def _read_folder(self, folder: _Folder, present: list[Path], result: Poll) -> bool:
        """Read what each file gained; False when one shrank (the folder is read anew)."""
        for index, ef in enumerate(folder.files):
            if ef.path not in present:
                line = f"{ef.path}: gone (deleted or moved); keeping what was read"
                self.once.tell(result.problems, str(ef.path), line)
                continue
            stretch = self.once.read(result.problems, ef.path, ef.offset, ef.identity)
            if stretch is None:
                continue
            if stretch.shrunk:
                return False
            ef.identity = stretch.identity
            if stretch.data:
                self._add(folder, index, ef, stretch.data, result)
        return True

    def _add(self, folder: _Folder, index: int, ef: _EventFile, data: bytes, result: Poll) -> None:
        self.bytes_read += len(data)
        ef.source.path = str(ef.path.parent)
        added = reader.add_event_records(
            data,
            ef.path,
            folder.collector,
            ef.source,
            self.limits,
            seq_base=index << _FILE_SHIFT,
            number_base=ef.numbers,
            offset=ef.offset,
            live=True,
        )
        ef.offset += added.consumed
        ef.numbers += added.numbers_used
        ef.records += added.records
        result.records_read += added.records
        collector = folder.collector
        if len(collector.bulk) > _PARTS_MAX:
            import polars as pl

            collector.bulk = [pl.concat(collector.bulk)]

    def snapshot(self) -> RunData:
        with input_boundary(self.display, reader.NAME):
            return self._snapshot()

    def _snapshot(self) -> RunData:
        pool = {}
        for name, folder in self.folders.items():
            files = [f.path for f in folder.files]
            source = SourceInfo(path=str(files[0].parent), format=reader.NAME)
            merge_sources(source, [f.source for f in folder.files])
            run = reader.RunFolder(name, files, limits=self.limits)
            records = sum(f.records for f in folder.files)
            pool[name] = run.loaded(_copy(folder.collector), source, records)
        return reader.read_runs(self.path, self.options, pool)

    def close(self) -> None:
        """Nothing is held open between polls."""


def _copy(collector: reader.Collector) -> reader.Collector:
    """A collector the snapshot may close (`finish_points` sets its frame) without
    touching the one that goes on collecting."""
    import polars as pl

    twin = reader.Collector()
    twin.__dict__.update(collector.__dict__)
    # polls interleave the files of a folder: the points go back to (file, record) order,
    # which a collector of one part takes for granted
    if collector.bulk:
        twin.bulk = [pl.concat(collector.bulk).sort(["seq", "sub"])]
    for name in ("tags", "steps", "values", "seqs", "subs"):
        setattr(twin, name, list(getattr(collector, name)))
    twin.plugin_of, twin.hparams = dict(collector.plugin_of), dict(collector.hparams)
    return twin


def follow(target: str, options: ReadOptions) -> TensorBoardFollower:
    return TensorBoardFollower(target, options)
