"""The peer approach: stab's spike (section 2) and rank (section 4) rules as a user would
write them in pandas, with no care for speed beyond vectorising.

    python benchmarks/_perf_pandas_peer.py LOG.jsonl [--loss KEY] [--rank KEY]

Reads the whole log with `pandas.read_json(lines=True)` (pandas' default
engine, what a first attempt uses), then:

* spike: the loss (the per-step mean over ranks when there are ranks) against
  the mean and std of its trailing 100 points, std floored at 1% of the mean;
  a point at z >= 3 is flagged, and a spike when it is material (z >= 6 and
  at least 1.5x the baseline mean);
* ranks: each rank's loss against the median and MAD of all ranks at that step
  (MAD floored at 1% of the median), robust z >= 6 for 10 steps in a row names
  the rank.

Prints one JSON line with what it found, so a run can be checked against stab.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd

WINDOW_POINTS = 100
FLAG_Z, MATERIAL_Z, MATERIAL_RATIO = 3.0, 6.0, 1.5
RANK_Z, RANK_PERSIST_STEPS, MAD_FLOOR_FRAC = 6.0, 10, 0.01
MAD_TO_SIGMA = 1.4826  # MAD of a normal sample is 0.6745 sigma


def spike_steps(loss: pd.Series) -> list[int]:
    """Steps (the series' index) of material spikes."""
    trailing = loss.rolling(WINDOW_POINTS, min_periods=WINDOW_POINTS)
    mean = trailing.mean().shift(1)
    sigma = np.maximum(trailing.std().shift(1), 0.01 * mean.abs())
    z = (loss - mean) / sigma
    material = (z >= FLAG_Z) & (z >= MATERIAL_Z) & (loss >= MATERIAL_RATIO * mean)
    return [int(s) for s in loss.index[material.to_numpy()]]


def outlier_ranks(frame: pd.DataFrame, loss: str, rank: str) -> list[int]:
    by_step = frame.groupby("step")[loss]
    median = by_step.transform("median")
    deviation = (frame[loss] - median).abs()
    mad = deviation.groupby(frame["step"]).transform("median")
    scale = MAD_TO_SIGMA * np.maximum(mad, MAD_FLOOR_FRAC * median.abs())
    flagged = pd.DataFrame(
        {"rank": frame[rank], "step": frame["step"], "out": deviation / scale >= RANK_Z}
    ).sort_values(["rank", "step"], kind="stable")
    # a streak is a stretch of equal flags within one rank
    streak = (
        (flagged["out"] != flagged["out"].shift()) | (flagged["rank"] != flagged["rank"].shift())
    ).cumsum()
    length = flagged.groupby(streak)["out"].transform("size")
    named = flagged.loc[flagged["out"] & (length >= RANK_PERSIST_STEPS), "rank"]
    return sorted(int(r) for r in named.unique())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--loss", default="loss")
    parser.add_argument("--rank", default="rank")
    args = parser.parse_args()
    frame = pd.read_json(args.path, lines=True)
    has_ranks = args.rank in frame.columns
    loss = (
        frame.groupby("step")[args.loss].mean() if has_ranks else frame.set_index("step")[args.loss]
    )
    found = {"rows": len(frame), "spike_steps": spike_steps(loss)}
    if has_ranks:
        found["outlier_ranks"] = outlier_ranks(frame, args.loss, args.rank)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
