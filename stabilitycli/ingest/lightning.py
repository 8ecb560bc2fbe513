"""PyTorch Lightning `CSVLogger` output: `metrics.csv` files, one per `version_N`.

The file is sparse (train rows, val rows and epoch rows share a `step`; cells
of keys not logged in a row are empty), values are float32 `item()`s, and NaN
/ Inf are written `nan` / `inf`. Keys: `train_loss_step`, `train/loss_step`,
`lr-AdamW`, `val_loss`... (aliases.py maps them).

A resumed run is written into a NEW `version_<N+1>` folder, so a
`lightning_logs/` folder (or any folder of `version_N/metrics.csv`) is read as
one run across its versions in version order: `finalize` then sees the step
go back where the resume started, keeps the resumed trajectory and reports
the restart. `hparams.yaml` beside a metrics.csv gives the dtype from its
`precision:` line (read with a one-line parser: no YAML library).
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.errors import StabInputError
from stabilitycli.ingest import tabular
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.model import SourceInfo

NAME = "lightning"
FILE_NAME = "metrics.csv"
_VERSION = re.compile(r"^version_(\d+)$")
_PRECISION = re.compile(r"""(?m)^precision:\s*['"]?([^'"\s#]+)""")


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
        for child in base.iterdir():
            match = _VERSION.match(child.name)
            if match and (child / FILE_NAME).is_file():
                versions.append((int(match.group(1)), child / FILE_NAME))
        if versions:
            return [p for _, p in sorted(versions)]
    return []


def read(path: Path, options: ReadOptions):
    import polars as pl

    from stabilitycli.frame import ROW

    files = metric_files(path) if path.is_dir() else [path]
    if not files:
        raise StabInputError(str(path), "no metrics.csv here or in version_N folders")
    source = SourceInfo(path=str(path), format=NAME, run=_run_name(files[0]))
    frames = []
    offset = 0
    spans = []
    for file in files:
        part_source = SourceInfo(path=str(file), format=NAME)
        try:
            frame = tabular.read_csv(file, part_source)
        except StabInputError as err:
            if len(files) == 1:
                raise
            source.warnings.append(f"{file.parent.name}: {err.reason}; version skipped")
            continue
        # rows are numbered across the versions so that a resume shows in file order
        frame = frame.with_columns((pl.col(ROW) + offset).alias(ROW))
        for rej in part_source.rejections:
            # the line number a user can open: the file's own, named in the reason
            source.reject(rej.line, f"{file.parent.name}/{FILE_NAME}: {rej.reason}")
        extra = part_source.rows_rejected - len(part_source.rejections)
        if extra > 0:
            source.rows_rejected += extra
        source.warnings.extend(f"{file.parent.name}: {w}" for w in part_source.warnings)
        spans.append(f"{file.parent.name}: rows {frame[ROW].min()}-{frame[ROW].max()}")
        offset = int(frame[ROW].max()) + 1  # +1: room for a cut-off last line's number
        frames.append(frame)
    if not frames:
        raise StabInputError(str(path), "no version's metrics.csv could be read")
    raw = pl.concat(frames, how="diagonal_relaxed")
    if len(files) > 1:
        source.notes.append(
            f"{len(files)} versions read as one run, in version order ({'; '.join(spans)})"
        )
    _dtype(files, source)
    return tabular.finish(raw, source, options)


def _run_name(file: Path) -> str | None:
    version = file.parent
    if _VERSION.match(version.name):
        return (
            version.parent.name
            if version.parent.name != "lightning_logs"
            else version.parent.parent.name
        )
    return version.name or None


def _dtype(files: list[Path], source: SourceInfo) -> None:
    from stabilitycli.ingest import normalise_dtype

    for file in reversed(files):
        hparams = file.parent / "hparams.yaml"
        if not hparams.is_file():
            continue
        match = _PRECISION.search(hparams.read_text(encoding="utf-8", errors="replace"))
        if match:
            source.dtype = normalise_dtype(match.group(1))
            source.dtype_origin = f"{file.parent.name}/hparams.yaml precision: {match.group(1)}"
            return
