"""TensorBoard event files (`events.out.tfevents.*`), read without TensorFlow or tensorboard.

The target is one event file or a log directory. Every directory that directly
holds event files is one run; its files are read in file-name order (the name
carries the creation time, so that is wall-time order) and concatenated, so a
resumed job's step going backwards is seen as a restart. When the run folders
are named like ranks (`rank_3`, `rank3`, `worker-3`, `gpu_3`) they become one
per-rank run; otherwise several runs need `--run`.

Scalars come in three encodings, all read (every point, never downsampled):

* `simple_value` (float32): tensorboardX, torch `add_scalar`;
* a scalar tensor with `float_val`/`double_val`: torch `add_scalar(new_style=True)`;
* a scalar tensor with raw little-endian bytes in `tensor_content`: TF2
  `tf.summary.scalar` (its plugin metadata is only on a tag's first event).

Values are float32 for most writers: 1e-3 reads back as 0.0010000000474974513.
Records failing their CRC are skipped and named (see `_tfrecord`). The dtype
comes from hparams (`precision`, `mixed_precision`, `bf16`, ...) when logged.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from ..errors import StabInputError
from ..frame import RunData
from ..model import SourceInfo
from . import _tbproto as tbp
from ._points import points_to_run, rank_from_name
from .options import ReadOptions

NAME = "tensorboard"
EVENT_MARK = "tfevents"
# a directory sniff stops after this many entries: a TB log dir shows its files early
SNIFF_ENTRY_LIMIT = 20_000
HPARAMS_PREFIX = "_hparams_/"
_CONTENT_FORMATS = {
    tbp.DT_FLOAT: "<f",
    tbp.DT_DOUBLE: "<d",
    tbp.DT_HALF: "<e",
    tbp.DT_INT32: "<i",
    tbp.DT_INT64: "<q",
}
_NUMERIC = {*_CONTENT_FORMATS, tbp.DT_BFLOAT16, tbp.DT_BOOL}
_EVENT_NAME = re.compile(r"events\.out\.tfevents\.")


def _is_event_file(name: str) -> bool:
    return _EVENT_NAME.search(name) is not None


def sniff(path: Path, head: bytes) -> bool:
    if path.is_file():
        return _is_event_file(path.name)
    if not path.is_dir():
        return False
    seen = 0
    for _root, _dirs, files in os.walk(path):
        if any(_is_event_file(name) for name in files):
            return True
        seen += len(files) + len(_dirs)
        if seen > SNIFF_ENTRY_LIMIT:
            return False
    return False


# --- finding runs ----------------------------------------------------------------


def find_runs(path: Path) -> dict[str, list[Path]]:
    """`{run name: event files in name order}`; a run is a folder holding event files."""
    if path.is_file():
        return {path.parent.name or ".": [path]}
    runs: dict[str, list[Path]] = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        events = sorted(name for name in files if _is_event_file(name))
        if events:
            rel = Path(root).relative_to(path).as_posix()
            runs[rel] = [Path(root) / name for name in events]
    return runs


def select_runs(
    runs: dict[str, list[Path]], path: Path, options: ReadOptions
) -> tuple[dict[str, list[Path]], dict[str, int] | None]:
    """The run(s) to read and, for rank-named folders, run -> rank."""
    where = str(path)
    if not runs:
        raise StabInputError(where, "no TensorBoard event files (events.out.tfevents.*) found")
    if options.run:
        wanted = options.run.strip().strip("/")
        chosen = {
            name: files
            for name, files in runs.items()
            if name == wanted or name.rsplit("/", 1)[-1] == wanted or name.startswith(wanted + "/")
        }
        if not chosen:
            raise StabInputError(where, f"no run folder {wanted!r}; runs here: {_listing(runs)}")
        runs = chosen
    if len(runs) == 1:
        return runs, None
    ranks = {name: _rank_of_run(name, options.rank_pattern) for name in runs}
    values = list(ranks.values())
    if None not in values and len(set(values)) == len(values):
        return runs, {name: int(rank) for name, rank in ranks.items() if rank is not None}
    raise StabInputError(
        where, f"{len(runs)} TensorBoard runs found; choose one with --run FOLDER: {_listing(runs)}"
    )


def _rank_of_run(name: str, pattern: str | None) -> int | None:
    """The rank a run folder names: its own name first, then its parents (`rank_3/tb`)."""
    for part in reversed(name.split("/")):
        rank = rank_from_name(part, pattern)
        if rank is not None:
            return rank
    return None


def _listing(runs: dict[str, list[Path]], limit: int = 12) -> str:
    names = list(runs)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


# --- decoding ---------------------------------------------------------------------


class _Collector:
    """Scalar points of one run, as column lists, plus what was not a scalar."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.steps: list[int] = []
        self.values: list[float] = []
        self.plugin_of: dict[str, str] = {}
        self.hparams: dict[str, str] = {}
        self.skipped_values = 0  # histograms, images, text, non-scalar tensors
        self.points = None  # the polars frame, once collected

    def add_event(self, payload: bytes, event_cls) -> None:
        event = event_cls.FromString(payload)
        values = event.summary.value  # empty for file_version, graph and log events
        if not values:
            return
        step = event.step
        for value in values:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                self.tags.append(value.tag)
                self.steps.append(step)
                self.values.append(value.simple_value)
            elif kind == "tensor":
                self._add_tensor(value, step)
            elif (
                value.tag.startswith(HPARAMS_PREFIX)
                or value.metadata.plugin_data.plugin_name == "hparams"
            ):
                self._add_hparams(value)
            else:
                self.skipped_values += 1

    def _add_tensor(self, value, step: int) -> None:
        tag = value.tag
        if value.HasField("metadata"):
            plugin = value.metadata.plugin_data.plugin_name
            self.plugin_of.setdefault(tag, plugin)
        plugin = self.plugin_of.get(tag, "")
        if plugin == "hparams" or tag.startswith(HPARAMS_PREFIX):
            self._add_hparams(value)
            return
        number = _tensor_scalar(value.tensor, plugin)
        if number is None:
            self.skipped_values += 1
            return
        self.tags.append(tag)
        self.steps.append(step)
        self.values.append(number)

    def _add_hparams(self, value) -> None:
        content = value.metadata.plugin_data.content
        if not content:
            return
        try:
            data = tbp.messages()["HParamsPluginData"].FromString(content)
        except Exception:  # noqa: BLE001 - hparams are a nicety; a bad blob must not stop the read
            return
        for entry in data.session_start_info.hparams:
            kind = entry.value.WhichOneof("kind")
            if kind == "string_value":
                self.hparams[entry.key] = entry.value.string_value
            elif kind == "bool_value":
                self.hparams[entry.key] = str(entry.value.bool_value)
            elif kind == "number_value":
                self.hparams[entry.key] = repr(entry.value.number_value)


def _tensor_scalar(tensor, plugin: str) -> float | None:
    """The one number of a scalar tensor, or None for anything else."""
    dtype = tensor.dtype
    if dtype not in _NUMERIC:
        return None
    dims = tensor.tensor_shape.dim
    if plugin not in ("", "scalars"):
        return None
    if plugin != "scalars" and len(dims) and any(d.size != 1 for d in dims):
        return None
    content = tensor.tensor_content
    if content:
        if dtype == tbp.DT_BFLOAT16 and len(content) == 2:
            return struct.unpack("<f", b"\x00\x00" + content)[0]
        if dtype == tbp.DT_BOOL and len(content) == 1:
            return float(content[0])
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, content)[0])
    for field in ("float_val", "double_val", "int_val", "int64_val", "bool_val"):
        values = getattr(tensor, field)
        if len(values) == 1:
            return float(values[0])
    if len(tensor.half_val) == 1:
        bits = tensor.half_val[0] & 0xFFFF
        if dtype == tbp.DT_BFLOAT16:
            return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
        return struct.unpack("<e", struct.pack("<H", bits))[0]
    return None


def read_event_file(
    path: Path, collector: _Collector, source: SourceInfo, verify_data: bool = True
) -> int:
    """Add one event file's scalars to `collector`; returns the number of records read."""
    from google.protobuf.message import DecodeError

    from ._tfrecord import RecordReader

    event_cls = tbp.messages()["Event"]
    reader = RecordReader(path.read_bytes(), verify_data=verify_data)
    count = 0
    for number, payload in reader:
        count += 1
        try:
            collector.add_event(payload, event_cls)
        except DecodeError as err:
            source.reject(number, f"{path.name}: record is not a TensorBoard Event ({err})")
    for problem in reader.problems:
        if problem.kind == "truncated":
            source.warnings.append(f"{path}: {problem.describe()}")
            source.reject(problem.record, f"{path.name}: last record cut off mid-write")
        else:
            source.warnings.append(f"{path}: {problem.describe()}")
            source.reject(problem.record, f"{path.name}: {problem.describe()}")
    return count


def _run_points(files: list[Path], source: SourceInfo) -> tuple[_Collector | None, str | None]:
    """One run's scalar points (key, step, value, _order), or None and why there are none."""
    import polars as pl

    collector = _Collector()
    records = sum(read_event_file(file, collector, source) for file in files)
    if collector.skipped_values:
        source.notes.append(
            f"{collector.skipped_values} non-scalar summary value(s) ignored (histograms, images, text)"
        )
    if not collector.tags:
        names = ", ".join(f.name for f in files[:3])
        return (
            None,
            f"no scalar summaries in {len(files)} event file(s) ({names}; {records} record(s) read)",
        )
    points = pl.DataFrame(
        {"key": collector.tags, "step": collector.steps, "value": collector.values},
        schema={"key": pl.String, "step": pl.Int64, "value": pl.Float64},
    )
    collector.points = points.with_row_index("_order").with_columns(pl.col("_order").cast(pl.Int64))
    return collector, None


def read(path: Path, options: ReadOptions) -> RunData:
    """Read the selected TensorBoard run(s) into the canonical frame."""
    import polars as pl

    from ._mlflow_common import dtype_from

    runs, ranks = select_runs(find_runs(path), path, options)
    first = next(iter(runs))
    label = (
        (first if first != "." else path.name) if len(runs) == 1 else f"{len(runs)} per-rank runs"
    )
    source = SourceInfo(path=str(path), format=NAME, run=label)
    parts = []
    hparams: dict[str, str] = {}
    for name, files in runs.items():
        collector, empty = _run_points(files, source)
        if collector is None:
            if ranks is None:
                raise StabInputError(str(path), empty)
            source.warnings.append(f"run {name}: {empty}")
            continue
        hparams = hparams or collector.hparams
        points = collector.points
        if ranks is not None:
            points = points.with_columns(pl.lit(ranks[name], dtype=pl.Int64).alias("rank"))
        parts.append(points)
    if not parts:
        raise StabInputError(str(path), "none of the runs holds scalar summaries")
    if ranks is not None:
        listed = sorted(ranks.items(), key=lambda item: item[1])
        source.notes.append("per-rank runs: " + ", ".join(f"rank {r} = {n}" for n, r in listed))
    if hparams:
        found = dtype_from(hparams, {}, where="TensorBoard hparams")
        if found is not None:
            source.dtype, source.dtype_origin = found
    return points_to_run(pl.concat(parts), source, options, per_rank=ranks is not None)
