"""What the three MLflow followers share: when a run is over, and a run picked once.

A follower picks its run(s) when it starts, with the reader's own selection
(`--run`, `--experiment`, ranks); a run created later does not join it
(`stab watch --each-run`, `experiment.py`, gives each run of the store a follower of its own).
"""

from __future__ import annotations

from dataclasses import replace

from stabilitycli.ingest.mlflow._common import MlflowRun

# MLflow's RunStatus: the file store writes the number, sqlite and the server the name
_OVER = {"3": "FINISHED", "4": "FAILED", "5": "KILLED"}
_OVER_NAMES = frozenset(_OVER.values())


def ended(status: object, label: str) -> str | None:
    """Why the run is over, from its status, or None while it goes on."""
    text = str(status if status is not None else "").strip().upper()
    name = _OVER.get(text, text)
    return f"MLflow run {label} is {name}" if name in _OVER_NAMES else None


def unloaded(run: MlflowRun) -> MlflowRun:
    """The run without its params and tags: `build_run` reads them again, as logged by now."""
    return replace(run, params={}, tags={})
