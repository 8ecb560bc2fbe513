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

`simple_value` events, nearly all of a scalar log, are decoded in bulk with numpy
(`_proto.decode_simple_scalars`); every other record goes through protobuf.
Values are float32 for most writers: 1e-3 reads back as 0.0010000000474974513.
Records failing their CRC are skipped and named (see `_tfrecord`). The dtype
comes from hparams (`precision`, `mixed_precision`, `bf16`, ...) when logged.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import Rejection, SourceInfo
from stabilitycli.frame import RunData
from stabilitycli.ingest import resume
from stabilitycli.ingest.folders import list_folder, walk
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import points_to_run, rank_from_name
from stabilitycli.ingest.tensorboard import _proto as tbp

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
    try:
        for _root, folders, files in walk(path, follow_symlinks=False):
            if any(_is_event_file(p.name) for p in files):
                return True
            seen += len(files) + len(folders)
            if seen > SNIFF_ENTRY_LIMIT:
                return False
    except StabInputError:  # deeper or bigger than a walk may go: not taken for a log dir
        return False
    return False


# --- finding runs ----------------------------------------------------------------


def find_runs(path: Path) -> dict[str, list[Path]]:
    """`{run name: event files in name order}`; a run is a folder holding event files."""
    if path.is_file():
        return {path.parent.name or ".": [path]}
    runs: dict[str, list[Path]] = {}
    for root, _folders, files in walk(path, follow_symlinks=False):
        events = [p for p in files if _is_event_file(p.name)]
        if events:
            runs[root.relative_to(path).as_posix()] = events
    return runs


def select_runs(
    runs: dict[str, list[Path]], path: Path, options: ReadOptions, one_run: bool = True
) -> tuple[dict[str, list[Path]], dict[str, int] | None]:
    """The run(s) to read and, for rank-named folders, run -> rank.

    With `one_run=False` the runs `--run` names (every run without it) come back
    as they are: `read` then tells runs, resumes and config-only folders apart."""
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
    if len(runs) == 1 or not one_run:
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


def _run_points(
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


@dataclass
class RunFolder:
    """One run folder, read once when first needed."""

    name: str  # relative to the path read ("." for the path itself), or a sibling's name
    files: list[Path]
    collector: Collector | None = None
    empty: str | None = None  # why it holds no scalars
    source: SourceInfo | None = None  # its own warnings, rejections and notes
    part: resume.Part | None = None
    limits: InputLimits | None = None  # those in force when None

    def load(self) -> RunFolder:
        if self.source is None:
            self.source = SourceInfo(path=str(self.files[0].parent), format=NAME)
            self.collector, self.empty = _run_points(self.files, self.source, self.limits)
            self._place()
        return self

    def loaded(self, collector: Collector, source: SourceInfo, records: int) -> RunFolder:
        """This run as already collected (a live follower reads its files in stretches)."""
        self.source, self.collector = source, collector
        self.empty = finish_points(collector, source, self.files, records)
        self._place()
        return self

    def _place(self) -> None:
        if self.empty is None and self.collector is not None:
            steps = self.collector.points["step"].to_list()
            self.part = resume.part_of(self.display, steps)

    @property
    def folder(self) -> Path:
        return self.files[0].parent

    @property
    def display(self) -> str:
        """The name notes and `--run` use: a folder beside the path read goes by its own."""
        if self.name == "." or self.name.startswith("../"):
            return self.folder.name
        return self.name

    @property
    def started(self) -> tuple[int, str]:
        """When the folder's first event file was created (its name says), then its name."""
        match = _CREATED.search(self.files[0].name)
        return (int(match.group(1)) if match else 0, self.folder.name)


_CREATED = re.compile(r"tfevents\.(\d+)")


def read(path: Path, options: ReadOptions) -> RunData:
    """Read the selected TensorBoard run(s) into the canonical frame."""
    runs = find_runs(path)
    return read_runs(
        path, options, {name: RunFolder(name, f, limits=options.limits) for name, f in runs.items()}
    )


def read_runs(path: Path, options: ReadOptions, pool: dict[str, RunFolder]) -> RunData:
    """`read` on the run folders found under `path`, each read when first needed."""
    import polars as pl

    from stabilitycli.ingest.dtype import dtype_from

    chosen, _ = select_runs(
        {name: run.files for name, run in pool.items()}, path, options, one_run=False
    )
    selected = [pool[name].load() for name in chosen]
    scalar = [run for run in selected if run.empty is None]
    config_only = [run for run in selected if run.empty is not None]
    if not scalar:
        if len(selected) == 1:
            raise StabInputError(str(path), f"{selected[0].empty}: not a training run")
        raise StabInputError(str(path), "none of the runs holds scalar summaries")
    ranks = _ranks_of(scalar, options)
    runs, resumes = (scalar, []) if ranks is not None else _one_run(scalar, pool, path)
    first = runs[-1].display if ranks is None else ""
    label = (
        (first if first != "." else path.name) if ranks is None else f"{len(runs)} per-rank runs"
    )
    source = SourceInfo(path=str(path), format=NAME, run=label)
    several = len(runs) > 1
    parts = []
    hparams: dict[str, str] = {}
    offset = 0
    for run in runs:
        _absorb(source, run, prefixed=several)
        assert run.collector is not None
        hparams = hparams or run.collector.hparams
        points = run.collector.points
        if ranks is not None:
            points = points.with_columns(pl.lit(ranks[run.name], dtype=pl.Int64).alias("rank"))
        else:
            # the folders one after the other, so a resume's step going back is a restart
            points = points.with_columns(pl.col("_order") + offset)
            offset += points.height
        parts.append(points)
    source.notes.extend(resumes)
    if len(runs) > 1 and ranks is None:
        spans = ", ".join(f"{run.display} ({run.part.span()})" for run in runs if run.part)
        source.notes.append(f"{len(runs)} run folders read as one resumed run: {spans}")
    for run in config_only:
        hparams = hparams or (run.collector.hparams if run.collector else {})
    if config_only:
        names = ", ".join(run.name for run in config_only[:5])
        source.notes.append(
            f"{len(config_only)} folder(s) hold no scalars (hparams, graphs or text only) and "
            f"are not runs: {names}"
        )
    if ranks is not None:
        listed = sorted(ranks.items(), key=lambda item: item[1])
        source.notes.append("per-rank runs: " + ", ".join(f"rank {r} = {n}" for n, r in listed))
    if hparams:
        found = dtype_from(("TensorBoard hparams param", hparams))
        if found is not None:
            source.dtype, source.dtype_origin = found
    return points_to_run(pl.concat(parts), source, options, per_rank=ranks is not None)


def _ranks_of(runs: list[RunFolder], options: ReadOptions) -> dict[str, int] | None:
    """run -> rank when every run folder names a different rank, else None."""
    if len(runs) < 2:
        return None
    ranks = {run.name: _rank_of_run(run.name, options.rank_pattern) for run in runs}
    values = list(ranks.values())
    if None not in values and len(set(values)) == len(values):
        return {name: int(rank) for name, rank in ranks.items() if rank is not None}
    return None


def _one_run(
    selected: list[RunFolder], pool: dict[str, RunFolder], path: Path
) -> tuple[list[RunFolder], list[str]]:
    """The folders that make the one run asked for: a resumed folder with the earlier
    folders it continues; several separate runs are a choice for the user."""
    candidates = {run.display: run for run in selected}
    for run in selected:
        if run.part is not None and not run.part.starts_fresh():
            for sibling in _siblings(run, pool, path):
                candidates.setdefault(sibling.display, sibling.load())
    ordered = sorted(
        (run for run in candidates.values() if run.part is not None), key=lambda r: r.started
    )
    groups = resume.chain([run.part for run in ordered if run.part is not None])
    wanted = {run.display for run in selected}
    relevant = [g for g in groups if wanted & set(g.names)]
    if len(relevant) > 1:
        shown = ", ".join(g.label() for g in relevant[:12])
        more = f", ... ({len(relevant) - 12} more)" if len(relevant) > 12 else ""
        raise StabInputError(
            str(path),
            f"{len(relevant)} TensorBoard runs found; choose one with "
            f"`stab analyze {path} --run FOLDER`, FOLDER one of: {shown}{more}",
        )
    group = relevant[0]
    return [candidates[name] for name in group.names], group.why


def _siblings(run: RunFolder, pool: dict[str, RunFolder], path: Path) -> list[RunFolder]:
    """Run folders beside this one: where the run it resumed would have logged."""
    if run.name != ".":
        parent = run.name.rpartition("/")[0]
        return [
            other
            for name, other in pool.items()
            if name != run.name and name != "." and name.rpartition("/")[0] == parent
        ]
    # the path read is the run folder itself: look beside it
    found = []
    try:
        entries = [p for p in list_folder(path.resolve().parent) if p.is_dir()]
    except OSError:
        return []
    for entry in entries:
        if entry == path.resolve():
            continue
        files = [p for p in list_folder(entry) if p.is_file() and _is_event_file(p.name)]
        if files:
            found.append(RunFolder(f"../{entry.name}", files, limits=run.limits))
    return found


def _absorb(source: SourceInfo, run: RunFolder, prefixed: bool) -> None:
    """A folder's own rejections, warnings and notes, named by the folder when there are several."""
    part = run.source
    assert part is not None
    tag = f"{run.display}: " if prefixed else ""
    source.rows_rejected += part.rows_rejected
    for reason, count in part.rejection_counts.items():
        source.rejection_counts[reason] = source.rejection_counts.get(reason, 0) + count
    for rejection in part.rejections:
        if len(source.rejections) < 5:
            source.rejections.append(Rejection(rejection.line, tag + rejection.reason))
    source.warnings.extend(tag + w for w in part.warnings)
    source.notes.extend(tag + n for n in part.notes)


def run_paths(folder: Path) -> list[Path] | None:
    """For `stab analyze -r`: one path per run in a folder of run folders (TensorBoard's
    logdir of runs), a resumed run read with what it resumed; None when the folder is
    not such a folder of run folders (it holds events itself, or runs nested deeper)."""
    try:
        if any(p.is_file() and _is_event_file(p.name) for p in list_folder(folder)):
            return None
    except OSError:
        return None
    runs = find_runs(folder)
    if len(runs) < 2 or any("/" in name for name in runs):
        return None
    loaded = [RunFolder(name, files).load() for name, files in runs.items()]
    scalar = sorted((run for run in loaded if run.part is not None), key=lambda r: r.started)
    if _ranks_of(scalar, ReadOptions()) is not None or not scalar:
        return None
    groups = resume.chain([run.part for run in scalar if run.part is not None])
    if len(groups) == 1 and len(scalar) > 1:
        return [folder]
    return [folder / group.names[-1] for group in groups]


def has_scalars(path: Path) -> bool:
    """Whether an event file, or any run folder below `path`, logged a scalar: a folder of
    config, graphs or text only is no training run (`stab analyze -r` does not offer it)."""
    if path.is_file():
        return RunFolder(path.parent.name, [path]).load().empty is None
    return any(
        RunFolder(name, files).load().empty is None for name, files in find_runs(path).items()
    )
