"""Write one `fires` and one `quiet` log per finding code under fixtures/rules/ (seeded).

    python scripts/make_rule_fixtures.py

fixtures/rules/<code>/fires/ holds a small log in which `stab analyze` must
report <code>; fixtures/rules/<code>/quiet/ holds a near miss in which it must
not: the same kind of run with the event just under the rule's bar (a spike
below 1.5x, an LR step of +40% against the 50% rule, a loss scale that bottoms
out at exactly 1, a rank that deviates for 6 steps against the 10 it must), or,
where no bar can be approached, the same run without the event.

Every expected.json says, with reasons taken from the input rather than from
stab's output: the finding `code`, `expect` ("fires" or "quiet"), the `input`
file beside it, and for fires the `step` (and `rank`, `severity`) the finding
must carry, `step_tolerance` where the rule estimates an onset, and `set`
(`--set NAME=VALUE` overrides) when a fixture needs one. A quiet fixture whose
event sits just under a configurable bar names it in `fires_with`: the
`--set` that moves the bar past the event, under which the same log must
fire at `event_step` (proof that it is a near miss, not a log with nothing in
it). `why` is
one line for the reader. tests/detect/test_rule_fixtures.py runs them all.

Loss curves are `make_fixtures.base_run` (power-law decay, right-skewed gamma
mini-batch noise, log-normal grad-norm jitter, warmup + cosine LR); per-rank
logs use `make_rank_fixtures` (Student-t noise per rank, rare hard batches).
Many cases read a late excerpt of a run (steps 3000+), where the curve is
nearly flat, so a 100-step baseline measures noise rather than the decay.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import _rows, base_run
from make_rank_fixtures import loss_curve, noise, per_rank_losses, records, write_jsonl

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
LATE = 3000  # first step of a late excerpt
FP16 = {"dtype": "fp16"}


# --- writing ---------------------------------------------------------------------------


def write_case(
    code: str,
    expect: str,
    rows: list[dict],
    why: str,
    *,
    step: int | None = None,
    tolerance: int = 0,
    manifest: dict | None = None,
    extra: dict | None = None,
    fires_with: dict | None = None,
    event_step: int | None = None,
) -> None:
    """One fixture folder: run.jsonl (or run.jsonl.gz when big), expected.json, manifest."""
    folder = OUT / code / expect
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    # bare NaN / Infinity, as json.dumps writes them from a training script
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
    if len(text) > 60_000:
        name = "run.jsonl.gz"
        (folder / name).write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    else:
        name = "run.jsonl"
        (folder / name).write_bytes(text)
    if manifest:
        (folder / "manifest.json").write_text(json.dumps(manifest) + "\n")
    expected: dict = {"code": code, "expect": expect, "input": name, "why": why}
    if step is not None:
        expected["step"] = step
    if fires_with:
        expected["fires_with"] = fires_with
    if event_step is not None:
        expected["event_step"] = event_step
    if tolerance:
        expected["step_tolerance"] = tolerance
    expected.update(extra or {})
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def write_rank_case(code: str, expect: str, recs: list[dict], why: str, **kwargs) -> None:
    folder = OUT / code / expect
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_jsonl(folder / "run.jsonl.gz", recs)
    expected: dict = {"code": code, "expect": expect, "input": "run.jsonl.gz", "why": why}
    expected.update(kwargs)
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def rows_of(run: dict[str, np.ndarray], *names: str) -> list[dict]:
    """JSONL rows with the canonical key names and only the columns a case needs."""
    return _rows(run, {n: n for n in names}, 1)


def late(seed: int, steps: int = 600, noise_level: float = 0.02) -> dict[str, np.ndarray]:
    """The steps LATE..LATE+steps of a long run: the decay is nearly flat there."""
    run = base_run(seed, steps=LATE + steps, noise=noise_level)
    return {k: v[LATE:].copy() for k, v in run.items()}


def at(run: dict[str, np.ndarray], step: int) -> int:
    """Row index of a step in a run's arrays."""
    return int(np.flatnonzero(run["step"] == step)[0])


# --- §1 --------------------------------------------------------------------------------


def nan_cases() -> None:
    run = late(101)
    first = LATE + 400
    i = at(run, first)
    run["loss"][i:] = np.nan
    write_case(
        "nan",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "loss NaN from step 3400 to the end of the log",
        step=first,
    )

    # the near miss: an fp16 run whose grad norm is Inf twice, each time answered by
    # a halving of the loss scale, the loss finite throughout
    run = late(102)
    scale = np.full(run["step"].size, 65536.0)
    for s in (LATE + 250, LATE + 450):
        i = at(run, s)
        run["grad_norm"][i] = np.inf
        scale[i:] /= 2
    run["loss_scale"] = scale
    write_case(
        "nan",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr", "loss_scale"),
        "Inf grad norm at 3250 and 3450 under a dynamic loss scale that halves each time: "
        "fp16 overflows the scaler skipped, not a NaN hidden from the loss",
    )


# --- §2 --------------------------------------------------------------------------------


def spike_cases() -> None:
    run = late(111)
    onset = LATE + 350
    i = at(run, onset)
    run["grad_norm"][i - 1] *= 50  # a rare-token batch: the grad norm leads the loss by one step
    run["loss"][i : i + 3] += np.array([2.0, 1.1, 0.4])
    write_case(
        "spike",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "loss +2.0/+1.1/+0.4 over three steps from 3350 after a 50x grad norm at 3349; "
        "back to the baseline within a few steps (recoverable)",
        step=onset,
        extra={"severity": "warning"},
    )

    # one point, z far above 6 but only 1.4x the baseline (materiality (c) wants 1.5x),
    # no grad-norm, LR or batch cause, the next point back in the noise: a blip
    run = late(111)
    i = at(run, onset)
    run["loss"][i] *= 1.4
    write_case(
        "spike",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr"),
        "one isolated point 1.4x the level at 3350 with no cause: below the 1.5x bar for a "
        "one-point spike, so a blip",
        fires_with={"spike_large_ratio": 1.3},
        event_step=onset,
    )


def recurring_spike_cases() -> None:
    # single-step jumps of 1.7x that come straight back, no grad-norm, LR or batch cause:
    # the pattern of a large healthy run (seed 002's type 1), told once when there are many
    spikes_at = [LATE + s for s in (300, 650, 1000, 1350, 1700)]
    run = late(121, steps=2000)
    for step in spikes_at:
        run["loss"][at(run, step)] *= 1.7
    write_case(
        "recurring-spikes",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "five one-point 1.7x loss spikes with no cause, each back at the next step: one "
        "recurring-spikes finding at the first of them",
        step=spikes_at[0],
        extra={"severity": "warning"},
    )
    run = late(121, steps=2000)
    for step in spikes_at[:2]:
        run["loss"][at(run, step)] *= 1.7
    write_case(
        "recurring-spikes",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr"),
        "two such spikes: below the count of 3 that makes them recurring, so two spike findings",
        fires_with={"recurring_spike_min_count": 2},
        event_step=spikes_at[0],
    )


def blip_cases() -> None:
    # a smooth large-batch run (0.4% noise): sigma is the 1% floor of the level, so
    # z is the bump in percent; noise alone never reaches 3% of the level
    def smooth() -> dict[str, np.ndarray]:
        return late(121, noise_level=0.004)

    run = smooth()
    step = LATE + 420
    run["loss"][at(run, step)] *= 1.04
    write_case(
        "blip",
        "fires",
        rows_of(run, "loss"),
        "one point 4% above a smooth loss at 3420 (z about 4 against the 1% sigma floor): "
        "flagged, alone, no cause, not large",
        step=step,
    )
    run = smooth()
    run["loss"][at(run, step)] *= 1.025
    write_case(
        "blip",
        "quiet",
        rows_of(run, "loss"),
        "the same point only 2.5% high (z about 2.5): under mu + 3 sigma, nothing flagged",
        fires_with={"spike_sigma": 2.0},
        event_step=step,
    )


def jump_cases() -> None:
    # 60 steps: too short for a 100-step baseline, so only step-over-step jumps are read
    run = base_run(131, steps=60)
    run["loss"][40:] *= 1.7
    write_case(
        "loss-jump",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "a 60-step log whose loss steps up 1.7x at step 40 (the rule's bar: 1.5x)",
        step=40,
    )
    run = base_run(131, steps=60)
    run["loss"][40:] *= 1.35
    write_case(
        "loss-jump",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr"),
        "the same short log with a 1.35x step: below the 1.5x bar",
    )

    run = base_run(132, steps=60)
    run["grad_norm"][30] *= 3.0
    write_case(
        "grad-norm-jump",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "a 60-step log whose grad norm is 3x its previous value at step 30 (bar: 2x)",
        step=30,
    )
    run = base_run(132, steps=60)
    run["grad_norm"][30] *= 1.4
    write_case(
        "grad-norm-jump",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr"),
        "the same short log with the grad norm 1.4x at step 30: below the 2x bar",
    )


def grad_norm_spike_cases() -> None:
    step = LATE + 300
    run = late(141)
    run["grad_norm"][at(run, step)] *= 15
    write_case(
        "grad-norm-spike",
        "fires",
        rows_of(run, "loss", "grad_norm"),
        "grad norm 15x its level at 3300 (bar: 10x the trailing median), loss unmoved",
        step=step,
    )
    run = late(141)
    run["grad_norm"][at(run, step)] *= 6
    write_case(
        "grad-norm-spike",
        "quiet",
        rows_of(run, "loss", "grad_norm"),
        "the same run with the grad norm only 6x at 3300: under the 10x bar",
        fires_with={"grad_norm_outlier_ratio": 5.0},
        event_step=step,
    )


def duplicate_batch_cases() -> None:
    step = LATE + 400
    run = late(151)
    run["batch_id"] = run["step"].astype(float) + 70_000
    i = at(run, step)
    run["batch_id"][i] = run["batch_id"][i - 37]
    write_case(
        "duplicate-batch",
        "fires",
        rows_of(run, "loss", "batch_id"),
        "the batch of step 3363 served again at step 3400 (37 steps later; window: 100)",
        step=step,
    )
    # a small dataset of 150 batches: every batch comes back, one epoch (150 steps) later
    run = late(151)
    run["batch_id"] = (run["step"] % 150).astype(float)
    write_case(
        "duplicate-batch",
        "quiet",
        rows_of(run, "loss", "batch_id"),
        "150 batches per epoch: each batch id repeats exactly 150 steps later, past the "
        "100-step window",
        fires_with={"duplicate_batch_window_steps": 150},
        event_step=LATE + 150,  # the batch of step 3000 comes back
    )


def lr_jump_cases() -> None:
    step = LATE + 300
    run = late(161)
    run["lr"][at(run, step) :] *= 2.0
    write_case(
        "lr-jump",
        "fires",
        rows_of(run, "loss", "lr"),
        "LR doubles between steps 3299 and 3300 (a scheduler state restored wrong)",
        step=step,
    )
    run = late(161)
    run["lr"][at(run, step) :] *= 1.4
    write_case(
        "lr-jump",
        "quiet",
        rows_of(run, "loss", "lr"),
        "the same step change at +40%: under the +50% bar",
        fires_with={"lr_jump_ratio": 0.3},
        event_step=step,
    )


def sgdr(seed: int, decay_steps: float, steps: int = 4000, period: int = 1000) -> dict:
    """Cosine with warm restarts every `period` steps (SGDR, 100-step warmup), the loss
    bumping +0.3 after each restart and falling back with time constant `decay_steps`
    (a negative one: linearly, to 0 after -decay_steps)."""
    rng = np.random.default_rng(seed)
    step = np.arange(steps)
    into = step % period
    lr = 1e-6 + 0.5 * (3e-4 - 1e-6) * (1 + np.cos(np.pi * into / period))
    lr = np.where(step < 100, 3e-4 * (step + 1) / 100, lr)
    shape = (
        np.exp(-into / decay_steps) if decay_steps > 0 else np.clip(1 + into / decay_steps, 0, None)
    )
    bump = np.where(step >= period, 0.3 * shape, 0.0)
    loss = 2.0 + 2.0 * np.exp(-step / 250) + bump + rng.normal(0, 0.02, steps)
    return {"step": step, "loss": loss, "lr": lr}


def schedule_restart_cases() -> None:
    write_case(
        "schedule-restart",
        "fires",
        rows_of(sgdr(181, 20.0), "loss", "lr"),
        "SGDR: the LR back to its 3e-4 peak every 1000 steps; the loss bumps +0.3 after "
        "each restart and decays with a 20-step time constant",
        step=1000,
    )
    write_case(
        "schedule-restart",
        "quiet",
        rows_of(sgdr(182, -750.0), "loss", "lr"),
        "the same restarts, the bump falling linearly to 0 over 750 steps: back to "
        "baseline after more than half the 1000-step period",
        fires_with={"restart_decay_period_frac": 0.9},
        event_step=1000,
    )


# --- §3 --------------------------------------------------------------------------------


def loss_scale_cases() -> None:
    # overflow -> halve, 40 clean steps -> double: the scaler doing its job
    run = late(171)
    scale = np.full(run["step"].size, 65536.0)
    first = LATE + 150
    for s in (first, LATE + 330, LATE + 470):
        i = at(run, s)
        run["grad_norm"][i] = np.inf
        scale[i:] /= 2
        scale[i + 40 :] *= 2
    run["loss_scale"] = scale
    write_case(
        "loss-scale-halving",
        "fires",
        rows_of(run, "loss", "grad_norm", "loss_scale"),
        "three overflows (Inf grad norm), the scale halving at each and regrowing 40 steps "
        "later; the first halving at 3150",
        step=first,
    )
    run = late(171)
    run["loss_scale"] = 1024.0 * 2.0 ** (np.arange(run["step"].size) // 200)
    write_case(
        "loss-scale-halving",
        "quiet",
        rows_of(run, "loss", "grad_norm", "loss_scale"),
        "a dynamic scale that only grows (doubling every 200 clean steps): no backoff",
    )

    run = late(172)
    run["loss_scale"] = np.full(run["step"].size, 128.0)
    overflows = [LATE + 120, LATE + 260, LATE + 380, LATE + 510]
    for s in overflows:
        run["grad_norm"][at(run, s)] = np.inf
    write_case(
        "loss-scale-static",
        "fires",
        rows_of(run, "loss", "grad_norm", "loss_scale"),
        "four overflows while the scale stays at 128: no dynamic scaling; first at 3120",
        step=overflows[0],
    )
    run = late(172)
    run["loss_scale"] = np.full(run["step"].size, 128.0)
    run["grad_norm"][at(run, overflows[0])] = np.inf
    write_case(
        "loss-scale-static",
        "quiet",
        rows_of(run, "loss", "grad_norm", "loss_scale"),
        "one overflow under a constant scale: two are needed to say scaling is off",
        fires_with={"static_scale_min_overflows": 1},
        event_step=overflows[0],
    )

    start = LATE + 300
    for expect, halvings in (("fires", 20), ("quiet", 16)):
        run = late(173)
        scale = np.full(run["step"].size, 65536.0)
        for k in range(halvings):  # an overflow on every step, each halving the scale
            i = at(run, start + k)
            run["grad_norm"][i] = np.inf
            scale[i:] = 65536.0 / 2 ** (k + 1)
        run["loss_scale"] = scale
        if expect == "fires":
            # 65536 / 2**17 is the first value below 1: the 17th halving, at start + 16
            write_case(
                "loss-scale-collapsed",
                "fires",
                rows_of(run, "loss", "grad_norm", "loss_scale"),
                "20 overflows in a row from 3300 halve the scale from 65536 to 2**-4; "
                "it first drops below 1 at the 17th, step 3316",
                step=start + 16,
            )
        else:
            write_case(
                "loss-scale-collapsed",
                "quiet",
                rows_of(run, "loss", "grad_norm", "loss_scale"),
                "16 overflows in a row bring the scale down to exactly 1 (a scaler's floor) and "
                "the overflows stop: never below 1",
                fires_with={"min_loss_scale": 2.0},
                event_step=start + 15,  # 65536 / 2**16 = 1 < 2
            )

    run = late(174)
    first = LATE + 100
    run["grad_norm"][at(run, first) :: 40] = np.inf
    write_case(
        "fp16-overflow",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "an fp16 run with no loss-scale series: Inf grad norm every 40 steps from 3100 "
        "(2.5% of steps; bar 1%)",
        step=first,
        manifest=FP16,
    )
    run = late(174)
    run["grad_norm"][at(run, first) :: 150] = np.inf
    write_case(
        "fp16-overflow",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr"),
        "the same fp16 run overflowing every 150 steps (4 of 600, 0.67%): under the 1% bar",
        manifest=FP16,
        fires_with={"overflow_rate_unabsorbed": 0.005},
        event_step=first,
    )


# --- §4 --------------------------------------------------------------------------------


def ramp(run: dict[str, np.ndarray], start: int, length: int) -> np.ndarray:
    """0 before `start`, rising linearly to 1 over `length` steps, then 1."""
    return np.clip((run["step"] - start) / length, 0.0, 1.0)


def divergence_cases() -> None:
    # the loss turns up at 3500 and keeps climbing (+0.6 by 3900) while the grad norm triples
    start = LATE + 500
    run = late(181, steps=900)
    up = np.clip((run["step"] - start) / 400.0, 0.0, None)
    run["loss"] += 0.6 * up
    run["grad_norm"] *= 1 + 2 * up
    for code in ("divergence", "grad-norm-rising"):
        write_case(
            code,
            "fires",
            rows_of(run, "loss", "grad_norm", "lr"),
            "loss rising from 3500 to the end (+0.6 by 3900, 25% of its level) and the grad "
            "norm tripling with it",
            step=start,
            tolerance=100,
        )

    # the same kind of rise, but the run comes back below where it started
    hump = late(182, steps=900)
    bump_start, top, back = LATE + 300, LATE + 550, LATE + 800
    rise = np.interp(hump["step"], [bump_start, top, back], [0.0, 0.5, -0.05])
    hump["loss"] += rise
    write_case(
        "divergence",
        "quiet",
        rows_of(hump, "loss", "grad_norm", "lr"),
        "loss rises 0.5 over 3300-3550 and falls back below its starting level by 3800: "
        "undone, so not divergence",
    )
    write_case(
        "loss-rise",
        "fires",
        rows_of(hump, "loss", "grad_norm", "lr"),
        "loss rises 0.5 over 3300-3550 (a significant 200-step trend) and the run undoes it by "
        "3800 (the finding names the steepest window, not an onset: no step checked)",
    )
    write_case(
        "loss-rise",
        "quiet",
        rows_of(late(182, steps=900), "loss", "grad_norm", "lr"),
        "the same run without the hump: a flat, noisy loss",
    )

    # divergence whose cause is the weight norm; the grad norm drifts up only 15%
    run = late(183, steps=900)
    up = np.clip((run["step"] - start) / 400.0, 0.0, None)
    run["loss"] += 0.6 * up
    run["grad_norm"] *= 1 + 0.15 * np.clip(up, 0, 1)
    run["param_norm"] = 80.0 * (1 + 2.5 * up)
    write_case(
        "grad-norm-rising",
        "quiet",
        rows_of(run, "loss", "grad_norm", "lr", "param_norm"),
        "a divergence from 3500 with the weight norm growing 3.5x; the grad norm rises only "
        "15% (bar: 25%)",
    )

    # no LR, weight-norm or grad-norm cause: a drift of 3% is a plateau, 8% divergence
    for expect, drift in (("fires", 0.03), ("quiet", 0.08)):
        run = late(184, steps=900, noise_level=0.01)
        level = float(np.median(run["loss"][:100]))
        run["loss"] += drift * level * ramp(run, start, 300)
        if expect == "fires":
            write_case(
                "plateau",
                "fires",
                rows_of(run, "loss", "grad_norm", "lr"),
                "loss drifts up 3% of its level over 3500-3800 and stays there; LR decaying, "
                "grad norm flat: no cause, under the 5% divergence bar",
                step=start,
                tolerance=150,
            )
        else:
            write_case(
                "plateau",
                "quiet",
                rows_of(run, "loss", "grad_norm", "lr"),
                "the same drift at 8% of the level: above the 5% bar, so divergence",
                fires_with={"divergence_min_rise_frac": 0.1},
                event_step=start,
                tolerance=150,
            )


def schedule_cases() -> None:
    # cosine decay after a 100-step warmup, then from 700 the LR climbs back to 2x by 1100
    run = base_run(191, steps=1200)
    lr = run["lr"].copy()
    turn = 700
    lr[turn:] = lr[turn] * (1 + np.clip((run["step"][turn:] - turn) / 400.0, 0, 1))
    run["lr"] = lr
    window = 200
    first_decrease = int(run["step"][np.flatnonzero(np.diff(lr) < 0)[0] + 1])
    # Q4.2: LR at t more than 5% above LR at t - 200, the window past warmup
    t = run["step"]
    rising = (t - window >= first_decrease) & (t >= window)
    rising[window:] &= lr[window:] > 1.05 * lr[:-window]
    rising[:window] = False
    write_case(
        "lr-increasing",
        "fires",
        rows_of(run, "loss", "lr"),
        "LR decays after warmup, then climbs back linearly from 700 to 2x by 1100; the first "
        "200-step window whose end is 5% above its start begins at the step checked",
        step=int(t[np.argmax(rising)] - window),
    )
    run = base_run(191, steps=1200, warmup=500)
    write_case(
        "lr-increasing",
        "quiet",
        rows_of(run, "loss", "lr"),
        "LR rises for 500 of 1200 steps, but as warmup: it rises only before its first decrease",
        fires_with={"warmup_frac": 0.2},
        event_step=240,  # warmup then ends at 20% of 1199 steps: the first window starts at 240
    )

    # the parameter norm grows 2.5x over 150 steps from 3300
    start = LATE + 300
    run = late(192, steps=700)
    growth = ramp(run, start, 150)
    run["param_norm"] = 120.0 * (1 + 1.5 * growth)
    t = run["step"]
    ratio = np.full(t.size, np.nan)
    ratio[200:] = run["param_norm"][200:] / run["param_norm"][:-200]
    write_case(
        "weight-norm-change",
        "fires",
        rows_of(run, "loss", "param_norm"),
        "param norm 120 -> 300 over 3300-3450; the first step more than 2x its value 200 steps "
        "earlier is the step checked",
        step=int(t[np.argmax(np.nan_to_num(ratio) > 2.0)]),
    )
    run = late(192, steps=700)
    run["param_norm"] = 120.0 * (1 + 0.8 * ramp(run, start, 200))
    write_case(
        "weight-norm-change",
        "quiet",
        rows_of(run, "loss", "param_norm"),
        "the param norm grows 1.8x over 200 steps: under the 2x bar",
        fires_with={"weight_norm_ratio": 1.5},
        event_step=start + 126,  # 1 + 0.8 * 126 / 200 is the first ratio above 1.5
    )


# --- restarts --------------------------------------------------------------------------


def restart_cases() -> None:
    keys = ("loss", "grad_norm", "lr")
    # the job reached step 799, crashed, and resumed from the checkpoint at 700
    first = base_run(201, steps=1000)
    resumed = base_run(202, steps=1000)  # same curve, the replay's own mini-batch noise
    write_case(
        "restart",
        "fires",
        rows_of(first, *keys)[:800] + rows_of(resumed, *keys)[700:],
        "steps 0-799, then the log goes back to 700 (resumed from a checkpoint) and runs to 999",
        step=700,
    )
    gap = rows_of(first, *keys)
    write_case(
        "restart",
        "quiet",
        gap[:800] + gap[850:],
        "the job was down and lost steps 800-849 of its log, but the step never goes backwards",
    )

    # the resume lost the optimizer moments: the replayed loss jumps and takes ~40 steps back
    resumed = base_run(202, steps=1000)
    resumed["loss"][700:] += 0.9 * np.exp(-np.arange(300) / 12.0)
    write_case(
        "restart-replay",
        "fires",
        rows_of(first, *keys)[:800] + rows_of(resumed, *keys)[700:],
        "resumed at 700 after reaching 799; the replayed loss starts 0.9 above the abandoned "
        "one and decays back: departs from the pre-restart noise band (warning)",
        step=700,
        extra={"severity": "warning"},
    )
    write_case(
        "restart-replay",
        "quiet",
        rows_of(first, *keys)[:800] + rows_of(base_run(202, steps=1000), *keys)[798:],
        "a restart that rewinds only 2 steps (799 -> 798): fewer than 3 replayed points, "
        "nothing to compare (the restart itself is still reported)",
    )


# --- throughput and ranks --------------------------------------------------------------


def throughput_cases() -> None:
    rng = np.random.default_rng(211)
    drop = LATE + 300
    run = late(211)
    speed = 11800.0 * rng.lognormal(0.0, 0.01, run["step"].size)
    run["tokens_per_s"] = np.where(run["step"] >= drop, 0.8 * speed, speed)
    write_case(
        "throughput-drop",
        "fires",
        rows_of(run, "loss", "tokens_per_s"),
        "tokens/s falls to 0.8x at 3300 and stays there (bar: 5% below the trailing median "
        "for 3 points)",
        step=drop,
    )
    run = late(211)
    slow = (run["step"] % 100) == 99  # a checkpoint save every 100 steps
    run["tokens_per_s"] = np.where(slow, 0.5 * speed, speed)
    write_case(
        "throughput-drop",
        "quiet",
        rows_of(run, "loss", "tokens_per_s"),
        "one step in every 100 at half speed (a checkpoint save): never 3 slow points in a row",
        fires_with={"throughput_persist_points": 1},
        event_step=LATE + 99,  # the first slow step
    )


def learning_cases() -> None:
    # never learned: flat at ln(50257) with a dead gradient; the manifest gives V
    rng = np.random.default_rng(301)
    run = base_run(301, steps=600)
    run["loss"] = np.log(50257) + 0.02 * rng.standard_normal(run["step"].size)
    run["grad_norm"] = 1e-6 * rng.lognormal(0.0, 0.1, run["step"].size)
    write_case(
        "no-learning",
        "fires",
        rows_of(run, "loss", "grad_norm", "lr"),
        "loss flat at ln(50257) = 10.82 for 600 steps, grad norm about 1e-6 (judged from the "
        "end of warmup, where the LR first reaches 90% of its peak)",
        step=int(np.argmax(run["lr"] >= 0.9 * run["lr"].max())),
        tolerance=2,
        manifest={"vocab_size": 50257},
        extra={"severity": "error"},
    )
    write_case(
        "no-learning",
        "quiet",
        rows_of(base_run(301, steps=600), "loss", "grad_norm", "lr"),
        "the same 600 steps learning as usual: 10.8 -> about 3.5",
    )
    # collapse: from about 2.6 to 1e-4 in one logged point, and there it stays
    run = late(303)
    drop = LATE + 300
    run["loss"] = np.where(run["step"] >= drop, 1e-4, run["loss"])
    write_case(
        "loss-collapse",
        "fires",
        rows_of(run, "loss"),
        "loss falls from about 2.6 to 1e-4 at step 3300 (a 2.6e4x fall in one point)",
        step=drop,
    )
    run = late(303)
    run["loss"] = np.where(run["step"] >= drop, run["loss"] / 50, run["loss"])
    write_case(
        "loss-collapse",
        "quiet",
        rows_of(run, "loss"),
        "loss falls 50x at step 3300, to about 0.05: under the 100x bar",
        fires_with={"collapse_min_ratio": 40, "collapse_near_zero_loss": 1},
        event_step=drop,
    )


def rank_cases() -> None:
    ranks, n = 8, 300
    steps = np.arange(n)

    def cohort(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return per_rank_losses(rng, steps, ranks, loss_curve(steps, start=5.0, floor=2.4))

    values = cohort(221)
    values[5, steps >= 150] *= 1.6
    write_rank_case(
        "rank-outlier",
        "fires",
        records(steps, values),
        "8 ranks; rank 5 sits at 1.6x the cohort from step 150 to the end",
        step=150,
        rank=5,
    )
    values = cohort(221)
    values[5, (steps >= 150) & (steps < 156)] *= 1.6
    write_rank_case(
        "rank-outlier",
        "quiet",
        records(steps, values),
        "rank 5 at 1.6x for 6 steps (150-155), then back in line: the rule wants 10 steps",
        fires_with={"rank_persist_steps": 5},
        event_step=150,
        rank=5,
    )

    values = cohort(222)
    values[3, 200] = np.nan
    values[:, 203:] = np.nan  # the NaN reached every rank through the all-reduce
    write_rank_case(
        "rank-nonfinite",
        "fires",
        records(steps, values),
        "rank 3 logs NaN at step 200 while the other 7 are finite; all ranks NaN from 203",
        step=200,
        rank=3,
    )
    values = cohort(222)
    values[:, 200:] = np.nan
    write_rank_case(
        "rank-nonfinite",
        "quiet",
        records(steps, values),
        "every rank goes NaN together at step 200: a §1 NaN of the run, no rank to single out",
    )

    values = cohort(223)
    recs = [r for r in records(steps, values) if not (r["rank"] == 6 and r["step"] > 200)]
    write_rank_case(
        "rank-silent",
        "fires",
        recs,
        "rank 6 stops logging after step 200; the others go on to 299 (its first missing step "
        "is 201)",
        step=201,
        rank=6,
    )
    recs = [r for r in records(steps, values) if not (r["rank"] == 6 and r["step"] > 294)]
    write_rank_case(
        "rank-silent",
        "quiet",
        recs,
        "rank 6 misses only the last 5 steps (the job ended while it flushed): under 10",
        fires_with={"rank_persist_steps": 5},
        event_step=295,
        rank=6,
    )

    def speeds(seed: int) -> np.ndarray:
        return 11800.0 * (1.0 + noise(np.random.default_rng(seed), (ranks, n), 0.015))

    values, speed = cohort(224), speeds(225)
    speed[2, steps >= 100] *= 0.6
    write_rank_case(
        "straggler",
        "fires",
        records(steps, values, {"tokens_per_s": speed}),
        "rank 2 runs at 0.6x the cohort's tokens/s from step 100 (bar: 0.8x)",
        step=100,
        rank=2,
    )
    values, speed = cohort(224), speeds(225)
    speed[2, steps >= 100] *= 0.85
    write_rank_case(
        "straggler",
        "quiet",
        records(steps, values, {"tokens_per_s": speed}),
        "rank 2 at 0.85x the cohort's tokens/s from step 100: slower, but above the 0.8x bar",
        fires_with={"straggler_ratio": 0.9},
        event_step=100,
        rank=2,
    )


# --- eval series --------------------------------------------------------------------


def with_evals(run: dict[str, np.ndarray], every: int, evals: np.ndarray) -> list[dict]:
    """Training rows, with `eval_loss` on every `every`-th step (the value, NaN kept)."""
    rows = rows_of(run, "loss", "grad_norm", "lr")
    for row, value in zip(rows[every - 1 :: every], evals, strict=False):
        row["eval_loss"] = float(value)
    return rows


def eval_curve(run: dict[str, np.ndarray], every: int, seed: int) -> np.ndarray:
    """An eval loss a little above the training loss's clean level, with small noise."""
    rng = np.random.default_rng(seed)
    t = run["step"][every - 1 :: every].astype(float)
    return 2.3 + 8.6 * (1 + t / 40.0) ** -0.75 + rng.normal(0.0, 0.004, t.size)


def eval_cases() -> None:
    run = base_run(131, steps=2000)
    evals = eval_curve(run, 100, 132)
    evals[9:] = np.nan  # the evaluations at steps 999, 1099, ... 1999
    write_case(
        "eval-nonfinite",
        "fires",
        with_evals(run, 100, evals),
        "eval_loss NaN at every evaluation from step 999 on (11 of 20), training loss finite",
        step=999,
    )
    write_case(
        "eval-nonfinite",
        "quiet",
        with_evals(run, 100, eval_curve(run, 100, 132)),
        "the same run with every evaluation finite",
    )
    run = base_run(133, steps=2000)
    evals = eval_curve(run, 100, 134)
    # from the evaluation at step 1199 on the eval loss climbs 0.03 per evaluation
    evals[12:] = evals[11] + 0.03 * np.arange(1, 9)
    write_case(
        "overfitting",
        "fires",
        with_evals(run, 100, evals),
        "eval_loss lowest at step 1199, then 0.03 higher at each of the 8 evaluations after it "
        "while the training loss keeps falling",
        step=1199,
        tolerance=100,
    )
    evals = eval_curve(run, 100, 134)
    evals[12:] = evals[11] + 0.004 * np.arange(1, 9)
    write_case(
        "overfitting",
        "quiet",
        with_evals(run, 100, evals),
        "eval_loss up 0.004 per evaluation after step 1199: at most 1.4% above its minimum, "
        "under the 1% floor for the first evaluations after it",
        fires_with={"overfit_rel_floor": 0.001},
        event_step=1199,
    )


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    for build in (
        nan_cases,
        spike_cases,
        recurring_spike_cases,
        blip_cases,
        jump_cases,
        grad_norm_spike_cases,
        duplicate_batch_cases,
        lr_jump_cases,
        schedule_restart_cases,
        loss_scale_cases,
        divergence_cases,
        schedule_cases,
        restart_cases,
        throughput_cases,
        learning_cases,
        rank_cases,
        eval_cases,
    ):
        build()
    folders = sorted(p.parent for p in OUT.glob("*/*/expected.json"))
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {len(folders)} fixtures under {OUT} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
