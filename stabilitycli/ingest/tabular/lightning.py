"""PyTorch Lightning `CSVLogger` output: `metrics.csv` files, one per `version_N`.

The file is sparse (train rows, val rows and epoch rows share a `step`; cells
of keys not logged in a row are empty), values are float32 `item()`s, and NaN
/ Inf are written `nan` / `inf`. Keys: `train_loss_step`, `train/loss_step`,
`lr-AdamW`, `val_loss`... (aliases.py maps them).

Every `trainer.fit` writes a NEW `version_<N+1>` folder, whether it resumed a
checkpoint or started from scratch; only the steps tell which (`ingest.resume`): a
version whose first step falls inside an earlier version's steps continues it
and is read with it as one run (`finalize` sees the step go back and reports
the restart), a version that starts from the beginning is a run of its own.
A folder of versions (`lightning_logs/`) holding several runs is read as its
latest run, and the notes say which versions were taken as resumes and why;
`stab analyze -r` offers each run. A `version_N` folder is read with the
versions it resumes. `hparams.yaml` beside a metrics.csv gives the dtype from
its top-level settings named in `ingest.dtype` (`precision: bf16-mixed`, `bf16: true`),
read with a one-line parser: no YAML library.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.ingest import resume
from stabilitycli.ingest.folders import list_folder
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tabular import tables as tabular

NAME = "lightning"
FILE_NAME = "metrics.csv"
_VERSION = re.compile(r"^version_(\d+)$")
# a top-level `key: value` line of hparams.yaml (one-line parser: no YAML library)
_SETTING = re.compile(r"""(?m)^([A-Za-z_][\w.]*):[ \t]*['"]?([^'"\s#]+)""")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return bool(metric_files(path))
    # a metrics.csv elsewhere is a plain table (tabular reads it the same way)
    return path.name == FILE_NAME and (
        _VERSION.match(path.parent.name) is not None or (path.parent / "hparams.yaml").is_file()
    )


def metric_files(folder: Path) -> list[Path]:
    """metrics.csv of a version folder, or of every version_N below, in version order."""
    direct = folder / FILE_NAME
    if direct.is_file():
        return [direct]
    for base in (folder, folder / "lightning_logs"):
        if not base.is_dir():
            continue
        versions = []
        for child in list_folder(base):
            match = _VERSION.match(child.name)
            if match and (child / FILE_NAME).is_file():
                versions.append((int(match.group(1)), child / FILE_NAME))
        if versions:
            return [p for _, p in sorted(versions)]
    return []


@dataclass
class _Version:
    file: Path
    frame: Any  # the raw table, rows numbered within the file
    source: SourceInfo  # its own rejections and warnings

    @property
    def name(self) -> str:
        return self.file.parent.name


def read(path: Path, options: ReadOptions):
    import polars as pl

    from stabilitycli.frame import ROW

    files = metric_files(path) if path.is_dir() else [path]
    if not files:
        raise StabInputError(str(path), "no metrics.csv here or in version_N folders")
    source = SourceInfo(path=str(path), format=NAME, run=_run_name(files[0]))
    if _VERSION.match(path.name) and source.run:
        source.run = f"{source.run}/{path.name}"
    versions = _load(files, source)
    if path.is_dir():
        versions = _one_run(versions, path, source, options)
    frames = []
    offset = 0
    spans = []
    for version in versions:
        # rows are numbered across the versions so that a resume shows in file order
        frame = version.frame.with_columns((pl.col(ROW) + offset).alias(ROW))
        part_source = version.source
        for rej in part_source.rejections:
            # the line number a user can open: the file's own, named in the reason
            source.reject(rej.line, f"{version.name}/{FILE_NAME}: {rej.reason}")
        extra = part_source.rows_rejected - len(part_source.rejections)
        if extra > 0:
            source.rows_rejected += extra
        source.warnings.extend(f"{version.name}: {w}" for w in part_source.warnings)
        if frame.height:  # a version whose every row was rejected numbers nothing
            spans.append(f"{version.name}: rows {frame[ROW].min()}-{frame[ROW].max()}")
            offset = int(frame[ROW].max()) + 1  # +1: room for a cut-off last line's number
        frames.append(frame)
    raw = pl.concat(frames, how="diagonal_relaxed")
    if len(versions) > 1:
        source.notes.append(
            f"{len(versions)} versions read as one run, in version order ({'; '.join(spans)})"
        )
    _dtype([v.file for v in versions], source, options.limits.max_line_bytes)
    return tabular.finish(raw, source, options)


def _load(files: list[Path], source: SourceInfo) -> list[_Version]:
    versions = []
    for file in files:
        part_source = SourceInfo(path=str(file), format=NAME)
        try:
            frame = tabular.read_csv(file, part_source)
        except StabInputError as err:
            if len(files) == 1:
                raise
            source.warnings.append(f"{file.parent.name}: {err.reason}; version skipped")
            continue
        versions.append(_Version(file, frame, part_source))
    if not versions:
        raise StabInputError(source.path, "no version's metrics.csv could be read")
    return versions


def _steps(version: _Version, options: ReadOptions) -> list[int]:
    import polars as pl

    from stabilitycli.core import aliases

    columns = version.frame.columns
    key = options.step_key or aliases.find_key(columns, aliases.STEP_KEYS)
    if key is None or key not in columns:
        return []
    steps = version.frame[key].cast(pl.String).str.strip_chars().cast(pl.Float64, strict=False)
    # an `inf` step is damage the rows' own check rejects; no version starts from it
    return [int(s) for s in steps.filter(steps.is_finite()).to_list()]


def _one_run(
    versions: list[_Version], path: Path, source: SourceInfo, options: ReadOptions
) -> list[_Version]:
    """The versions that make one run: the latest run of a folder of versions, or the
    named version with the versions it resumes."""
    if len(versions) == 1 and _VERSION.match(path.name):
        versions = _with_earlier(versions[0], path, source, options)
    if len(versions) == 1:
        return versions
    by_name = {v.name: v for v in versions}
    parts = [p for v in versions if (p := resume.part_of(v.name, _steps(v, options)))]
    if len(parts) < 2:
        return versions
    groups = resume.chain(parts)
    chosen = groups[-1]
    if _VERSION.match(path.name):
        chosen = resume.group_of(groups, path.name) or chosen
        source.notes.extend(chosen.why)
        return [by_name[name] for name in chosen.names]
    source.notes.extend(resume.describe(groups))
    if len(groups) > 1:
        source.warnings.append(
            f"{len(groups)} separate runs in {len(versions)} version folders; read the latest "
            f"({chosen.label()}); to analyse every run: stab analyze -r {path}"
        )
        source.run = f"{source.run}/{chosen.parts[-1].name}" if source.run else None
    return [by_name[name] for name in chosen.names]


def _with_earlier(
    version: _Version, folder: Path, source: SourceInfo, options: ReadOptions
) -> list[_Version]:
    """A version that does not start from the beginning, with the earlier versions beside it."""
    own = resume.part_of(version.name, _steps(version, options))
    if own is None or own.starts_fresh():
        return [version]
    number = int(_VERSION.match(folder.name).group(1))  # type: ignore[union-attr]
    earlier = [f for f in metric_files(folder.parent) if _version_number(f) < number]
    if not earlier:
        return [version]
    scratch = SourceInfo(path=str(folder.parent), format=NAME)
    return [*_load_quietly(earlier, scratch), version]


def _load_quietly(files: list[Path], scratch: SourceInfo) -> list[_Version]:
    try:
        return _load(files, scratch)
    except StabInputError:
        return []


def _version_number(file: Path) -> int:
    match = _VERSION.match(file.parent.name)
    return int(match.group(1)) if match else -1


def _run_name(file: Path) -> str | None:
    version = file.parent
    if _VERSION.match(version.name):
        return (
            version.parent.name
            if version.parent.name != "lightning_logs"
            else version.parent.parent.name
        )
    return version.name or None


def _dtype(files: list[Path], source: SourceInfo, max_bytes: int) -> None:
    from stabilitycli.ingest.dtype import dtype_from

    for file in reversed(files):
        hparams = file.parent / "hparams.yaml"
        if not hparams.is_file():
            continue
        # the settings that name a dtype are top-level lines near the top; a file bigger
        # than one line may be is not read past that (it is no Lightning hparams dump)
        with open(hparams, "rb") as handle:
            text = handle.read(max_bytes).decode("utf-8", errors="replace")
        found = dtype_from((f"{file.parent.name}/hparams.yaml", dict(_SETTING.findall(text))))
        if found is not None:
            source.dtype, source.dtype_origin = found
            return


def run_paths(folder: Path, options: ReadOptions | None = None) -> list[Path]:
    """One path per run a folder of versions holds (`stab analyze -r`): the folder
    itself when its versions make one run, else each run's last version folder,
    which is read with the versions it resumes."""
    files = metric_files(folder)
    if len(files) < 2 or (folder / FILE_NAME).is_file():
        return [folder]
    options = options or ReadOptions()
    versions = _load_quietly(files, SourceInfo(path=str(folder), format=NAME))
    parts = [p for v in versions if (p := resume.part_of(v.name, _steps(v, options)))]
    groups = resume.chain(parts)
    if len(groups) < 2:
        return [folder]
    base = files[0].parent.parent
    return [base / g.parts[-1].name for g in groups]
