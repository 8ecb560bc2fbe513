"""What the three MLflow readers share: which run(s) to read, its rank and its dtype.

The selection rules are the same whether runs sit in `mlruns/`, a sqlite file
or behind a tracking server:

1. `--experiment` keeps the runs of the experiment with that name or id;
2. `--run` keeps the runs with that id (or a unique id prefix) or run name;
3. deleted runs are left out unless `--include-deleted`;
4. one run left: read it. Several: when each carries its own rank (a `rank`
   tag or param, or a name like `rank-3`) they are one per-rank run;
   otherwise the user must choose, and the error lists the candidates.
"""

from __future__ import annotations

import re
from dataclasses import field

from stabilitycli.core import aliases
from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.core.records import dataclass
from stabilitycli.frame import RunData
from stabilitycli.ingest.dtype import dtype_from
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.points import rank_from_name


@dataclass
class MlflowRun:
    """One run as listed by a store: enough to select it and describe it."""

    run_id: str
    name: str
    experiment_id: str
    experiment_name: str = ""
    deleted: bool = False
    # a handle the reader uses to fetch metrics (a folder, nothing for sqlite/REST)
    location: object = None
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.run_id} ({self.name})" if self.name else self.run_id


def rank_of(run: MlflowRun, options: ReadOptions) -> int | None:
    """The rank a run stands for: a rank tag, a rank param, then its name."""
    for table in (run.tags, run.params):
        for key in (options.rank_key, *aliases.RANK_KEYS):
            if key and key in table:
                # ASCII digits only ("²".isdigit() is true and int() refuses it), and a
                # rank that fits the frame's Int64 rank column
                text = str(table[key]).strip()
                if _RANK_TEXT.fullmatch(text):
                    return int(text)
    rank = rank_from_name(run.name, options.rank_pattern) if run.name else None
    return rank if rank is not None and abs(rank) < 10**18 else None


_RANK_TEXT = re.compile(r"-?[0-9]{1,18}")


def filter_experiments(experiments: dict[str, str], options: ReadOptions, where: str) -> set[str]:
    """Experiment ids to keep, given `{id: name}`; all of them without `--experiment`."""
    if not options.experiment:
        return set(experiments)
    wanted = options.experiment.strip()
    hits = {eid for eid, name in experiments.items() if wanted in (eid, name)}
    if not hits:
        shown = ", ".join(f"{name!r} (id {eid})" for eid, name in sorted(experiments.items())[:20])
        raise StabInputError(
            where, f"no experiment {wanted!r}; experiments here: {shown or 'none'}"
        )
    return hits


def select_runs(
    runs: list[MlflowRun], options: ReadOptions, where: str, fetch_rank_info=None
) -> tuple[list[MlflowRun], dict[str, int] | None]:
    """The run(s) to read and, for a per-rank set, run id -> rank.

    `fetch_rank_info(run)` fills `run.tags`/`run.params` lazily when a store
    lists runs without them (the file store), so that only candidates pay.
    """
    if not options.include_deleted:
        live = [r for r in runs if not r.deleted]
        if not live and runs:
            raise StabInputError(
                where,
                f"only deleted runs here ({_listing(runs)}); add --include-deleted to read them",
            )
        runs = live
    if options.run:
        runs = _match_run(runs, options.run.strip(), where)
    if not runs:
        raise StabInputError(where, "no MLflow runs found")
    if len(runs) == 1:
        return runs, None
    if fetch_rank_info is not None:
        for run in runs:
            fetch_rank_info(run)
    ranks = {r.run_id: rank_of(r, options) for r in runs}
    values = list(ranks.values())
    if None not in values and len(set(values)) == len(values):
        return runs, {k: int(v) for k, v in ranks.items() if v is not None}
    raise StabInputError(
        where, f"{len(runs)} runs found; choose one with --run ID or --run NAME: {_listing(runs)}"
    )


def _match_run(runs: list[MlflowRun], wanted: str, where: str) -> list[MlflowRun]:
    exact = [r for r in runs if wanted in (r.run_id, r.name)]
    if exact:
        return exact
    # an id prefix, as people copy the first characters from the UI
    prefixed = [r for r in runs if len(wanted) >= 6 and r.run_id.startswith(wanted)]
    if prefixed:
        return prefixed
    raise StabInputError(where, f"no run with id or name {wanted!r}; runs here: {_listing(runs)}")


def _listing(runs: list[MlflowRun], limit: int = 12) -> str:
    shown = ", ".join(r.label for r in runs[:limit])
    if len(runs) > limit:
        shown += f", ... ({len(runs) - limit} more)"
    return shown


def order_points(points):
    """Add `_order`: time order across keys that never reorders a key's own points.

    Each key is ordered by its running-max timestamp, so a clock step
    backwards (or user-supplied timestamps) cannot shuffle one series.
    """
    import polars as pl

    points = points.with_columns(pl.col("timestamp").fill_null(0).cum_max().over("key").alias("_t"))
    points = points.sort(["_t", "_key_index", "_line"]).with_row_index("_order")
    return points.select("key", "step", "value", pl.col("_order").cast(pl.Int64))


def _nothing_usable(label: str, unusable: int, rejections) -> str:
    """Why a run gave no point: none logged, or every one logged rejected (and the first
    reason), which is not the same news."""
    if unusable == 0:
        return f"run {label} has no metrics logged"
    first = f" (the first: {rejections[0].reason})" if rejections else ""
    return f"run {label}: none of its {unusable:,} logged metric points is usable{first}"


def build_run(target, fmt: str, chosen, ranks, options, *, load_meta, load_points) -> RunData:
    """Shared tail of the MLflow readers: metrics of the chosen run(s) -> RunData."""
    import polars as pl

    from stabilitycli.ingest.points import points_to_run

    label = chosen[0].label if len(chosen) == 1 else f"{len(chosen)} per-rank runs"
    source = SourceInfo(path=str(target), format=fmt, run=label)
    parts = []
    for run in chosen:
        if not run.params and not run.tags:
            load_meta(run)
        rejected_before, reasons_before = source.rows_rejected, len(source.rejections)
        points = load_points(run, source)
        if points is None or points.height == 0:
            said = _nothing_usable(
                run.label,
                source.rows_rejected - rejected_before,
                source.rejections[reasons_before:],
            )
            if len(chosen) == 1:
                raise StabInputError(str(target), said)
            source.warnings.append(said)
            continue
        if ranks is not None:
            points = points.with_columns(pl.lit(ranks[run.run_id], dtype=pl.Int64).alias("rank"))
        parts.append(points)
    if not parts:
        raise StabInputError(str(target), "none of the runs has metrics logged")
    if ranks is not None:
        source.notes.append(
            "per-rank runs: "
            + ", ".join(
                f"rank {ranks[r.run_id]} = {r.label}"
                for r in sorted(chosen, key=lambda r: ranks[r.run_id])
            )
        )
    for run in chosen:
        found = dtype_from(("MLflow param", run.params), ("MLflow tag", run.tags))
        if found is not None:
            source.dtype, source.dtype_origin = found
            break
    # the chance level ln V needs V: taken when a run logged it as a param, never guessed
    vocab = next((r.params.get("vocab_size") for r in chosen if r.params.get("vocab_size")), None)
    if vocab is not None and vocab.strip().isdigit():
        source.vocab_size = int(vocab)
    points = pl.concat(parts, how="vertical")
    return points_to_run(points, source, options, per_rank=ranks is not None)
