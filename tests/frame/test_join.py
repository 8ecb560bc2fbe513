"""Pieces joined a column and a piece at a time (`frame.join`): the frame the relaxed
diagonal concat makes, bit for bit, in one chunk a column, with each piece emptied."""

from __future__ import annotations

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from stabilitycli.frame import one_chunk_frame
from stabilitycli.frame.join import joined


def _concat_then_rechunk(pieces: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(pieces, how="diagonal_relaxed").rechunk()


def _pieces() -> list[pl.DataFrame]:
    rng = np.random.default_rng(7)
    return [
        # an empty JSON key, line numbers in 32 bits
        pl.DataFrame(
            {
                "step": np.arange(5),
                "_row": np.arange(1, 6, dtype=np.int32),
                "loss": rng.random(5),
                "": rng.random(5),
            }
        ),
        # line numbers past 32 bits, a null and a NaN, a key only this piece has
        pl.DataFrame(
            {
                "step": np.arange(5, 8),
                "_row": np.arange(6, 9, dtype=np.int64),
                "loss": [1.0, None, np.nan],
                "acc": [1, 2, 3],
            }
        ),
        pl.DataFrame(
            {
                "step": np.arange(8, 10),
                "_row": np.arange(9, 11, dtype=np.int32),
                "loss": [np.inf, -0.0],
                "": [1.0, 2.0],
                "phase": ["train", "eval"],
            }
        ),
    ]


def test_mixed_pieces_join_as_the_relaxed_concat_joins_them() -> None:
    want = _concat_then_rechunk(_pieces())
    pieces = _pieces()
    got = joined(pieces)
    assert pieces == []
    assert got.schema == want.schema
    assert_frame_equal(got, want, check_exact=True)
    assert all(got[name].n_chunks() == 1 for name in got.columns)
    # -0.0 stays -0.0, NaN stays NaN: the bits, not just the values
    assert np.signbit(got["loss"].to_numpy()[-1])


def test_number_columns_are_copied_a_piece_at_a_time_and_each_piece_let_go() -> None:
    rows = 1_000
    frames = [
        pl.DataFrame({"step": np.arange(i * rows, (i + 1) * rows), "loss": np.linspace(0, 1, rows)})
        for i in range(6)
    ]
    want = _concat_then_rechunk([f.clone() for f in frames])
    handed = list(frames)
    got = one_chunk_frame(handed)
    assert handed == []
    # the join drops each column from the pieces it came from, so nothing else holds them
    assert all(f.width == 0 for f in frames)
    assert_frame_equal(got, want, check_exact=True)
    assert got["loss"].n_chunks() == 1
