"""How well could ANY detector place the onsets that targets O2 and O3 ask for?

    .venv/bin/python benchmarks/onset_limits.py [--runs 200] [--stab-json dq.json]

An oracle, not a detector: on runs drawn by the same generators as
`detection_quality.py` (same noise families, logging intervals and event
sizes), it is told everything about the event except where it starts (the
loss level without noise, the event's shape and size, the noise scale) and
places the onset by least squares over every logged point. No method that
has to estimate those things from the log can do better on average, so a
scope where the oracle is on time in fewer than 95% of the runs is a scope
where the target asks for more than the log holds.

* O2 (divergence onset within 5% of the ramp's length): the oracle knows
  the noise-free level curve and that the loss then rises in a line for the
  ramp's length (and holds after it), but not by how much, so it fits
  level * (1 + a + b * clip(t - t0, 0, L)) by least squares in a and b for
  each candidate t0. Told the size as well, it is on time in every run of
  every scope; the size is what a detector has to estimate, so it is left out.
* O3 (a rank's level shift of >= 50% found within 10 steps): the rank's
  values divided by the known level are a unit-noise series that jumps by
  delta = h / spread; the maximum-likelihood change point for a known jump
  maximises the sum of (z - delta / 2) from the candidate on.

With `--stab-json` (a `detection_quality.py --json` file) stab's measured
value is printed beside the oracle's in each scope.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# the benchmark's own generators: `python benchmarks/onset_limits.py` puts this folder on sys.path
from _dq_synth import (
    FAMILIES,
    Case,
    level_curve,
    rank_run,
    real_residuals,
    single_run,
)
from detection_quality import DEFAULT_REAL_LOGS, INTERVALS, RAMP_SIZES, SIGMAS

RAMP_TOLERANCE_FRAC = 0.05  # O2: |onset error| <= 5% of the ramp's length
RANK_TOLERANCE_STEPS = 10  # O3: |onset error| <= 10 steps
RANK_SPREAD = 0.15  # O3's per-step spread across ranks, as a fraction of the level
RANK_SHIFTS = (0.5, 1.0)
POINTS = 3000  # the length of the benchmark's event runs
CANDIDATE_CHUNK = 256  # candidate onsets evaluated at once (memory: chunk x points floats)


def ramp_oracle_error(case: Case, rng: np.random.Generator, real) -> float:
    """Onset error of the least-squares ramp fit, as a fraction of the true ramp's length."""
    frame, truth = single_run(case, POINTS, rng, real)
    steps = frame["step"].to_numpy()
    loss = frame["loss"].to_numpy()
    level = level_curve(steps, POINTS * case.interval)
    short_length = truth.length if case.kind == "ramp-short" else None
    excess = loss / level - 1.0
    excess_centred = excess - excess.mean()
    # candidates within one ramp length of the truth, 400 per length: finer than the 5%
    # tolerance by 20x, and telling the oracle roughly where only makes it stronger
    candidates = np.unique(
        np.clip(
            np.round(truth.onset + truth.length * np.linspace(-1.0, 1.0, 801)),
            steps[0],
            steps[-2],
        )
    )
    best_sse, best_t0 = np.inf, int(candidates[0])
    for lo in range(0, candidates.size, CANDIDATE_CHUNK):
        t0 = candidates[lo : lo + CANDIDATE_CHUNK][:, None]
        length = short_length if short_length else np.maximum(steps[-1] - t0, 1.0)
        rise = np.clip(steps - t0, 0.0, length)
        rise -= rise.mean(axis=1, keepdims=True)
        # least squares in (a, b) per candidate: what is left after the best line on `rise`
        spread = (rise**2).sum(axis=1)
        along = rise @ excess_centred
        sse = (excess_centred**2).sum() - along**2 / np.where(spread > 0, spread, np.inf)
        sse = np.where(along > 0, sse, np.inf)  # a rise, not a fall
        at = int(np.argmin(sse))
        if sse[at] < best_sse:
            best_sse, best_t0 = float(sse[at]), int(candidates[lo + at])
    return (best_t0 - truth.onset) / truth.length


def rank_oracle_error(case: Case, rng: np.random.Generator, real) -> int:
    """Onset error in steps of the known-jump maximum-likelihood change point."""
    frame, truth = rank_run(case, POINTS, rng, real)
    rows = frame.filter(frame["rank"] == truth.rank)
    steps = rows["step"].to_numpy()
    level = level_curve(steps, POINTS * case.interval)
    z = (rows["loss"].to_numpy() / level - 1.0) / case.sigma
    delta = case.h / case.sigma
    # sum of (z - delta/2) from each candidate to the end: the log-likelihood gain of a jump there
    gain = np.cumsum((z - delta / 2.0)[::-1])[::-1]
    return int(steps[int(np.argmax(gain))] - truth.onset)


def stab_values(path: Path | None) -> dict[str, dict[str, float]]:
    if path is None:
        return {}
    targets = json.loads(path.read_text())["targets"]
    return {
        t["code"]: {scope: v["value"] for scope, v in t["scopes"].items()}
        for t in targets
        if t["code"] in ("O2", "O3")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per cell")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--real-logs", type=Path, default=DEFAULT_REAL_LOGS)
    parser.add_argument("--stab-json", type=Path, help="a detection_quality.py --json file")
    args = parser.parse_args()
    real = real_residuals(args.real_logs)
    measured = stab_values(args.stab_json)
    print("| scope (every/noise) | O2 oracle on time | O2 stab | O3 oracle on time | O3 stab |")
    print("|---|---|---|---|---|")
    for interval in INTERVALS:
        for family_index, family in enumerate(FAMILIES):
            rng = np.random.default_rng([args.seed, interval, family_index])
            ramp_errors = [
                ramp_oracle_error(Case(kind, "", h, sigma, interval, family), rng, real)
                for kind in ("ramp", "ramp-short")
                for h in RAMP_SIZES
                for sigma in SIGMAS
                for _ in range(args.runs)
            ]
            rank_errors = [
                rank_oracle_error(
                    Case("rank-shift", "", h, RANK_SPREAD, interval, family, ranks=4), rng, real
                )
                for h in RANK_SHIFTS
                for _ in range(args.runs)
            ]
            o2 = float(np.mean(np.abs(ramp_errors) <= RAMP_TOLERANCE_FRAC))
            o3 = float(np.mean(np.abs(rank_errors) <= RANK_TOLERANCE_STEPS))
            scope = f"{interval}/{family}"
            stab_o2 = measured.get("O2", {}).get(scope)
            stab_o3 = measured.get("O3", {}).get(scope)
            print(
                f"| {scope} | {o2:.1%} (n={len(ramp_errors)}) | "
                + ("–" if stab_o2 is None else f"{stab_o2:.1%}")
                + f" | {o3:.1%} (n={len(rank_errors)}) | "
                + ("–" if stab_o3 is None else f"{stab_o3:.1%}")
                + " |"
            )


if __name__ == "__main__":
    main()
