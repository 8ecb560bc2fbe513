"""What a run's stored result depends on: its bytes on disk and how it was analysed.

A file is known by its size and mtime_ns (a stat, no read: rereading 2,000 logs to
hash them would cost what analysing them costs). A run folder (TensorBoard, MLflow,
per-rank files) by a hash over the sorted (relative path, size, mtime_ns) of the
files below it, so a file added, removed or rewritten anywhere in it shows. The
settings part holds the stab version, every threshold in force for the run with its
source (config files apply per folder, and the document names the source), the read
options and the rule selection: a change to any of them changes what analysis gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as stat_mode
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.folders import WalkReport, walk


@dataclass(frozen=True)
class Fingerprint:
    # "file", "dir", "object" (in an object store) or "missing" (a path not there is a result)
    kind: str
    size_bytes: int | None = None
    mtime_ns: int | None = None
    content_sha256: str | None = None  # run folders only

    def key(self) -> str:
        return f"{self.kind}:{self.size_bytes}:{self.mtime_ns}:{self.content_sha256}"


def of_location(location: str, options: Any = None) -> Fingerprint | None:
    """The content fingerprint of a run on local disk or in an object store (from a
    listing: each object's size and modification time); None for what has none here
    (another URI, standard input): such a run is always analysed afresh."""
    from stabilitycli.ingest import remote

    if remote.is_object_uri(location) and remote.file_uri_path(location) is None:
        from stabilitycli.ingest.limits import limits_in_force

        limits = getattr(options, "limits", None) or limits_in_force()
        content = remote.content_sha256(location, limits, getattr(options, "endpoint_url", None))
        return None if content is None else Fingerprint("object", content_sha256=content)
    if location == "-" or "://" in location:
        return None
    try:
        stat = os.stat(location)
    except FileNotFoundError:
        return Fingerprint("missing")
    except OSError:
        return None  # unreadable metadata: no claim that it is unchanged
    if not os.path.isdir(location):
        return Fingerprint("file", stat.st_size, stat.st_mtime_ns)
    content = _tree_sha256(location)
    return None if content is None else Fingerprint("dir", content_sha256=content)


def _tree_sha256(folder: str) -> str | None:
    """None when the folder cannot be walked within the limits: analysed afresh."""
    entries: list[tuple[str, int, int]] = []
    try:
        for _parent, _folders, files in walk(Path(folder), follow_symlinks=False):
            for file in files:
                try:
                    info = file.stat()
                except OSError:
                    continue  # a dangling link: not content the readers could use
                entries.append((os.path.relpath(file, folder), info.st_size, info.st_mtime_ns))
    except StabInputError:  # past max_walk_files or max_walk_depth
        return None
    digest = hashlib.sha256(json.dumps(sorted(entries)).encode())
    return digest.hexdigest()


def walk_sha256(root: str) -> str | None:
    """A hash over every file and folder below `root` (relative path; a file's size and
    mtime_ns): equal, a walk for runs would find what it found before. None when the
    tree holds a symlink (the walk follows links this hash does not) or cannot be read
    whole: such a tree is walked every time."""
    entries: list[tuple[str, int, int]] = []
    report = WalkReport()
    try:
        for _parent, folders, files in walk(Path(root), follow_symlinks=False, report=report):
            for entry in folders + files:
                try:
                    info = os.lstat(entry)
                except OSError:
                    return None
                if stat_mode.S_ISLNK(info.st_mode):
                    return None
                is_file = stat_mode.S_ISREG(info.st_mode)
                size = info.st_size if is_file else -1
                mtime = info.st_mtime_ns if is_file else 0
                entries.append((os.path.relpath(entry, root), size, mtime))
    except StabInputError:  # past max_walk_files or max_walk_depth
        return None
    if report.unreadable or report.loops:
        return None
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def options_sha256(options: Any, select: tuple[str, ...], ignore: tuple[str, ...]) -> str:
    """The read options (metric overrides, step/rank keys, limits...) and the rule
    selection, which are the same for every run of a sweep."""
    from stabilitycli import __version__

    fields = asdict(options) if options is not None else None
    text = json.dumps(
        {"stab": __version__, "options": fields, "select": select, "ignore": ignore},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()


class ThresholdKeys:
    """Every threshold in force for a run, with its source, as one hash; None when the
    settings cannot be loaded (the analysis will report why). One per sweep: runs side
    by side share a config search, and a config edited between sweeps is read anew."""

    def __init__(self, set_values: dict[str, str]) -> None:
        self._set_values = dict(set_values)
        self._by_folder: dict[str, str | None] = {}

    def __call__(self, location: str, content: Fingerprint) -> str | None:
        folder = _config_folder(location, content)
        if folder not in self._by_folder:
            self._by_folder[folder] = _thresholds_of_folder(folder, self._set_values)
        return self._by_folder[folder]


def _config_folder(location: str, content: Fingerprint) -> str:
    # the folder the config search starts from (settings.load_settings), told by the
    # fingerprint's stat: no second stat per run
    if content.kind == "missing":
        return str(Path.cwd())
    if content.kind in ("dir", "object"):  # an object store run: load_settings gets its URI
        return location
    return os.path.dirname(location) or "."


def _thresholds_of_folder(folder: str, set_values: dict[str, str]) -> str | None:
    from stabilitycli.core.errors import StabUsageError
    from stabilitycli.core.settings import load_settings

    try:
        _, settings = load_settings(folder, set_values)
    except StabUsageError:
        return None
    in_force = [(s.name, s.value, s.source) for s in settings.entries]
    return hashlib.sha256(json.dumps(in_force, default=str).encode()).hexdigest()
