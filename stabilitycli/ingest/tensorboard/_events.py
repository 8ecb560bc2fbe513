"""Decoding one TensorBoard run's event files into scalar points (`Collector`).

Split from `reader`, which finds the runs and turns their points into the canonical
frame; the live follower (`watch.sources.tensorboard`) feeds `add_event_records` a
stretch of bytes at a time.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.tensorboard import _proto as tbp

HPARAMS_PREFIX = "_hparams_/"
_CONTENT_FORMATS = {
    tbp.DT_FLOAT: "<f",
    tbp.DT_DOUBLE: "<d",
    tbp.DT_HALF: "<e",
    tbp.DT_INT32: "<i",
    tbp.DT_INT64: "<q",
}
_NUMERIC = {*_CONTENT_FORMATS, tbp.DT_BFLOAT16, tbp.DT_BOOL}


def _point_schema() -> dict:
    import polars as pl

    return {
        "key": pl.String,
        "step": pl.Int64,
        "value": pl.Float64,
        "seq": pl.Int64,
        "sub": pl.Int64,
    }


# --- decoding ---------------------------------------------------------------------


class Collector:
    """Scalar points of one run, plus what was not a scalar.

    Points come two ways: whole arrays from the bulk decoder (`add_simple`) and
    one by one from protobuf (`add_event`). Each point carries its record's
    place in the run (`seq`) and its place within the record (`sub`), so the
    two are put back in file order when the frame is built.
    """

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.steps: list[int] = []
        self.values: list[float] = []
        self.seqs: list[int] = []
        self.subs: list[int] = []
        self.bulk: list = []  # polars frames from `add_simple`
        self.bulk_points = 0
        self.records_before = (
            0  # records of the run's earlier files: keeps `seq` rising across files
        )
        self.plugin_of: dict[str, str] = {}
        self.hparams: dict[str, str] = {}
        self.skipped_values = 0  # histograms, images, text, non-scalar tensors
        self.points: Any = None  # the polars frame, once collected

    @property
    def point_count(self) -> int:
        return self.bulk_points + len(self.values)

    def add_simple(self, scalars, seqs) -> None:
        """Points decoded in bulk (`_proto.decode_simple_scalars`).

        `seqs` are their records' places."""
        import polars as pl

        if not scalars.index.size:
            return
        tags = pl.Series("key", scalars.tags, dtype=pl.String)
        self.bulk.append(
            pl.DataFrame(
                {
                    "key": tags.gather(scalars.codes),
                    "step": scalars.steps,
                    "value": scalars.values,
                    "seq": seqs,
                    "sub": 0,
                },
                schema=_point_schema(),
            )
        )
        self.bulk_points += int(scalars.index.size)

    def add_event(self, payload: bytes, event_cls, seq: int = 0) -> None:
        event = event_cls.FromString(payload)
        values = event.summary.value  # empty for file_version, graph and log events
        if not values:
            return
        step = event.step
        for sub, value in enumerate(values):
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                self._point(value.tag, step, value.simple_value, seq, sub)
            elif kind == "tensor":
                self._add_tensor(value, step, seq, sub)
            elif (
                value.tag.startswith(HPARAMS_PREFIX)
                or value.metadata.plugin_data.plugin_name == "hparams"
            ):
                self._add_hparams(value)
            else:
                self.skipped_values += 1

    def _point(self, tag: str, step: int, number: float, seq: int, sub: int) -> None:
        self.tags.append(tag)
        self.steps.append(step)
        self.values.append(number)
        self.seqs.append(seq)
        self.subs.append(sub)

    def frame(self):
        """All points as one frame (key, step, value, _order), in the order they were written."""
        import polars as pl

        parts = list(self.bulk)
        if self.values:
            columns = {
                "key": self.tags,
                "step": self.steps,
                "value": self.values,
                "seq": self.seqs,
                "sub": self.subs,
            }
            parts.append(pl.DataFrame(columns, schema=_point_schema()))
        points = pl.concat(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            points = points.sort(["seq", "sub"])
        return (
            points.drop("seq", "sub")
            .with_row_index("_order")
            .with_columns(pl.col("_order").cast(pl.Int64))
        )

    def _add_tensor(self, value, step: int, seq: int, sub: int) -> None:
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
        self._point(tag, step, number, seq, sub)

    def _add_hparams(self, value) -> None:
        content = value.metadata.plugin_data.content
        if not content:
            return
        try:
            data = tbp.messages()["HParamsPluginData"].FromString(content)
        except Exception:
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


def _file_bytes(path: Path, limits: InputLimits):
    """The file's bytes; mapped rather than read when it may hold a record over the limit.

    A record over `max_record_bytes` is stepped over by its length without a
    look at its payload, so the pages of a 100 MB image summary are never
    loaded; reading the file whole would hold all of it at once. A smaller
    file is read: it can hold no such record, and a mapped file that another
    process truncates under the reader ends it with SIGBUS.
    """
    import mmap

    with open(path, "rb") as handle:
        if path.stat().st_size <= limits.max_record_bytes:
            return handle.read()
        try:
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # not a regular file (a pipe)
            return handle.read()


def read_event_file(
    path: Path,
    collector: Collector,
    source: SourceInfo,
    verify_data: bool = True,
    limits: InputLimits | None = None,
) -> int:
    """Add one event file's scalars to `collector`; returns the number of records read."""
    limits = limits or limits_in_force()
    base = collector.records_before
    done = add_event_records(
        _file_bytes(path, limits), path, collector, source, limits, verify_data, seq_base=base
    )
    collector.records_before = base + done.numbers_used
    return done.records


@dataclass(frozen=True)
class Added:
    """What `add_event_records` took from a stretch of an event file."""

    records: int  # valid records framed
    numbers_used: int  # record numbers used up, damaged and skipped ones included
    consumed: int  # bytes of the stretch walked; a live tail cut mid-record is not


def add_event_records(
    data,
    path: Path,
    collector: Collector,
    source: SourceInfo,
    limits: InputLimits,
    verify_data: bool = True,
    *,
    seq_base: int = 0,
    number_base: int = 0,
    offset: int = 0,
    live: bool = False,
) -> Added:
    """Add the scalars of `data`, the bytes of `path` from byte `offset` on, to `collector`.

    Records of the `add_scalar` layout are decoded in bulk; every other record
    (tensor scalars, hparams, file_version, several values per event...) goes
    through the protobuf parser, one by one. Record numbers count on from
    `number_base` (the records of the file before `offset`), so a file read in
    stretches names each record as a whole read does. `live`: the file is still
    being written, so a last record cut off (or damaged with nothing valid after
    it yet) is not read and not rejected; `consumed` stops before it, and the
    next stretch starts there.
    """
    import dataclasses

    import numpy as np
    from google.protobuf.message import DecodeError

    from stabilitycli.ingest.tensorboard._tfrecord import frame_records

    framing = frame_records(data, verify_data=verify_data, max_record_bytes=limits.max_record_bytes)
    problems = [
        dataclasses.replace(p, record=p.record + number_base, offset=p.offset + offset)
        for p in framing.problems
    ]
    consumed = len(data)
    if live and problems and problems[-1].kind in ("truncated", "damaged_end"):
        consumed = problems.pop().offset - offset
    numbers = framing.numbers + number_base
    simple = tbp.decode_simple_scalars(data, framing.starts, framing.ends)
    collector.add_simple(simple, numbers[simple.index] + seq_base)
    rest = np.ones(framing.starts.size, dtype=bool)
    rest[simple.index] = False
    event_cls = tbp.messages()["Event"]
    for number, start, end in zip(
        numbers[rest].tolist(),
        framing.starts[rest].tolist(),
        framing.ends[rest].tolist(),
        strict=True,
    ):
        try:
            collector.add_event(data[start:end], event_cls, seq=seq_base + number)
        except DecodeError as err:
            source.reject(number, f"{path.name}: record is not a TensorBoard Event ({err})")
    oversize = [p for p in problems if p.kind == "oversize"]
    if oversize:
        first = oversize[0]
        source.warnings.append(
            f"{path}: {len(oversize)} record(s) over max_record_bytes "
            f"({limits.max_record_bytes} bytes) skipped unread (no scalar is that big); "
            f"first: {first.describe()}"
        )
    for problem in problems:
        if problem.kind == "oversize":
            continue
        source.warnings.append(f"{path}: {problem.describe()}")
        if problem.kind == "truncated":
            source.reject(problem.record, f"{path.name}: last record cut off mid-write")
        else:
            source.reject(problem.record, f"{path.name}: {problem.describe()}")
    last = [int(numbers[-1])] if numbers.size else []
    used = max(last + [p.record for p in problems], default=number_base) - number_base
    return Added(int(framing.starts.size), used, consumed)


def collect_run(
    files: list[Path], source: SourceInfo, limits: InputLimits | None = None
) -> tuple[Collector, str | None]:
    """One run's scalar points (key, step, value, _order) and hparams; when it holds no
    scalar, why (its `points` stay None)."""

    collector = Collector()
    records = sum(read_event_file(file, collector, source, limits=limits) for file in files)
    return collector, finish_points(collector, source, files, records)


def finish_points(
    collector: Collector, source: SourceInfo, files: list[Path], records: int
) -> str | None:
    """Close a run's collection: its points as one frame, or why it holds no scalar."""
    if collector.skipped_values:
        source.notes.append(
            f"{collector.skipped_values} non-scalar summary value(s) ignored "
            "(histograms, images, text)"
        )
    if not collector.point_count:
        names = ", ".join(f.name for f in files[:3])
        return (
            f"no scalar summaries in {len(files)} event file(s) ({names}; {records} record(s) read)"
        )
    collector.points = collector.frame()
    return None
