"""stab: what went wrong in an ML training run, read from its metric logs.

    from stabilitycli import analyze
    result = analyze("run.jsonl")
    print(result.verdict.code, result.verdict.summary)

Heavy modules (polars, numpy) are imported on first use, not here. Memory: the `stab`
command sets how polars and pyarrow give freed memory back; a library caller keeps its
own settings (`stabilitycli.cli.ALLOCATOR_SETTINGS` says which and why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stabilitycli.core.model import Analysis

__all__ = ["analyze", "ranks", "read"]
__version__ = "0.1.0"


def analyze(source: Any, config: Any = None, **kwargs: Any) -> Analysis:
    """Read a run (path, URI, `RunData` or polars frame) and walk the §1–§4 tree."""
    from stabilitycli.pipeline.run import analyze as _analyze

    return _analyze(source, config, **kwargs)


def ranks(source: Any, config: Any = None, **kwargs: Any):
    """Per-rank outlier report for a run that has ranks (spec section 5)."""
    from stabilitycli.pipeline.run import ranks as _ranks

    return _ranks(source, config, **kwargs)


def read(source: Any, options: Any = None):
    """The canonical `RunData` for a path or URI."""
    from stabilitycli.ingest import read as _read

    return _read(source, options)
