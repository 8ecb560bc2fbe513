"""What the followers of local files share: which files grow by appending, and how."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stabilitycli.ingest.options import ReadOptions
from stabilitycli.watch.mirror import Boundary, MirrorFollower

# files a writer rewrites or that are whole only when closed: copied whole when changed
_REWRITTEN = (".gz", ".zst", ".bz2", ".xz", ".parquet", ".arrow", ".ipc", ".feather", ".json")


def appended(path: Path) -> bool:
    """Whether a file grows by appending records (a log, a CSV), else it is copied whole."""
    return not path.name.lower().endswith(_REWRITTEN)


def follow_appended(
    target: str, options: ReadOptions, name: str, boundary: Boundary | None = None
) -> MirrorFollower:
    """A log (or a folder of logs) that grows at its end: new complete records each poll."""
    return MirrorFollower(Path(target), options, name, boundary, appended)


def follow_rewritten(
    target: str, options: ReadOptions, name: str, keep: Callable[[Path], bool] | None = None
) -> MirrorFollower:
    """Files a writer saves whole again and again: read again when they change."""
    return MirrorFollower(Path(target), options, name, appended=lambda _path: False, keep=keep)
