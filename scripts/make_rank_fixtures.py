"""Write the per-rank fixtures under fixtures/ranks/ (seeded: the same bytes every run).

    /tmp/venv/bin/python scripts/make_rank_fixtures.py [OUT_DIR]

Each fixture is a small, realistic per-rank log of one story:

* seed_64/            the seed 000 story: 64 ranks around 2.0 with per-rank
                      mini-batch noise; rank 41 stuck at 40.0 from step 1200;
                      one file per rank plus global.jsonl, the all-rank mean a
                      dashboard shows (2.05 -> 2.6)
* healthy_64.jsonl.gz 64 ranks x 250 steps, warmup then decay, heavy-tailed mini-batch
                      noise and one-step hard batches; tokens_per_s per rank
* nan_rank.jsonl.gz   16 ranks; rank 5 logs NaN at step 150, every rank from 152
* silent_rank.jsonl.gz 16 ranks; rank 9 stops logging after step 180
* straggler.jsonl.gz 32 ranks; rank 17 runs at 0.6x tokens_per_s from step 100
* two_outliers.jsonl.gz 32 ranks; rank 3 high from step 200, rank 28 low from
                      250 and back at 320
* allreduced_8.jsonl.gz 8 ranks logging the same all-reduced loss (MAD = 0)
* pair_2.jsonl        2 ranks; rank 1 jumps to 3x its level at step 200
* trio_3.jsonl        3 ranks; rank 2 jumps to 4.0 (cohort 2.8) from step 220
* mixed_names/        8 per-rank files named every recognised way, ranks
                      logging at offset steps, rank 4 at 3.1 from step 600, a
                      cut-off last line and an unranked global.jsonl
* custom_names/       4 files named node0_gpu<k>.jsonl (needs --rank-pattern)

The story functions return (steps, ranks x steps values) arrays, so tests
can build variants in memory with the same noise model.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240605


def noise(rng: np.random.Generator, shape, scale: float) -> np.ndarray:
    """Mini-batch noise: Student-t with 5 degrees of freedom (heavier tails than normal)."""
    return scale * rng.standard_t(5, size=shape) / np.sqrt(5 / 3)


def loss_curve(
    steps: np.ndarray, start: float = 10.5, floor: float = 2.0, warmup: int = 50
) -> np.ndarray:
    """Fast fall during warmup, then a slow power-law decay towards `floor`."""
    s = np.maximum(steps, 0).astype(float)
    return floor + (start - floor) * (1.0 + s / warmup) ** -0.9


def per_rank_losses(
    rng,
    steps,
    ranks: int,
    curve: np.ndarray,
    rel_noise: float = 0.02,
    hard_batch_rate: float = 0.004,
) -> np.ndarray:
    """ranks x steps losses: the curve plus noise scaled to the level, and rare hard batches."""
    values = curve[None, :] * (1.0 + noise(rng, (ranks, steps.size), rel_noise))
    hard = rng.random((ranks, steps.size)) < hard_batch_rate  # one-step hard batch on one rank
    values[hard] *= 1.0 + rng.uniform(0.15, 0.4, size=hard.sum())
    return values


def records(
    steps, values: np.ndarray, extra: dict[str, np.ndarray] | None = None, digits: int = 4
) -> list[dict]:
    out = []
    ranks, n = values.shape
    for r in range(ranks):
        for j in range(n):
            rec = {"step": int(steps[j]), "rank": r, "loss": _round(values[r, j], digits)}
            for key, arr in (extra or {}).items():
                rec[key] = _round(arr[r, j], 0)
            out.append(rec)
    return out


def _round(value: float, digits: int) -> float:
    value = float(value)
    return value if not np.isfinite(value) else round(value, digits)


# --- stories -------------------------------------------------------------------------


def seed_story(rng) -> tuple[np.ndarray, np.ndarray]:
    """64 ranks x 400 logged steps (every 5); rank 41 stuck at 40.0 from step 1200."""
    steps = np.arange(0, 2000, 5)
    curve = 2.0 + 0.1 * np.exp(-steps / 600.0)  # late in training: 2.1 easing to 2.0
    values = per_rank_losses(rng, steps, 64, curve, rel_noise=0.025)
    values[41, steps >= 1200] = 40.0
    return steps, values


def healthy_story(
    rng, ranks: int = 64, n_steps: int = 250
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps = np.arange(n_steps)
    values = per_rank_losses(rng, steps, ranks, loss_curve(steps))
    speed = 11800.0 * (1.0 + noise(rng, (ranks, n_steps), 0.015))
    return steps, values, speed


def nan_story(rng) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(300)
    values = per_rank_losses(rng, steps, 16, loss_curve(steps, start=4.0, floor=2.4))
    values[5, 150] = np.nan
    values[:, 152:] = np.nan  # the NaN reached the weights through the all-reduce
    return steps, values


def straggler_story(rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, values, speed = healthy_story(rng, ranks=32, n_steps=250)
    speed[17, steps >= 100] *= 0.6
    return steps, values, speed


def two_outliers_story(rng) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(400)
    values = per_rank_losses(rng, steps, 32, loss_curve(steps, start=6.0, floor=2.2))
    values[3, steps >= 200] = 6.0 + noise(rng, (steps >= 200).sum(), 0.2)
    low = (steps >= 250) & (steps < 320)
    values[28, low] = 0.35 + noise(rng, low.sum(), 0.02)  # a rank fed padding-only batches
    return steps, values


def allreduced_story(rng) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(300)
    curve = loss_curve(steps) * (1.0 + noise(rng, steps.size, 0.02))
    return steps, np.repeat(curve[None, :], 8, axis=0)


def pair_story(rng) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(300)
    values = per_rank_losses(rng, steps, 2, loss_curve(steps, start=5.0, floor=2.3))
    values[1, steps >= 200] *= 3.0
    return steps, values


def trio_story(rng) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(300)
    values = per_rank_losses(rng, steps, 3, loss_curve(steps, start=5.0, floor=2.2))
    values[2, steps >= 220] = 4.0 + noise(rng, (steps >= 220).sum(), 0.05)
    return steps, values


# --- writers ---------------------------------------------------------------------------


def _dumps(rec: dict) -> str:
    return json.dumps(rec, separators=(",", ":"))


def write_jsonl(path: Path, recs: list[dict]) -> None:
    text = "".join(_dumps(r) + "\n" for r in recs).encode()
    if path.name.endswith(".gz"):
        # mtime=0: the same bytes on every run
        path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    elif path.name.endswith(".zst"):
        import pyarrow as pa

        with pa.output_stream(str(path), compression="zstd") as stream:
            stream.write(text)
    else:
        path.write_bytes(text)


def write_rank_dir(folder: Path, recs: list[dict], names: dict[int, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, name in names.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(
            target, [{k: v for k, v in r.items() if k != "rank"} for r in recs if r["rank"] == rank]
        )


def main(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    out.mkdir(parents=True, exist_ok=True)

    steps, values = seed_story(rng)
    recs = records(steps, values, digits=3)
    write_rank_dir(out / "seed_64", recs, {r: f"rank_{r:02d}.jsonl.gz" for r in range(64)})
    mean = values.mean(axis=0)
    write_jsonl(
        out / "seed_64" / "global.jsonl",
        [{"step": int(s), "loss": round(float(m), 4)} for s, m in zip(steps, mean, strict=True)],
    )

    steps, values, speed = healthy_story(rng)
    write_jsonl(
        out / "healthy_64.jsonl.gz", records(steps, values, {"tokens_per_s": speed}, digits=3)
    )

    steps, values = nan_story(rng)
    write_jsonl(out / "nan_rank.jsonl.gz", records(steps, values, digits=3))

    steps, values, _ = healthy_story(rng, ranks=16, n_steps=300)
    # rank 9's logger stops; the others go on
    recs = [r for r in records(steps, values, digits=3) if not (r["rank"] == 9 and r["step"] > 180)]
    write_jsonl(out / "silent_rank.jsonl.gz", recs)

    steps, values, speed = straggler_story(rng)
    write_jsonl(
        out / "straggler.jsonl.gz", records(steps, values, {"tokens_per_s": speed}, digits=3)
    )

    steps, values = two_outliers_story(rng)
    write_jsonl(out / "two_outliers.jsonl.gz", records(steps, values, digits=3))

    steps, values = allreduced_story(rng)
    write_jsonl(out / "allreduced_8.jsonl.gz", records(steps, values, digits=4))

    steps, values = pair_story(rng)
    write_jsonl(out / "pair_2.jsonl", records(steps, values, digits=4))

    steps, values = trio_story(rng)
    write_jsonl(out / "trio_3.jsonl", records(steps, values, digits=4))

    _mixed_names(rng, out / "mixed_names")
    _custom_names(rng, out / "custom_names")


def _mixed_names(rng, folder: Path) -> None:
    """8 ranks logging every 10 steps at offset k (rank k logs steps 10*i + k)."""
    n = 100
    names = {
        0: "rank_0.jsonl",
        1: "rank1.jsonl",
        2: "rank-002.jsonl.gz",
        3: "worker_3.jsonl",
        4: "log.rank4.jsonl",
        5: "rank_5/metrics.jsonl",
        6: "rank-006.jsonl.zst",
        7: "node0-rank07.ndjson",
    }
    recs = []
    for rank in range(8):
        steps = np.arange(n) * 10 + rank
        values = per_rank_losses(rng, steps, 1, loss_curve(steps, start=4.0, floor=2.3))[0]
        if rank == 4:
            values[steps >= 600] = 3.1 + noise(rng, (steps >= 600).sum(), 0.02)
        recs += [
            {"step": int(s), "rank": rank, "loss": round(float(v), 4)}
            for s, v in zip(steps, values, strict=True)
        ]
    write_rank_dir(folder, recs, names)
    # the job died while rank 0 was writing its last line
    with open(folder / "rank_0.jsonl", "ab") as handle:
        handle.write(b'{"step":1000,"lo')
    write_jsonl(folder / "global.jsonl", [{"step": 0, "loss": 4.0}])


def _custom_names(rng, folder: Path) -> None:
    steps = np.arange(0, 200, 2)
    values = per_rank_losses(rng, steps, 4, loss_curve(steps, start=3.0, floor=2.5))
    values[1, steps >= 120] = np.inf
    recs = records(steps, values, digits=4)
    write_rank_dir(folder, recs, {r: f"node0_gpu{r}.jsonl" for r in range(4)})


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures" / "ranks")
