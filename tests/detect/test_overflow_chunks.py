"""fp16 overflows are read into the ledger a chunk of rows at a time and kept where there is
one (issue 15: a count for every row was a column as long as the log). The ledger must be
the same wherever the chunks fall, and its per-row counts add up to its total (issue 35)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilitycli.core.model import SourceInfo
from stabilitycli.detect import windows
from stabilitycli.detect.mixed_precision import overflow_per_step
from stabilitycli.detect.overflow_ledger import ledger_of
from stabilitycli.detect.series import build_view
from stabilitycli.frame import RunData

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
def test_the_ledger_does_not_depend_on_the_chunks(rows, chunk_rows) -> None:
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

    def view():
        return build_view(RunData(frame=frame, source=SourceInfo(path="memory", format="test")))

    whole = ledger_of(view())
    with mock.patch.object(windows, "CHUNK_ROWS", chunk_rows):
        chunked_view = view()
        chunked = ledger_of(chunked_view)
        dense = overflow_per_step(chunked_view)
    assert chunked.to_dict() == whole.to_dict()
    assert dense.sum() == whole.total
    assert np.array_equal(
        np.flatnonzero(dense), np.searchsorted(chunked_view.steps, np.unique(whole.steps))
    )
