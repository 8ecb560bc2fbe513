"""Replaying a finished log as a live one: its bytes written into a growing copy in
random-sized chunks (cutting lines and records in half), with a clock that writes the next
chunk instead of sleeping, so that `stab watch`'s loop runs at full speed."""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REAL_LOGS, ROOT

PASTED_LOGS = ROOT.parent / "shared" / "pasted-logs"
REWRITTEN = (".gz", ".zst", ".bz2", ".xz", ".parquet", ".arrow", ".ipc", ".feather", ".json")


def chunk_writes(src: Path, dst: Path, rng: random.Random, pieces: int) -> list[Callable]:
    """Writes that together turn `dst` into a byte copy of `src`."""
    data = src.read_bytes()
    dst.parent.mkdir(parents=True, exist_ok=True)
    if _written_whole(src):
        return [lambda: dst.write_bytes(data)]
    if src.name.lower().endswith(REWRITTEN):
        # saved whole again and again: first half-written (a reader sees a cut file), then whole
        cut = rng.randrange(len(data) + 1)
        return [lambda: dst.write_bytes(data[:cut]), lambda: dst.write_bytes(data)]
    cuts = sorted(rng.sample(range(1, len(data)), min(pieces - 1, max(len(data) - 1, 0))))
    bounds = [0, *cuts, len(data)]

    def append(a: int, b: int) -> Callable:
        def write() -> None:
            with open(dst, "ab") as sink:
                sink.write(data[a:b])

        return write

    return [append(a, b) for a, b in itertools.pairwise(bounds)]


def _written_whole(src: Path) -> bool:
    """An MLflow file store writes a run's meta.yaml, tags and params once, whole; only its
    metric histories grow line by line."""
    parts = src.parts
    return "mlruns" in parts and (src.name == "meta.yaml" or parts[-2] in ("tags", "params"))


def replay_writes(src: Path, dst: Path, rng: random.Random, pieces: int = 6) -> list[Callable]:
    """For a file, its chunks; for a folder, every file's chunks interleaved at random."""
    if src.is_file():
        return chunk_writes(src, dst, rng, pieces)
    queues = []
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        queues.append(chunk_writes(path, dst / path.relative_to(src), rng, pieces))
    # the writers of a run folder (one a rank) begin together, as a job's ranks do
    heads = [q.pop(0) for q in queues if q]
    out: list[Callable] = [lambda: [write() for write in heads]]
    rest: list[Callable] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        rest.append(queue.pop(0))
    # a poll sees several files grown at once: at most `pieces` polls for the whole folder
    size = -(-len(rest) // pieces) if rest else 1
    for i in range(0, len(rest), size):
        batch = rest[i : i + size]
        out.append(lambda batch=batch: [write() for write in batch])
    return out


@dataclass
class ReplayClock:
    """A clock whose sleep writes the next chunk: each poll sees one more write."""

    writes: list[Callable]
    t: float = 0.0
    on_sleep: list[Callable] = field(default_factory=list)

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        if self.writes:
            self.writes.pop(0)()
        for hook in self.on_sleep:
            hook()

    def cpu(self) -> float:
        return 0.0  # judging is free: every poll with new records is judged


def copy_beside(src: Path, dst: Path) -> None:
    """The files `stab analyze` reads beside a log (manifest, config) go beside the replay."""
    if src.is_file():
        for name in ("manifest.json", "stab.toml", "pyproject.toml"):
            if (src.parent / name).is_file():
                shutil.copyfile(src.parent / name, dst.parent / name)


def live_inputs() -> list[Path]:
    """Every fixture, real and pasted log (files, and folders a reader takes whole)."""
    from stabilitycli.ingest import choose_reader
    from stabilitycli.ingest.options import ReadOptions
    from stabilitycli.watch.session import SOURCES

    tops = [ROOT / "fixtures", REAL_LOGS, PASTED_LOGS]
    found: list[Path] = []
    for top in tops:
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(top).parts
            if any(p.startswith(".") or p.endswith(".md") for p in rel):
                continue
            if path.name in ("expected.json", "manifest.json", "stab.toml", "pyproject.toml"):
                continue
            try:
                name, chosen, _ = choose_reader(str(path), ReadOptions())
            except Exception:
                continue
            if Path(chosen) != path or not _followed(SOURCES, name):
                continue
            found.append(path)
    return found


def _followed(package: str, name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(f"{package}.{name}") is not None


def label(path: Path) -> str:
    for top in (ROOT, ROOT.parent):
        if path.is_relative_to(top):
            return os.path.relpath(path, top)
    return str(path)


@dataclass
class TailClock(ReplayClock):
    """A replay clock whose every CPU reading is a second later: past the first judgment the
    CPU budget never allows a whole-run judgment, so every later poll gets a tail judgment
    (what a long run gets between its throttled judgments), whatever the machine's speed."""

    spent: float = 0.0

    def cpu(self) -> float:
        self.spent += 1.0
        return self.spent
