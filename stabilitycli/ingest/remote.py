"""Logs in an object store (`s3://`, `gs://`) or named by a `file://` URI (issue 13).

The filesystem layer is `pyarrow.fs`, already a dependency: it takes
credentials the way the AWS and Google SDKs do (the environment, a profile,
instance metadata) and an endpoint for S3-compatible stores (`--endpoint-url`,
or `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, the variables the AWS tools
read).

Every reader takes a local path, and several read a folder (TensorBoard,
MLflow, per-rank logs), so the object, or every object under the prefix, is
copied into a private temporary folder and read from there with the reader a
local copy would get; a single log comes with the files readers look for beside
it (`SIDECARS`), and a run whose reader looks further (Lightning's earlier
versions) is named by its prefix. Each object is refused past `max_input_bytes` before it
is fetched, and a prefix past `max_walk_files` objects before any is. The
source, the warnings and every error name the URI, never the temporary copy.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from stabilitycli.core.errors import StabInputError, StabUsageError, one_line, visible
from stabilitycli.ingest._store_clock import Progress, StoreClock, cut_when_abandoned
from stabilitycli.ingest.limits import InputLimits, limit_hit

SCHEMES = ("s3", "gs", "gcs", "file")
# read beside a log by the readers (_apply_dtype, lightning, hf_trainer): fetched with it
SIDECARS = ("manifest.json", "hparams.yaml", "scaler.pt")
_COPY_BYTES = 1 << 20  # one unit of progress: a store under 35 KB/s misses 30 s


def is_object_uri(text: str) -> bool:
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def file_uri_path(text: str) -> Path | None:
    """The local path a `file://` URI names (None for any other URI)."""
    parts = urlsplit(text)
    if parts.scheme.lower() != "file":
        return None
    if parts.netloc not in ("", "localhost"):
        raise StabUsageError(f"{text}: a file URI on another host is not read (file:///PATH)")
    if not parts.path:  # `file://` alone: Path("") would be the working folder
        raise StabUsageError(f"{text}: no path in the file URI (file:///PATH)")
    return Path(unquote(parts.path))


def filesystem(uri: str, endpoint_url: str | None = None) -> tuple[Any, str]:
    """(a pyarrow filesystem, the object path in it) for an `s3://` or `gs://` URI."""
    import pyarrow.fs as pafs

    scheme, _, rest = uri.partition("://")
    key = rest.strip("/")
    if not key:
        raise StabInputError(uri, "no bucket in the URI")
    _check_object_uri(uri, rest)
    try:
        if scheme.lower() == "s3":
            return pafs.S3FileSystem(**_s3_settings(endpoint_url)), key
        return pafs.GcsFileSystem(), key
    except (OSError, ValueError) as err:
        raise StabInputError(uri, f"cannot open the object store: {one_line(err)}") from err


def _check_object_uri(uri: str, rest: str) -> None:
    """Refuse what the store would misread: credentials in the URI (never read from there,
    and never echoed) and an empty, `.` or `..` part in the object path."""
    bucket = rest.split("/", 1)[0]
    if "@" in bucket:
        scheme = uri.partition("://")[0]
        raise StabUsageError(
            f"{scheme}://...@{bucket.rpartition('@')[2]}: credentials in an object-store URI "
            "are not read; give them the way the AWS or Google tools take them (the "
            "environment, a profile)"
        )
    if any(part in ("", ".", "..") for part in rest.rstrip("/").split("/")):
        raise StabUsageError(
            f"{uri}: an empty, `.` or `..` part in the object path; name the object by its "
            "plain path (s3://BUCKET/PREFIX/NAME)"
        )


def _s3_settings(endpoint_url: str | None) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    endpoint = (
        endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        settings["endpoint_override"] = parts.netloc
        settings["scheme"] = parts.scheme
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        settings["region"] = region
    return settings


def _listing(clock: StoreClock, fs: Any, key: str, limits: InputLimits) -> tuple[bool, list[Any]]:
    """(whether the URI names one object, the objects `staged` copies): the object and the
    files a reader looks for beside it, or every object under the prefix."""
    import pyarrow.fs as pafs

    uri = clock.where
    info = _ask(clock, "looking the object up", lambda _: fs.get_file_info(key))
    if info.type == pafs.FileType.NotFound:
        raise StabInputError(uri, "no such object or prefix in the store")
    if info.type == pafs.FileType.File:
        # what a reader reads from the log's folder must not depend on where it is kept
        parent = str(PurePosixPath(key).parent)
        sidecars = [f"{parent}/{n}" for n in SIDECARS]
        beside = _ask(clock, "looking for files beside it", lambda _: fs.get_file_info(sidecars))
        return True, [info, *(i for i in beside if i.type == pafs.FileType.File and i.path != key)]
    everything = pafs.FileSelector(key, recursive=True)
    listed = _ask(clock, "listing the prefix", lambda _: fs.get_file_info(everything))
    objects = [i for i in listed if i.type == pafs.FileType.File]
    if len(objects) > limits.max_walk_files:
        raise limit_hit(
            uri,
            f"the prefix holds {len(objects):,} objects",
            "max_walk_files",
            limits.max_walk_files,
        )
    if not objects:
        raise StabInputError(uri, "no object under this prefix")
    return False, objects


@contextmanager
def staged(
    uri: str,
    limits: InputLimits,
    endpoint_url: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> Iterator[Path]:
    """A private local copy of the object, or of every object under the prefix.

    A key that cannot be a file inside the copy (`..`, an empty part, a name that is
    also a folder of other keys) is left out, with a warning through `warn` (stderr when
    none is given): a bucket is not trusted to say where stab writes.
    """

    fs, key = filesystem(uri, endpoint_url)
    port = _store_port(uri, endpoint_url)
    clock = StoreClock(uri, limits, lambda worker: cut_when_abandoned(worker, port))
    single, objects = _listing(clock, fs, key, limits)
    for item in objects:
        if item.size is not None and item.size > limits.max_input_bytes:
            where = item.path[len(key) :].lstrip("/") or PurePosixPath(key).name
            raise limit_hit(
                uri,
                f"{where} is {item.size:,} bytes",
                "max_input_bytes",
                limits.max_input_bytes,
            )
    # under the name of the folder it sits in: readers name a run by its parent folder
    name = PurePosixPath(key)
    top = (name.parent.name or "store", name.name)
    places: list[tuple[Any, tuple[str, ...]]]
    if single:
        places = [(item, (top[0], PurePosixPath(item.path).name)) for item in objects]
    else:
        places = [(item, (*top, *item.path[len(key) + 1 :].split("/"))) for item in objects]
    kept, refused = _plain_places(places)
    said = [f"{uri.rstrip('/')}: object {item.path!r} left out: {why}" for item, why in refused]
    if not kept:
        raise StabInputError(uri, f"no object here can be copied ({'; '.join(said)[:500]})")
    for message in said:
        (warn or _warn_on_stderr)(message)
    folder = tempfile.mkdtemp(prefix="stab-remote-")
    try:
        root = Path(folder).resolve()
        for item, parts in kept:
            target = root.joinpath(*parts)
            # proven, not assumed: every part is a plain name, so this never fails
            if not target.resolve().is_relative_to(root):
                raise AssertionError(f"{item.path!r} would be staged outside {root}")
            target.parent.mkdir(parents=True, exist_ok=True)
            fetch = functools.partial(_fetch, fs, item.path, target, limits)
            _ask(clock, f"fetching {item.path}", fetch)
        yield Path(folder) / top[0] / top[1]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_NAME_BYTES = 255  # the longest file name Linux, macOS and Windows file systems take


def _plain_places(
    places: list[tuple[Any, tuple[str, ...]]],
) -> tuple[list[tuple[Any, tuple[str, ...]]], list[tuple[Any, str]]]:
    """(the objects whose path parts are all plain names and clash with no folder, the
    others with why): what `staged` may write below its folder."""
    kept: list[tuple[Any, tuple[str, ...]]] = []
    refused: list[tuple[Any, str]] = []
    for item, parts in places:
        why = _not_plain(parts)
        if why:
            refused.append((item, why))
        else:
            kept.append((item, parts))
    folders = {parts[:end] for _, parts in kept for end in range(1, len(parts))}
    refused += [
        (item, "its name is also a folder of other objects")
        for item, parts in kept
        if parts in folders
    ]
    return [(item, parts) for item, parts in kept if parts not in folders], refused


def _not_plain(parts: tuple[str, ...]) -> str | None:
    for part in parts:
        if part in ("", ".", ".."):
            return "its key holds an empty, `.` or `..` part"
        if "\x00" in part or len(part.encode("utf-8", "surrogatepass")) > _NAME_BYTES:
            return "its key holds a part no file system takes as a file name"
    return None


def _warn_on_stderr(message: str) -> None:
    import sys

    print(f"stab: warning: {visible(message)}", file=sys.stderr)


def _fetch(
    fs: Any, object_path: str, target: Path, limits: InputLimits, progress: Progress
) -> None:
    """Copy one object to `target`, never past max_input_bytes (an object can grow); each
    chunk is progress, and an abandoned copy stops at its next chunk."""
    copied = 0
    with fs.open_input_stream(object_path) as source, open(target, "wb") as sink:
        while chunk := source.read(_COPY_BYTES):
            if progress.abandoned.is_set():
                return
            progress.tick()
            copied += len(chunk)
            if copied > limits.max_input_bytes:
                raise limit_hit(
                    object_path,
                    "the object grew past the limit while read",
                    "max_input_bytes",
                    limits.max_input_bytes,
                )
            sink.write(chunk)


def _store_port(uri: str, endpoint_url: str | None) -> int:
    """The TCP port the store's client connects to: the endpoint's, else HTTPS's."""
    settings = _s3_settings(endpoint_url) if uri.lower().startswith("s3") else {}
    endpoint = settings.get("endpoint_override")
    if endpoint is None:
        return 443
    parts = urlsplit(f"{settings['scheme']}://{endpoint}")
    return parts.port or (80 if parts.scheme == "http" else 443)


def _ask(clock: StoreClock, what: str, call: Callable[[Progress], Any]) -> Any:
    """One request to the store, within its deadlines; what it refuses (credentials,
    network) is one line."""
    try:
        return clock.call(what, call)
    except StabInputError:
        raise
    except OSError as err:
        raise StabInputError(clock.where, f"the object store refused: {one_line(err)}") from err


def read_staged(uri: str, options: Any, read: Callable[[str | Path, Any], Any]) -> Any:
    """The run at `uri`, read from a local copy by `read`, named by its URI throughout."""
    left_out: list[str] = []
    with staged(uri, options.limits, options.endpoint_url, left_out.append) as local:
        try:
            run = read(local, options)
        except StabInputError as err:
            raise StabInputError(
                _named(str(err.path), local, uri),
                _named(err.reason, local, uri),
                line=err.line,
                record=err.record,
            ) from None
    source = run.source
    source.path = _named(source.path, local, uri)
    source.warnings[:] = [*left_out, *(_named(w, local, uri) for w in source.warnings)]
    source.notes[:] = [_named(n, local, uri) for n in source.notes]
    return run


def _named(text: str, local: Path, uri: str) -> str:
    """`text` with the local copy's path given as the URI it came from."""
    return text.replace(str(local), uri.rstrip("/"))


@contextmanager
def mirrored(
    targets: list[str], options: Any
) -> Iterator[tuple[list[str], Callable[[str], str] | None]]:
    """A sweep's targets with every `s3://` / `gs://` prefix copied to a local folder (walked
    as a local folder is), and the function that names a local path by its URI again (None
    when no target was copied)."""
    from contextlib import ExitStack

    roots: list[tuple[str, str]] = []  # (local copy, the URI it stands for)
    local_targets: list[str] = []
    with ExitStack() as stack:
        for target in targets:
            if not is_object_uri(target):
                local_targets.append(target)
                continue
            path = file_uri_path(target)
            if path is not None:
                local_targets.append(str(path))
                continue
            local = stack.enter_context(staged(target, options.limits, options.endpoint_url))
            roots.append((str(local), target.rstrip("/")))
            local_targets.append(str(local))

        def to_uri(text: str) -> str:
            for local, uri in roots:
                text = text.replace(local, uri)
            return text

        yield local_targets, (to_uri if roots else None)


def content_sha256(uri: str, limits: InputLimits, endpoint_url: str | None = None) -> str | None:
    """A hash over what `staged` would copy (each object's path below the URI, size and
    modification time), from one listing and no download: equal, the run is unchanged.
    None when the store cannot be listed or holds nothing there."""
    import hashlib
    import json

    try:
        fs, key = filesystem(uri, endpoint_url)
        port = _store_port(uri, endpoint_url)
        clock = StoreClock(uri, limits, lambda worker: cut_when_abandoned(worker, port))
        single, objects = _listing(clock, fs, key, limits)
    except StabInputError:  # the store refused, or nothing is there
        return None
    base = str(PurePosixPath(key).parent) if single else key
    entries = sorted((i.path[len(base) :].lstrip("/"), i.size, i.mtime_ns) for i in objects)
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()
