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
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import Rejection, SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData
from stabilitycli.ingest import resume
from stabilitycli.ingest.folders import list_folder, walk
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import points_to_run, rank_from_name
from stabilitycli.ingest.tensorboard._events import (  # noqa: F401 (re-exported)
    Added,
    Collector,
    add_event_records,
    collect_run,
    finish_points,
    read_event_file,
)

NAME = "tensorboard"
EVENT_MARK = "tfevents"
# a directory sniff stops after this many entries: a TB log dir shows its files early
SNIFF_ENTRY_LIMIT = 20_000
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
            self.collector, self.empty = collect_run(self.files, self.source, self.limits)
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
