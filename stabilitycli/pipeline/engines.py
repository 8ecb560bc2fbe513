"""Where a sweep's runs are analysed: the local process pool (`batch.analyze_many`) or
Ray tasks (`ray_engine.analyze_many`), chosen by an `Engine`.

Both engines build on `batch` (its settings, results and one-run analysis); this module
sits above the two, so neither imports the other. Ray is imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from stabilitycli.core.records import dataclass
from stabilitycli.pipeline import batch
from stabilitycli.pipeline.batch import BatchSettings, RunResult


@dataclass(frozen=True)
class Engine:
    """Where a sweep's runs are analysed: a local process pool, or Ray tasks (`ray_engine`)
    on a local instance or the cluster at `ray_address` (else RAY_ADDRESS)."""

    name: str = "local"  # "local" or "ray"
    ray_address: str | None = None
    # Ray only: how often a run whose worker died is tried again, and how long one run
    # may take before it is cancelled and reported as that run's failure
    retries: int = 2
    time_limit_s: float | None = None


def sweep(
    paths: list[str],
    settings: BatchSettings,
    jobs: int | None = None,
    engine: Engine | None = None,
    *,
    on_done: Callable[[RunResult], None] | None = None,
    stored: Callable[[str], RunResult | None] | None = None,
) -> list[RunResult]:
    """Every run, in input order, on the engine asked for (the same documents either way)."""
    engine = engine or Engine()
    if engine.name == "ray":
        from stabilitycli.pipeline import ray_engine

        return ray_engine.analyze_many(
            paths,
            settings,
            address=engine.ray_address,
            retries=engine.retries,
            time_limit_s=engine.time_limit_s,
            on_done=on_done,
            num_cpus=jobs,
            stored=stored,
        )
    return batch.analyze_many(paths, settings, jobs, on_done=on_done, stored=stored)
