"""The LR schedule read from the LR series: what is recognised as planned, and what is not."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.lr_plan import recognise_plan
from stabilitycli.detect.series import build_view
from stabilitycli.pipeline.run import load_run
from tests.conftest import run_fixture
from tests.detect._schedules import sgdr, step_decay, wsd


def _plan(run: dict[str, np.ndarray], **settings):
    frame = pl.DataFrame({"step": run["step"], "loss": run["loss"], "lr": run["lr"]})
    return recognise_plan(build_view(load_run(frame)), Thresholds(**settings))


@pytest.mark.parametrize("every", [1, 10])
def test_warm_restarts_at_a_regular_period_are_recognised(every: int) -> None:
    plan = _plan(sgdr(every=every))
    assert [r.step for r in plan.restarts] == [1000, 2000, 3000, 4000]
    assert plan.period_steps == 1000
    assert plan.warmup_end_step == 100 - every
    assert all(r.lr_after == pytest.approx(3e-4) and not r.declared for r in plan.restarts)
    assert "warm restarts to 0.0003 at steps 1000, 2000, 3000, 4000" in plan.describe()


def test_restarts_whose_period_doubles_are_recognised() -> None:
    plan = _plan(sgdr(steps=8000, t_mult=2))
    assert [r.step for r in plan.restarts] == [1000, 3000, 7000]
    assert plan.period_growth == 2


def test_one_restart_back_to_the_warmup_peak_is_recognised() -> None:
    plan = _plan(sgdr(steps=1900))
    assert [r.step for r in plan.restarts] == [1000]


def test_a_jump_to_a_level_never_seen_is_no_restart() -> None:
    run = sgdr(steps=3000, period=10**6)  # warmup then one long cosine
    run["lr"] = np.where(run["step"] >= 1500, run["lr"] * 4, run["lr"])
    assert not _plan(run).restarts


@pytest.mark.parametrize("fixture", ["spike-lr-jump"])
def test_a_schedule_multiplied_up_is_no_restart(fixture: str) -> None:
    """The fixture's LR triples at step 999 and lands near its warmup peak, but then falls
    as the x3 cosine, not as a new cycle: a scheduler restored wrong."""
    assert not recognise_plan(build_view(load_run(run_fixture(fixture))), Thresholds()).restarts


def test_irregular_rises_to_the_same_peak_are_no_restarts() -> None:
    run = sgdr(steps=5000)
    keep = (run["step"] < 2000) | (run["step"] >= 2700)  # the 2000 restart comes at 2700
    shifted = sgdr(steps=5000)["lr"]
    run["lr"] = np.where(keep, shifted, np.roll(shifted, 70))
    run["lr"][(run["step"] >= 2000) & (run["step"] < 2700)] = run["lr"][190]
    plan = _plan(run)
    assert 2700 not in [r.step for r in plan.restarts]


def test_declared_and_intended_restarts() -> None:
    run = sgdr(steps=3000, period=10**6)
    run["lr"] = np.where(run["step"] >= 1500, run["lr"] * 4, run["lr"])
    declared = _plan(run, planned_lr_restart_steps=(1500,))
    assert [(r.step, r.declared) for r in declared.restarts] == [(1500, True)]
    assert [r.step for r in _plan(run, lr_restarts_intended=True).restarts] == [1500]


def test_step_decay_and_wsd_cooldown_are_described() -> None:
    decays = _plan(step_decay())
    assert decays.step_decays == ((2000, 0.1), (4000, 0.1)) and not decays.restarts
    cooled = _plan(wsd())
    assert cooled.cooldown is not None and cooled.cooldown[0] == 4800
    assert cooled.warmup_end_step == 190 and not cooled.restarts


def test_a_rounded_lr_near_zero_is_no_step_decay() -> None:
    """llm.c prints the LR with one digit: the cosine's tail steps 3e-06 -> 2e-06."""
    step = np.arange(0, 2000)
    lr = np.round(6e-4 * 0.5 * (1 + np.cos(np.pi * step / 2000)), 6)
    plan = _plan({"step": step, "loss": np.full(step.size, 3.0), "lr": lr})
    assert not plan.step_decays
