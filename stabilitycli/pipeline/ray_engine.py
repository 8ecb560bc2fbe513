"""Many runs as Ray tasks: `stab analyze --engine ray`, on a local Ray instance or a cluster.

The same contract as `batch.analyze_many`: every run's `RunResult` in input order,
each handed to `on_done` as it finishes, a run that cannot be read a failure record
and the others go on. Each run is one Ray task calling `batch.analyze_one`, so a
document is made by the very code the local engine runs.

What Ray adds, and how each case ends up as that run's result:
- a worker that dies (a native crash, the OOM killer, a lost node) is retried `retries`
  times by Ray itself (`max_retries`); after that the run's error says so;
- a run still running `time_limit_s` after it was handed a free CPU is cancelled
  (`ray.cancel(force=True)` kills its worker: a hung native read cannot be interrupted
  any other way) and its error says the limit.
Both are `transient`: they say nothing about the run, so a results store does not keep them.

Ray is an optional extra (`stab[ray]`) and is imported only here, inside the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stabilitycli.core.errors import NOT_ERRORS, StabUsageError, internal_error_message, one_line
from stabilitycli.pipeline.batch import BatchSettings, RunResult, analyze_one, reusing

# tasks queued per CPU without a time limit: enough that a worker never waits on the
# driver's round trip, few enough that a sweep of 10^5 runs is not all in Ray at once
_QUEUED_PER_CPU = 8


def analyze_many(
    paths: list[str],
    settings: BatchSettings,
    *,
    address: str | None = None,
    retries: int = 2,
    time_limit_s: float | None = None,
    on_done: Callable[[RunResult], None] | None = None,
    num_cpus: int | None = None,
    stored: Callable[[str], RunResult | None] | None = None,
    task: Callable[[str, BatchSettings], RunResult] = analyze_one,
) -> list[RunResult]:
    """Every run, in input order, each analysed as one Ray task.

    `address` is an existing cluster's (None: `RAY_ADDRESS` if set, else a local
    instance with `num_cpus` CPUs, default all). `stored(path)` gives a run's earlier
    result when it still holds; that run is not sent to Ray. `task` is what a worker
    runs for one path (tests swap in one that kills its worker); it must be a
    module-level function so that it pickles by name.
    """
    if retries < 0:
        raise StabUsageError(f"--retries must be 0 or more, not {retries}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise StabUsageError(f"--time-limit must be more than 0 seconds, not {time_limit_s:g}")

    def on_ray(todo_paths: list[str]) -> list[RunResult]:
        results: list[RunResult | None] = [None] * len(todo_paths)
        ray = _ray()
        started_here = not ray.is_initialized()
        if started_here:
            _start(ray, address, num_cpus)
        try:
            todo = list(range(len(todo_paths)))
            _sweep(ray, todo_paths, todo, settings, results, retries, time_limit_s, on_done, task)
        finally:
            if started_here:
                ray.shutdown()
        return [r for r in results if r is not None]

    return reusing(paths, stored or (lambda _path: None), on_done, on_ray)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise StabUsageError(
            "--engine ray needs the ray extra: pip install 'stabilitycli[ray]'"
        ) from None
    return ray


def _start(ray: Any, address: str | None, num_cpus: int | None) -> None:
    import logging
    import os

    joining = address is not None or bool(os.environ.get("RAY_ADDRESS"))
    try:
        ray.init(
            # no address would join a cluster `ray start` left on this machine: the
            # default is a new local instance, another cluster only when named
            address=address if joining else "local",
            # num_cpus sizes a new local instance only; Ray refuses it when joining
            num_cpus=None if joining else num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            ignore_reinit_error=True,
            # Ray's INFO lines on stderr would sit beside every sweep's output
            logging_level=logging.WARNING,
        )
    except NOT_ERRORS:
        raise
    except Exception as err:
        where = address or os.environ.get("RAY_ADDRESS") or "a local instance"
        raise StabUsageError(
            f"--engine ray: could not start or join Ray ({where}): {one_line(err)}"
        ) from None


def _sweep(
    ray: Any,
    paths: list[str],
    todo: list[int],
    settings: BatchSettings,
    results: list[RunResult | None],
    retries: int,
    time_limit_s: float | None,
    on_done: Callable[[RunResult], None] | None,
    task: Callable[[str, BatchSettings], RunResult],
) -> None:
    remote = ray.remote(task).options(max_retries=retries, retry_exceptions=True)
    settings_ref = ray.put(settings)  # sent to the object store once, not with every task
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    # with a time limit only as many tasks as CPUs are out, so a task starts when it is
    # submitted and its clock can start then; Ray does not tell the driver when a task starts
    # (the clock so also counts a cold worker's start-up, and a run's retries)
    window = cpus if time_limit_s is not None else cpus * _QUEUED_PER_CPU
    queue = iter(todo)
    running: dict[Any, tuple[int, float]] = {}  # task's ObjectRef -> (run index, submitted at)

    def finish(i: int, result: RunResult) -> None:
        results[i] = result
        if on_done:
            on_done(result)

    try:
        while True:
            while len(running) < window and (i := next(queue, None)) is not None:
                running[remote.remote(paths[i], settings_ref)] = (i, time.monotonic())
            if not running:
                return
            for ref in _ready(ray, list(running), running, time_limit_s):
                i, _ = running.pop(ref)
                finish(i, _outcome(ray, ref, paths[i], retries))
            if time_limit_s is not None:
                now = time.monotonic()
                for ref, (i, submitted) in list(running.items()):
                    if now - submitted >= time_limit_s:  # wait() woke at the deadline
                        ray.cancel(ref, force=True)
                        del running[ref]
                        finish(i, _over_time(paths[i], time_limit_s))
    finally:
        for ref in running:  # stopped early (Ctrl-C, on_done raised): free the cluster
            ray.cancel(ref, force=True)


def _ready(
    ray: Any, refs: list[Any], running: dict[Any, tuple[int, float]], time_limit_s: float | None
) -> list[Any]:
    """The finished tasks: waits for one (or for the nearest time limit), then takes every
    other already finished, so 2,000 results are not 2,000 round trips."""
    timeout_s = None
    if time_limit_s is not None:
        first_deadline = min(submitted for _, submitted in running.values()) + time_limit_s
        timeout_s = max(0.0, first_deadline - time.monotonic())
    ready, rest = ray.wait(refs, num_returns=1, timeout=timeout_s, fetch_local=True)
    if ready and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
        ready += more
    return list(ready)


def _outcome(ray: Any, ref: Any, path: str, retries: int) -> RunResult:
    """The task's RunResult, or the run's failure when Ray could not give one."""
    from ray import exceptions as rex

    try:
        result: RunResult = ray.get(ref)
        return result
    except rex.WorkerCrashedError:
        reason = f"the worker running this run died {retries + 1} times"
    except rex.OutOfMemoryError:
        reason = f"the worker running this run was killed for lack of memory {retries + 1} times"
    except rex.TaskCancelledError:
        reason = "the run was cancelled"
    except rex.RayTaskError as err:
        # the task itself raised (analyze_one catches a run's own errors, so this is stab or
        # the worker's environment), on every one of its tries
        return RunResult(path, error=internal_error_message(err.cause or err, path), transient=True)
    except NOT_ERRORS:
        raise
    except rex.RayError as err:
        reason = f"ray: {type(err).__name__}: {one_line(err)}"
    return RunResult(path, error=f"{path}: {reason}", transient=True)


def _over_time(path: str, time_limit_s: float) -> RunResult:
    return RunResult(
        path, error=f"{path}: over the per-run time limit of {time_limit_s:g} s", transient=True
    )
