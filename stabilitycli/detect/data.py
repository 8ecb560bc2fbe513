"""The data stream: a batch served again within a short window (Q2.3's data-loader bug)."""

from __future__ import annotations

import numpy as np
import polars as pl

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.data import DUPLICATE_BATCH, DuplicateBatchEvidence
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView


@rule(
    DUPLICATE_BATCH.rule,
    DUPLICATE_BATCH.section,
    "a batch id repeated within {duplicate_batch_window_steps} steps (data-loader bug)",
    emits=(DUPLICATE_BATCH,),
    series=("batch_id",),
    reads=("duplicate_batch_window_steps",),
)
def detect_duplicate_batch(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """A batch id (index or hash) logged again within {duplicate_batch_window_steps} steps
    of its last use.

    What it detects: every logged step whose `batch_id` equals the batch id
    of a step at most {duplicate_batch_window_steps} steps
    (`duplicate_batch_window_steps`) earlier, whether or not the loss spiked
    there; counted, with the first repeat and the longest run of repeats.

    Why it matters: a data loader that serves the same batch again (a resume
    that rewound the cursor, a sampler bug) makes the model memorise it (the
    loss falls on every repeat) and shifts the data the run sees; as a spike's
    cause it is Q2.3's data-loader bug.
    """
    result = RuleResult()
    found = view.finite_or_skip("batch_id", DUPLICATE_BATCH.rule, 2, result.skipped)
    if found is None:
        return result
    steps, batch = found
    previous = (
        pl.DataFrame({"step": steps, "batch": batch})
        .select(pl.col("step").shift(1).over("batch").alias("previous"))["previous"]
        .fill_null(-(10**18))
        .to_numpy()
    )
    repeat = steps - previous <= thresholds.duplicate_batch_window_steps
    if not repeat.any():
        return result
    hits = np.flatnonzero(repeat)
    runs = pl.Series(repeat).rle()
    lengths = runs.struct.field("len").to_numpy()[runs.struct.field("value").to_numpy()]
    first = int(hits[0])
    result.findings.append(
        DUPLICATE_BATCH.finding(
            f"{hits.size} step(s) reuse a batch id seen within "
            f"{thresholds.duplicate_batch_window_steps} steps; "
            f"first at step {steps[first]} (batch {batch[first]:.0f}, "
            f"last used at step {int(previous[first])}); "
            f"longest run of repeats {int(lengths.max())} steps",
            step=int(steps[first]),
            end_step=int(steps[hits[-1]]),
            metric="batch_id",
            evidence=DuplicateBatchEvidence(
                repeats=int(hits.size),
                first_step=int(steps[first]),
                batch_id=float(batch[first]),
                previous_step=int(previous[first]),
                longest_run=int(lengths.max()),
                steps=steps[hits][:20].tolist(),
            ),
        )
    )
    return result
