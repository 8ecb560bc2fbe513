"""The Ray engine: the local engine's answers, and every run's result when workers die or hang.

One local Ray instance (2 CPUs, as `.ci/run` gives it) serves the whole module.
The test tasks below are module-level so that Ray pickles them by name and a
worker imports them from this file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from stabilitycli.pipeline import batch
from stabilitycli.pipeline.batch import BatchSettings, RunResult
from tests.conftest import all_runs, run_fixture

ray = pytest.importorskip("ray")
from stabilitycli.pipeline import ray_engine  # noqa: E402  (after the skip: needs ray)

# the run the test tasks pick on, by file name, so a worker needs nothing but its path
VICTIM = "victim"
SMALL_BYTES = 128 << 10


@pytest.fixture(scope="module")
def local_ray():
    # started the way the engine starts one when none is running (a sweep leaves a Ray
    # it did not start running, which lets the tests share this one)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)  # a local instance even on a cluster's node
        ray_engine._start(ray, None, 2)
    assert ray.cluster_resources()["CPU"] == 2
    yield
    ray.shutdown()


def _runs(folder: Path, count: int) -> list[str]:
    """`count` copies of the small fixture runs (healthy, NaN, spike, fp16, too short) in turn;
    the middle one is VICTIM. Small, so that 200 runs twice fit in a test's time."""
    names = [n for n in all_runs() if run_fixture(n).stat().st_size < SMALL_BYTES]
    folder.mkdir()
    paths = []
    for n in range(count):
        source = run_fixture(names[n % len(names)])
        target = folder / f"{VICTIM if n == count // 2 else f'{n:03d}'}-{source.name}"
        shutil.copy(source, target)
        paths.append(str(target))
    return paths


def _lines(results: list[RunResult]) -> list[str]:
    """What `--format jsonl` prints for each run, in a comparable order."""
    return sorted(json.dumps(r.doc if r.ok else r.failure_record()) for r in results)


def _dies_once(path: str, settings: BatchSettings) -> RunResult:
    # the marker says this run's worker already died once: the retry runs normally
    marker = Path(path + ".died")
    if Path(path).name.startswith(VICTIM) and not marker.exists():
        marker.touch()
        os._exit(1)
    return batch.analyze_one(path, settings)


def _always_dies(path: str, settings: BatchSettings) -> RunResult:
    if Path(path).name.startswith(VICTIM):
        os._exit(1)
    return batch.analyze_one(path, settings)


def _hangs(path: str, settings: BatchSettings) -> RunResult:
    if Path(path).name.startswith(VICTIM):
        time.sleep(600)
    return batch.analyze_one(path, settings)


@pytest.mark.slow  # ~15 s: 2 x 200 runs through Ray and the local engine, after Ray's ~3 s start
def test_same_documents_and_exit_status_as_the_local_engine(local_ray, tmp_path) -> None:
    paths = _runs(tmp_path / "runs", 199)
    unreadable = tmp_path / "unreadable.jsonl"
    unreadable.write_text("{not json\n")
    paths.append(str(unreadable))
    streamed: list[str] = []
    by_ray = ray_engine.analyze_many(
        paths, BatchSettings(), on_done=lambda r: streamed.append(r.path)
    )
    local = batch.analyze_many(paths, BatchSettings(), jobs=2)
    assert [r.path for r in by_ray] == paths  # input order, as the local engine gives
    assert sorted(streamed) == sorted(paths)  # each run handed on once, as it finished
    assert _lines(by_ray) == _lines(local)
    assert not by_ray[-1].ok and "line 1" in (by_ray[-1].error or "")
    assert ray.is_initialized()  # not stopped by a sweep that did not start it
    assert len({r.worst for r in by_ray if r.ok}) > 1  # healthy and unhealthy runs both
    assert batch.exit_status(by_ray) == batch.exit_status(local) == 2  # the unreadable run
    # without it, the status the findings give (a run's result is its own, whoever made it)
    readable_by_ray, readable_local = [r for r in by_ray if r.ok], [r for r in local if r.ok]
    for fail_on in ("error", "warning", "info"):
        assert batch.exit_status(readable_by_ray, fail_on) == (
            batch.exit_status(readable_local, fail_on)
        )


@pytest.mark.slow  # ~6 s: waits for Ray to notice a dead worker and retry
def test_a_worker_killed_mid_sweep_loses_no_result(local_ray, tmp_path) -> None:
    paths = _runs(tmp_path / "runs", 12)
    results = ray_engine.analyze_many(paths, BatchSettings(), task=_dies_once)
    assert Path(paths[6] + ".died").exists()  # the victim's first worker did die
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert _lines(results) == _lines(batch.analyze_many(paths, BatchSettings(), jobs=1))


@pytest.mark.slow  # ~1-4 s: waits on Ray's retries of a dying worker
def test_a_run_whose_worker_always_dies_fails_alone(local_ray, tmp_path) -> None:
    paths = _runs(tmp_path / "runs", 6)
    results = ray_engine.analyze_many(paths, BatchSettings(), retries=1, task=_always_dies)
    victim = results[3]
    assert Path(victim.path).name.startswith(VICTIM)
    assert victim.error == f"{victim.path}: the worker running this run died 2 times"
    assert victim.transient  # a crash is not the run's answer for a results store
    assert all(r.ok for r in results if r is not victim), [r.error for r in results]
    assert batch.exit_status(results) == 2


@pytest.mark.slow  # ~22 s: waits out the time limit
def test_a_run_over_the_time_limit_is_cancelled_and_fails_alone(local_ray, tmp_path) -> None:
    paths = _runs(tmp_path / "runs", 6)
    start = time.monotonic()
    # the clock counts a cold worker's start-up too, seconds on a loaded 2-core machine
    results = ray_engine.analyze_many(paths, BatchSettings(), time_limit_s=20, task=_hangs)
    assert time.monotonic() - start < 120  # the sleeping task (600 s) did not hold the sweep
    victim = results[3]
    assert victim.error == f"{victim.path}: over the per-run time limit of 20 s"
    assert all(r.ok for r in results if r is not victim), [r.error for r in results]


def test_bad_limits_are_usage_errors() -> None:
    from stabilitycli.core.errors import StabUsageError

    with pytest.raises(StabUsageError, match="--retries"):
        ray_engine.analyze_many(["x"], BatchSettings(), retries=-1)
    with pytest.raises(StabUsageError, match="--time-limit"):
        ray_engine.analyze_many(["x"], BatchSettings(), time_limit_s=0)


def test_without_ray_installed_the_error_says_which_extra(monkeypatch) -> None:
    import sys

    from stabilitycli.core.errors import StabUsageError

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(StabUsageError, match=r"pip install 'stabilitycli\[ray\]'"):
        ray_engine.analyze_many(["x"], BatchSettings())


@pytest.mark.slow  # ~2 s: on the module's Ray instance (its start and stop)
def test_a_stored_result_is_not_sent_to_ray(local_ray, tmp_path) -> None:
    paths = _runs(tmp_path / "runs", 4)
    victim = paths[2]
    kept = RunResult(victim, doc={"kept": True})  # the results store's earlier answer
    streamed: list[str] = []
    results = ray_engine.analyze_many(
        paths,
        BatchSettings(),
        retries=0,
        task=_always_dies,  # would fail the victim, were it analysed
        stored=lambda path: kept if path == victim else None,
        on_done=lambda r: streamed.append(r.path),
    )
    assert results[2] is kept and all(r.ok for r in results)
    assert sorted(streamed) == sorted(paths)
