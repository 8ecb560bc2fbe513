"""MLflow file store (`mlruns/`), read straight from disk without importing mlflow.

Layout (MLflow 1.x-3.x):

    mlruns/<experiment_id>/meta.yaml                  name, lifecycle_stage
    mlruns/<experiment_id>/<run_id>/meta.yaml         run_name, lifecycle_stage
    mlruns/<experiment_id>/<run_id>/metrics/<key>     "timestamp value step" lines
    mlruns/<experiment_id>/<run_id>/params|tags/<key> the raw value, no newline
    mlruns/.trash/<experiment_id>/                    deleted experiments

A key holding `/` is a sub-folder (`metrics/train/loss`). Values are Python
`str(float)`, so `nan`, `inf` and `-inf` are exact. Each metric file is parsed
in one polars call: going through `MlflowClient` re-parses the whole file for
every 25,000-point page (O(n^2), minutes at 1M points), and MLflow >= 3.13
refuses to open a file store at all without `MLFLOW_ALLOW_FILE_STORE=true`.

The path may be the `mlruns` root, one experiment folder or one run folder
(or the `file:///.../mlruns` tracking URI).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.frame import RunData
from stabilitycli.ingest import bounded
from stabilitycli.ingest.folders import list_folder, walk
from stabilitycli.ingest.limits import InputLimits, limits_in_force
from stabilitycli.ingest.mlflow._common import (
    MlflowRun,
    build_run,
    filter_experiments,
    order_points,
    select_runs,
)
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import reject_many

NAME = "mlflow_file"
TRASH = ".trash"
TRUNCATED_REASON = "last line cut off mid-write (the job died while logging)"
MALFORMED_REASON = "not a 'timestamp value step' line"


# --- meta.yaml ------------------------------------------------------------------


def parse_meta(text: str) -> dict[str, str]:
    """The top-level `key: scalar` pairs of an MLflow meta.yaml, as strings.

    MLflow writes these files with PyYAML's `safe_dump`: flat, one key per
    line, strings quoted only when YAML needs it, long strings folded onto
    indented continuation lines. Nested values (`tags: []`) are kept as text.
    """
    out: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t" and last is not None:
            out[last] = (out[last] + " " + line.strip()).strip()  # folded continuation
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip()
        out[last] = value.strip()
    return {k: _unquote(v) for k, v in out.items()}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        return (
            inner.encode("latin-1", "backslashreplace").decode("unicode_escape")
            if "\\" in inner
            else inner
        )
    return "" if value in ("null", "~") else value


def read_meta(folder: Path) -> dict[str, str] | None:
    meta = folder / "meta.yaml"
    try:
        return parse_meta(meta.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def _kind(folder: Path) -> str | None:
    """'run', 'experiment', 'root' or None, from the meta.yaml files."""
    meta = read_meta(folder) if (folder / "meta.yaml").is_file() else None
    if meta is not None:
        if "run_id" in meta or "run_uuid" in meta:
            return "run"
        if "experiment_id" in meta:
            return "experiment"
        return None
    try:
        children = [c for c in list_folder(folder) if c.is_dir() and c.name != TRASH]
    except OSError:
        return None
    for child in children:
        if (child / "meta.yaml").is_file():
            child_meta = read_meta(child) or {}
            if "experiment_id" in child_meta and "run_id" not in child_meta:
                return "root"
    return None


def sniff(path: Path, head: bytes) -> bool:
    return path.is_dir() and _kind(path) is not None


def sniff_uri(text: str) -> bool:
    """`file:///abs/mlruns`, the tracking URI form of a file store."""
    return text.startswith("file:") and sniff(local_path(text), b"")


def local_path(target) -> Path:
    text = str(target)
    if text.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(text).path))
    return Path(text)


# --- listing runs ----------------------------------------------------------------


def _experiments(
    path: Path, kind: str, options: ReadOptions
) -> list[tuple[Path, dict[str, str], bool]]:
    """(folder, meta, deleted) of each experiment under the given path."""
    meta: dict[str, str] | None
    if kind == "experiment":
        meta = read_meta(path) or {}
        return [(path, meta, meta.get("lifecycle_stage") == "deleted" or path.parent.name == TRASH)]
    folders = [(c, False) for c in list_folder(path) if c.is_dir() and c.name != TRASH]
    trash = path / TRASH
    if options.include_deleted and trash.is_dir():
        folders += [(c, True) for c in list_folder(trash) if c.is_dir()]
    out = []
    for folder, trashed in folders:
        meta = read_meta(folder) if (folder / "meta.yaml").is_file() else None
        if meta is None or "experiment_id" not in meta or "run_id" in meta:
            continue
        out.append((folder, meta, trashed or meta.get("lifecycle_stage") == "deleted"))
    return out


def _run_from(
    folder: Path, experiment: dict[str, str], experiment_deleted: bool
) -> MlflowRun | None:
    meta = read_meta(folder) if (folder / "meta.yaml").is_file() else None
    if meta is None or not (meta.get("run_id") or meta.get("run_uuid")):
        return None
    name = meta.get("run_name") or _read_small(folder / "tags" / "mlflow.runName") or ""
    return MlflowRun(
        run_id=meta.get("run_id") or meta.get("run_uuid", folder.name),
        name=name,
        experiment_id=meta.get("experiment_id", experiment.get("experiment_id", "")),
        experiment_name=experiment.get("name", ""),
        deleted=experiment_deleted or meta.get("lifecycle_stage") == "deleted",
        location=folder,
    )


def _read_small(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _key_files(folder: Path) -> dict[str, Path]:
    """`{key: file}` for every file below `folder`; nested folders join with `/`."""
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    # params/tags nest a folder per `/` in a key: walked iteratively, within the walk limits
    for _root, _folders, files in walk(folder, follow_symlinks=False):
        for full in files:
            out[full.relative_to(folder).as_posix()] = full
    return out


def load_params_tags(run: MlflowRun) -> None:
    folder: Path = run.location  # type: ignore[assignment]
    run.params = {k: _read_small(p) or "" for k, p in _key_files(folder / "params").items()}
    run.tags = {k: _read_small(p) or "" for k, p in _key_files(folder / "tags").items()}


def list_runs(path: Path, options: ReadOptions) -> list[MlflowRun]:
    kind = _kind(path)
    if kind is None:
        raise StabInputError(str(path), "not an MLflow file store (no meta.yaml found)")
    if kind == "run":
        parent = read_meta(path.parent) if (path.parent / "meta.yaml").is_file() else {}
        parent = parent or {}
        run = _run_from(path, parent, parent.get("lifecycle_stage") == "deleted")
        return [run] if run else []
    experiments = _experiments(path, kind, options)
    keep = filter_experiments(
        {m.get("experiment_id", f.name): m.get("name", "") for f, m, _ in experiments},
        options,
        str(path),
    )
    runs: list[MlflowRun] = []
    for folder, meta, deleted in experiments:
        if meta.get("experiment_id", folder.name) not in keep:
            continue
        for child in list_folder(folder):
            if child.is_dir():
                run = _run_from(child, meta, deleted)
                if run is not None:
                    runs.append(run)
    return runs


# --- reading metrics -------------------------------------------------------------


def read_metric_file(path: Path, key: str, source: SourceInfo, limits: InputLimits | None = None):
    """One metric file as a polars frame (timestamp, value, step, _line).

    Accepts the 2-field (very old MLflow: step 0), 3-field and 5-field
    (logged with a dataset) line shapes. A last line without its newline was
    cut off mid-write: it is dropped with a warning, everything before it kept.
    A line whose fields are not what MLflow writes (a step of 60.5, a value
    past the float range, a stray byte) is rejected with its reason rather than
    read as some other number: a step of 60.5 taken as 0 would invent a restart.
    """

    limits = limits or limits_in_force()
    try:
        data = bounded.read_plain(path, limits)
    except OSError as err:
        raise StabInputError(
            str(path), f"cannot read metric {key!r}: {err.strerror or err}"
        ) from None
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        line_no = data.count(b"\n", 0, cut) + 1
        data = data[:cut]
        source.reject(line_no, f"metric {key!r}: {TRUNCATED_REASON}")
        source.warnings.append(f"{path}:{line_no}: {TRUNCATED_REASON}; kept the lines before it")
    good, bad = parse_metric_lines(data)
    report_bad_lines(source, path, key, bad)
    return good


_SCHEMA = {"timestamp": "Int64", "value": "Float64", "step": "Int64"}


def parse_metric_lines(data: bytes, first_line: int = 1):
    """Whole `timestamp value step` lines as (good points, bad lines with their reason).

    Every line, a blank one too, is one row, so lines read in stretches keep the
    numbers they have in the whole file when `first_line` counts on."""
    import polars as pl

    schema = {name: getattr(pl, kind) for name, kind in _SCHEMA.items()}
    bad_schema = {"_line": pl.Int64, "_problem": pl.String}
    if not data.strip():
        empty = pl.DataFrame(schema={**schema, "_line": pl.Int64})
        return empty, pl.DataFrame(schema=bad_schema)
    text = pl.read_csv(
        io.BytesIO(data),
        separator=" ",
        has_header=False,
        new_columns=list(schema),
        schema=dict.fromkeys(schema, pl.String),
        encoding="utf8-lossy",
        quote_char=None,
        truncate_ragged_lines=True,
        missing_columns="insert",
        extra_columns="ignore",
    ).with_row_index("_line", offset=first_line)
    text = text.with_columns(pl.col(c).str.strip_chars() for c in schema)
    parsed = text.select(
        pl.col("_line").cast(pl.Int64),
        *(pl.col(c).cast(kind, strict=False).alias(c) for c, kind in schema.items()),
        pl.col("step").is_null().alias("_no_step"),
        pl.col("value").str.to_lowercase().str.strip_chars_start("+-").alias("_value_text"),
        pl.all_horizontal(pl.col(c).is_null() for c in schema).alias("_blank"),
    )
    problem = (
        pl.when(pl.col("value").is_null() & pl.col("timestamp").is_null())
        .then(pl.lit(MALFORMED_REASON))
        .when(pl.col("value").is_null())
        .then(pl.lit("the value is not a number"))
        .when(pl.col("value").is_infinite() & ~pl.col("_value_text").is_in(["inf", "infinity"]))
        .then(pl.lit("the value is past the float64 range (the log did not write inf)"))
        .when(pl.col("timestamp").is_null())
        .then(pl.lit("the timestamp is not an integer"))
        .when(pl.col("step").is_null() & ~pl.col("_no_step"))
        .then(pl.lit("the step is not a 64-bit integer"))
    )
    parsed = parsed.with_columns(
        pl.when(pl.col("_blank")).then(pl.lit("")).otherwise(problem).alias("_problem")
    )
    bad = parsed.filter(pl.col("_problem").is_not_null() & (pl.col("_problem") != ""))
    good = parsed.filter(pl.col("_problem").is_null())
    # a line of two fields is MLflow < 1.0, which had no step: step 0
    good = good.select("timestamp", "value", pl.col("step").fill_null(0), "_line")
    return good, bad.select("_line", "_problem")


def report_bad_lines(source: SourceInfo, path: Path, key: str, bad) -> None:
    """Reject each line that is not what MLflow writes, by reason, and warn once for the file."""
    import polars as pl

    for reason, lines in bad.group_by("_problem", maintain_order=True).agg(pl.col("_line")).rows():
        reject_many(source, lines, f"metric {key!r}: {reason}")
    if bad.height:
        source.warnings.append(
            f"{path}: {bad.height} line(s) are not 'timestamp value step' as MLflow writes it; "
            f"first at line {bad['_line'][0]} ({bad['_problem'][0]})"
        )


def ordered_points(frames: list[tuple[str, Any]]):
    """Each key's points (keys in name order), tagged and put in time order; None if none."""
    import polars as pl

    parts = [
        frame.with_columns(pl.lit(key).alias("key"), pl.lit(index).alias("_key_index"))
        for index, (key, frame) in enumerate(frames)
        if frame.height
    ]
    if not parts:
        return None
    return order_points(pl.concat(parts, how="vertical"))


def run_points(run: MlflowRun, source: SourceInfo, limits: InputLimits | None = None):
    """All metric points of a file-store run: key, step, value, timestamp, per-key order."""
    folder: Path = run.location  # type: ignore[assignment]
    files = sorted(metric_files(folder).items())
    return ordered_points(
        [(key, read_metric_file(file, key, source, limits)) for key, file in files]
    )


def metric_files(run_folder: Path) -> dict[str, Path]:
    """`{metric key: its history file}` of one run folder."""
    return _key_files(run_folder / "metrics")


def read(path: Path, options: ReadOptions) -> RunData:
    """Read the selected run(s) of a file store into the canonical frame."""
    path = local_path(path)
    runs = list_runs(path, options)
    chosen, ranks = select_runs(runs, options, str(path), fetch_rank_info=load_params_tags)
    return build_run(
        path,
        NAME,
        chosen,
        ranks,
        options,
        load_meta=load_params_tags,
        load_points=lambda run, source: run_points(run, source, options.limits),
    )
