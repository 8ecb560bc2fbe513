"""fp16 overflows are counted a chunk of rows at a time and kept where there is one (issue
15: a count for every row was a column as long as the log). They must be the rows and
counts the whole-column reading of the evidence gives, wherever the chunks fall."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli.core.model import SourceInfo
from stabilitycli.detect import windows
from stabilitycli.detect.mixed_precision import overflow_per_step, overflow_points
from stabilitycli.detect.series import build_view
from stabilitycli.frame import RunData


def whole_column_counts(view) -> np.ndarray:
    """The evidence read over whole columns, one rule at a time (the mixed_precision
    docstring): messages and counters, non-finite grad norms, then a scale drop on a row
    with no other evidence and none on the scale's point before."""
    counts = np.zeros(view.steps.size)
    for name in ("overflow", "skipped_steps"):
        if view.has(name):
            counts = np.maximum(counts, np.nan_to_num(view.columns[name], nan=0.0, posinf=1.0))
    if view.has("grad_norm"):
        counts = np.maximum(
            counts, view.logged["grad_norm"] & ~np.isfinite(view.columns["grad_norm"])
        )
    if view.has("loss_scale"):
        scale_rows = np.flatnonzero(view.logged["loss_scale"])
        scale = view.columns["loss_scale"][scale_rows]
        evidence = counts[scale_rows].copy()
        for i in range(1, scale.size):
            if scale[i] < scale[i - 1] and evidence[i] == 0 and not evidence[i - 1] > 0:
                counts[scale_rows[i]] = 1.0
    return counts


maybe_value = st.one_of(
    st.none(),
    st.sampled_from([0.0, 1.0, 2.0, 3.5, np.nan, np.inf, -np.inf, -1.0]),
)
scale_value = st.one_of(st.none(), st.sampled_from([1.0, 2.0, 4.0, 8.0, 65536.0, np.nan]))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(maybe_value, scale_value, maybe_value, st.booleans()), min_size=1, max_size=60
    ),
    st.sampled_from([1, 2, 3, 7, 1 << 20]),
)
def test_overflow_points_are_the_whole_column_counts(rows, chunk_rows) -> None:
    grad = [g for g, _, _, _ in rows]
    scale = [s for _, s, _, _ in rows]
    skipped = [k for _, _, k, _ in rows]
    columns = {"loss": [1.0] * len(rows), "grad_norm": grad, "loss_scale": scale}
    if any(with_skips for _, _, _, with_skips in rows):
        columns["skipped_steps"] = skipped
    frame = pl.DataFrame(
        {"step": np.arange(len(rows)) * 2, **columns},
        schema_overrides={name: pl.Float64 for name in columns},
    )
    view = build_view(RunData(frame=frame, source=SourceInfo(path="memory", format="test")))
    want = whole_column_counts(view)
    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        at, counts = overflow_points(view)
        dense = overflow_per_step(view)
    assert np.array_equal(at, np.flatnonzero(want > 0))
    assert np.array_equal(counts, want[at])
    assert np.array_equal(dense, want)
