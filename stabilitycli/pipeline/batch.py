"""Many runs at once: find them, analyse them in parallel, summarise, pick the exit status.

`stab analyze a.jsonl b.jsonl` or `stab analyze --recursive runs/` come here;
one path keeps the single-run code path in `commands/analyze.py`. Each run is analysed in
a worker process (`concurrent.futures.ProcessPoolExecutor`, forkserver start:
no fork of a parent that already holds polars' threads); the worker imports
the library itself and sends back the `Analysis.to_dict()` document - plus,
for the CI formats, the run's rendered fragment - or a failure record. A run
that cannot be read is reported and the others go on.

Nothing here imports polars at module level: the CLI imports this module only
when it has several runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

from stabilitycli.core.errors import NOT_ERRORS, StabInputError, internal_error_message, visible
from stabilitycli.core.records import dataclass

# directories that are themselves one run (a store, a log dir) are not descended
# into; a TensorBoard sniff accepts any tree with event files somewhere below, so
# here, as in TensorBoard's own logdir convention, a directory holding event
# files is one run and its parent is a folder of runs
_TB_MAX_DEPTH = 0
# documents that sit beside logs and that a text sniffer may take for one (a README
# quoting DeepSpeed output): never a training log, so a walk does not offer them
_NOT_LOGS = (
    ".md",
    ".rst",
    ".html",
    ".htm",
    ".py",
    ".ipynb",
    ".yaml",
    ".yml",
    ".toml",
    ".cfg",
    ".ini",
    ".sh",
)


@dataclass(frozen=True)
class BatchSettings:
    """Everything a worker needs besides the path (picklable)."""

    options: Any = None  # ReadOptions
    set_values: dict[str, str] = field(default_factory=dict)
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    # a run's CI fragment (github/junit/markdown), made in the worker from the Analysis;
    # a picklable callable from the report layer, so this layer imports no renderer
    render_fragment: Callable[[Any], str] | None = None
    fail_on: str = "error"


@dataclass
class RunResult:
    path: str
    doc: dict[str, Any] | None = None  # the stab.analysis/1 document
    fragment: str | None = None
    error: str | None = None
    worst: int | None = None  # worst finding severity (Severity value), None when no findings
    # the worker died rather than the run failing: says nothing about the run, so a results
    # store must not keep it as the run's answer
    transient: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def failure_record(self) -> dict[str, Any]:
        return {"schema": "stab.error/1", "source": {"path": self.path}, "error": self.error}


# ---------------------------------------------------------------- discovery


def discover(
    targets: Iterable[str],
    recursive: bool,
    warnings: list[str] | None = None,
    known: Callable[[str], bool] | None = None,
) -> list[str]:
    """The runs named by `targets`, in order, without duplicates.

    Without `recursive` every target is one run (a file, a run directory or a
    URI), read or failed as given. With it, a directory that is not itself a
    run is walked, and every file or directory a reader accepts is one run.
    What the walk could not enter (a symlink loop, an unreadable folder) is
    added to `warnings`; a walk past `max_walk_files` or `max_walk_depth` raises.
    `known(path)` says a file is a run unchanged since a walk found it before (a results
    store): it is not sniffed again, which is most of a walk's time.
    """
    runs: list[str] = []
    for target in targets:
        path = Path(target)
        if "://" in target or not recursive or not path.is_dir():
            runs.append(target)
        else:
            runs.extend(_walk(path, warnings if warnings is not None else [], known))
    return list(dict.fromkeys(runs))  # each run once, in the order first given


def _walk(root: Path, warnings: list[str], known: Callable[[str], bool] | None = None) -> list[str]:
    """The runs below `root` in name order, a folder's runs where the folder sorts.

    The walk is iterative (a 1,500-deep tree is no recursion) and enters each
    folder once, so two symlinks to `.` end; sorting by path parts afterwards
    gives the order a depth-first walk in name order would.
    """
    from stabilitycli.ingest.folders import WalkReport, walk

    found: list[tuple[tuple[str, ...], int, str]] = []

    def add(path: Path, runs: Iterable[Path]) -> None:
        key = path.relative_to(root).parts
        found.extend((key, len(found) + i, str(run)) for i, run in enumerate(runs))

    report = WalkReport()
    for folder, folders, files in walk(root, report=report):
        split = _runs_of_folders(folder)
        if split is not None or _is_run(folder):
            add(folder, split if split is not None else [folder])
            folders.clear()  # a run (or a folder of runs) is not walked into
            continue
        folders[:] = [f for f in folders if not f.name.startswith(".")]
        for child in files:
            if (
                not child.name.startswith(".")
                and child.is_file()
                and not child.name.lower().endswith(_NOT_LOGS)
                and ((known is not None and known(str(child))) or _is_run(child))
            ):
                add(child, [child])
    warnings.extend(report.warnings())
    return [run for _key, _seq, run in sorted(found)]


def _is_run(path: Path) -> bool:
    try:
        return _sniffed_run(path)
    except (StabInputError, OSError):
        return False
    except NOT_ERRORS:
        raise
    except BaseException:
        # a sniff that crashes on this input: analysed as a run, so the reader's error
        # names it in the results instead of the walk dropping it or stopping
        return True


def _sniffed_run(path: Path) -> bool:
    from stabilitycli.ingest import detect_format

    name = detect_format(path)
    if name == "tensorboard":
        from stabilitycli.ingest.tensorboard import reader as tensorboard

        within = not path.is_dir() or _events_within(path, _TB_MAX_DEPTH)
        return within and tensorboard.has_scalars(path)
    if name == "rank_dir":
        return _ranks_here(path)
    return True


def _runs_of_folders(folder: Path) -> list[Path] | None:
    """A folder of run folders that trackers start anew at each launch (Lightning's
    version_N, TensorBoard run dirs): one path per run, a resume read with what it
    resumed and a run started from scratch on its own; None for any other folder."""
    from stabilitycli.ingest import detect_format

    try:
        name = detect_format(folder)
        # each reader imported only for its own folders: both import polars, which a
        # walk over plain logs (and a rerun that reuses every run) never needs
        if name == "lightning":
            from stabilitycli.ingest.tabular import lightning

            return lightning.run_paths(folder)
        if name == "tensorboard":
            from stabilitycli.ingest.tensorboard import reader as tensorboard

            return tensorboard.run_paths(folder)
    except (StabInputError, OSError):
        return None
    except NOT_ERRORS:
        raise
    except BaseException:
        # damaged runs inside: not split here; read as one run, its error names the folder
        return None
    return None


def _ranks_here(folder: Path) -> bool:
    """A per-rank directory itself, not a parent one level above one (the sniff looks that deep).

    Only rank files it can name without --rank-pattern count (rank_7.jsonl,
    rank_7/metrics.jsonl): numbered files of one shape could as well be
    separate runs, and are analysed one by one.
    """
    from stabilitycli.ingest import rank_dir

    return rank_dir.holds_named_ranks(folder)


def _events_within(folder: Path, depth: int) -> bool:
    from stabilitycli.ingest.folders import walk

    return any(
        any(p.name.startswith("events.out.tfevents") and p.is_file() for p in files)
        for _folder, _folders, files in walk(folder, max_depth=depth)
    )


# ---------------------------------------------------------------- analysis


def analyze_one(path: str, settings: BatchSettings) -> RunResult:
    """One run, in a worker: the document, the fragment, or the reason it failed."""
    from stabilitycli.core.errors import StabUsageError
    from stabilitycli.core.settings import load_settings
    from stabilitycli.pipeline.run import analyze

    try:
        thresholds, in_force = load_settings(path, settings.set_values)
        analysis = analyze(
            path,
            thresholds,
            options=settings.options,
            select=list(settings.select),
            ignore=list(settings.ignore),
        )
        if in_force.changed():
            # the thresholds not at their defaults, and their sources: every output says them
            analysis.extras["settings"] = in_force.to_dict()
        worst = analysis.worst_severity
        return RunResult(
            path,
            doc=analysis.to_dict(),
            fragment=settings.render_fragment(analysis) if settings.render_fragment else None,
            worst=None if worst is None else int(worst),
        )
    except (StabInputError, StabUsageError) as err:
        return RunResult(path, error=visible(str(err)))
    except NOT_ERRORS:
        raise
    except BaseException as err:
        # a bug in stab (or a native panic outside reading) is this run's error, and the
        # other runs go on; BaseException because polars' PanicException is one
        return RunResult(path, error=visible(internal_error_message(err, path)))


def reusing(
    paths: list[str],
    stored: Callable[[str], RunResult | None],
    on_done: Callable[[RunResult], None] | None,
    analyse: Callable[[list[str]], list[RunResult]],
) -> list[RunResult]:
    """Every run in input order: the ones `stored` still holds a result for handed back (and
    to `on_done`) as they are, the rest analysed by `analyse` (either engine)."""
    results: list[RunResult | None] = [stored(path) for path in paths]
    if on_done:
        for known in results:
            if known is not None:
                on_done(known)
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        for i, result in zip(todo, analyse([paths[i] for i in todo]), strict=True):
            results[i] = result
    return [r for r in results if r is not None]


def renamed(result: RunResult, to_uri: Callable[[str], str] | None) -> RunResult:
    """The result with the local copy's paths named by the URIs they were copied from."""
    if to_uri is None:
        return result
    import json

    doc = json.loads(to_uri(json.dumps(result.doc))) if result.doc is not None else None
    return RunResult(
        to_uri(result.path),
        doc=doc,
        fragment=None if result.fragment is None else to_uri(result.fragment),
        error=None if result.error is None else to_uri(result.error),
        worst=result.worst,
        transient=result.transient,
    )


def _analyze_chunk(paths: list[str], settings: BatchSettings) -> list[RunResult]:
    return [analyze_one(path, settings) for path in paths]


def analyze_many(
    paths: list[str],
    settings: BatchSettings,
    jobs: int | None = None,
    on_done: Callable[[RunResult], None] | None = None,
    stored: Callable[[str], RunResult | None] | None = None,
) -> list[RunResult]:
    """Every run, in input order. `jobs` workers (default: all cores); 1 runs in this process.

    `stored(path)` gives a run's earlier result when it still holds (a results store, for
    a run whose content and settings did not change): that run is not analysed again."""
    if stored is not None:
        return reusing(
            paths, stored, on_done, lambda rest: analyze_many(rest, settings, jobs, on_done)
        )
    results: list[RunResult | None] = [None] * len(paths)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(paths) or 1))
    if jobs == 1:
        for i, path in enumerate(paths):
            results[i] = result = analyze_one(path, settings)
            if on_done:
                on_done(result)
        return [r for r in results if r is not None]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # a few runs per task: one small run costs ~15 ms, about what a round trip
    # to a worker costs, so single-run tasks would spend half the time on IPC
    per_task = max(1, min(8, len(paths) // (jobs * 4)))
    chunks = [list(range(i, min(i + per_task, len(paths)))) for i in range(0, len(paths), per_task)]
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {
            pool.submit(_analyze_chunk, [paths[i] for i in chunk], settings): chunk
            for chunk in chunks
        }
        for future in as_completed(futures):
            chunk = futures[future]
            try:
                done = future.result()
            except Exception as err:
                done = [
                    RunResult(
                        paths[i],
                        error=f"{paths[i]}: worker failed: {type(err).__name__}: {err}",
                        transient=True,
                    )
                    for i in chunk
                ]
            for i, result in zip(chunk, done, strict=True):
                results[i] = result
                if on_done:
                    on_done(result)
    return [r for r in results if r is not None]


# ---------------------------------------------------------------- summary and exit


def exit_status(results: list[RunResult], fail_on: str = "error") -> int:
    """The worst run's status: 2 when any run could not be read (an unread run must never
    let a sweep pass), else 1 when any run is at/above `fail_on`, else 0."""
    from stabilitycli.core.exit_codes import ExitCode, exit_code_for
    from stabilitycli.core.model import Severity

    readable = [r for r in results if r.ok]
    if len(readable) < len(results):
        return ExitCode.BAD_INPUT
    if not readable:
        return ExitCode.OK
    threshold = Severity.parse(fail_on)
    return max(
        int(exit_code_for(None if r.worst is None else Severity(r.worst), threshold))
        for r in readable
    )


def first_bad_step(doc: dict[str, Any]) -> int | None:
    """The earliest step of a warning or error finding (what a person looks at first)."""
    steps = [
        f["step"]
        for f in doc.get("findings", [])
        if f.get("severity") in ("warning", "error") and isinstance(f.get("step"), int)
    ]
    return min(steps) if steps else None


def relative_names(paths: list[str]) -> list[str]:
    """Each path after the folders every one of them shares: under `-r sweep/` that is the
    path below the swept root (`spike/fires`, not the leaf `fires` that 52 runs share). One
    path alone is kept whole. A URI is split at its slashes like a path."""
    if len(paths) < 2:
        return list(paths)
    split = [path.rstrip("/").split("/") for path in paths]
    shared = 0
    # a loop over the folder levels of the runs, not over rows
    for level in zip(*(parts[:-1] for parts in split), strict=False):
        if any(part != level[0] for part in level):
            break
        shared += 1
    return ["/".join(parts[shared:]) or path for parts, path in zip(split, paths, strict=True)]


def summary_rows(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per run: run (its path below the folders all runs share), verdict, cause,
    first bad step, rows (or the error)."""
    rows: list[dict[str, Any]] = []
    names = relative_names([r.path for r in results])
    for r, name in zip(results, names, strict=True):
        if not r.ok:
            rows.append(
                {
                    "path": r.path,
                    "run": name,
                    "verdict": "unreadable",
                    "cause": None,
                    "first_bad_step": None,
                    "rows": None,
                    "severity": None,
                    "error": r.error,
                }
            )
            continue
        doc = r.doc or {}
        source, verdict = doc.get("source", {}), doc.get("verdict", {})
        rows.append(
            {
                "path": r.path,
                "run": name,
                "verdict": verdict.get("code"),
                "cause": verdict.get("cause"),
                "first_bad_step": first_bad_step(doc),
                "rows": source.get("rows"),
                "severity": verdict.get("severity"),
                "error": None,
            }
        )
    return rows
