"""A spike is "divergent" (type 3, spec §2) only when the loss after it never comes back to
the baseline band and its level goes on rising above the spike's own peak (issue 36 item 4).

A spike the run came back from and a rise thousands of steps later are two things: the
level's maximum over the whole rest of the log made the early spike "divergent, did not
recover" at error. And a loss that keeps climbing from the spike on stays above the spike
bar to the end, so its whole-event peak was the climb's last top and it was never called
divergent. Each log is LM-shaped (`_lm_curves`), written by pandas into tmp_path.
"""

from __future__ import annotations

import numpy as np
import pytest

from stabilitycli import analyze
from tests.detect import _lm_curves as lm

ONSET = 2000


def _run(seed: int) -> dict[str, np.ndarray]:
    return lm.warmup(steps=8000, sigma=0.006, seed=seed)


def _spike(result):
    spikes = [f for f in result.findings if f.code == "spike"]
    assert len(spikes) == 1, [f.message for f in result.findings]
    assert abs(spikes[0].step - ONSET) <= 2
    return spikes[0]


@pytest.mark.parametrize(("decay_steps", "spike_type"), [(5, 1), (60, 2)])
@pytest.mark.parametrize("seed", range(3))
def test_a_spike_the_loss_came_back_from_is_not_divergent_by_a_rise_5000_steps_later(
    tmp_path, seed, decay_steps, spike_type
):
    """+30% at step 2000 that decays back (time constant 5 steps: back within the 50 of
    Q2.2, recoverable; 60 steps: back after about 150, persistent by Q2.2), then from step
    7000 the loss climbs 60% to the end of the log. The spike ends before the rise; the
    rise is the divergence rule's (or nothing's), not the spike's."""
    run = _run(seed)
    step = run["step"]
    since = step - ONSET
    decay = np.where((since >= 0) & (since < 150), 0.3 * np.exp(-since / decay_steps), 0)
    later = np.where(step >= 7000, 0.6 * (step - 7000) / 1000.0, 0.0)
    loss = lm.loss_of(run, decay + later)
    result = analyze(str(lm.write_csv(tmp_path / "back-then-rise.csv", run, loss)))
    spike = _spike(result)
    assert spike.evidence["recovery_step"] is not None
    assert spike.evidence["end_step"] < spike.evidence["recovery_step"] < 7000
    assert spike.evidence["spike_type"] == spike_type, spike.message
    assert "divergent" not in spike.message
    assert all("kept rising" not in p.evidence for p in result.verdict.path)


@pytest.mark.parametrize("seed", range(3))
def test_a_spike_after_which_the_loss_keeps_climbing_is_divergent(tmp_path, seed):
    """+30% at step 2000, and from there the loss climbs on, another 80% by the end."""
    run = _run(seed)
    step = run["step"]
    climb = np.where(step >= ONSET, 0.3 + 0.8 * (step - ONSET) / 6000.0, 0.0)
    result = analyze(str(lm.write_csv(tmp_path / "climb.csv", run, lm.loss_of(run, climb))))
    spike = _spike(result)
    assert spike.evidence["recovery_step"] is None
    assert spike.evidence["spike_type"] == 3
    assert "divergent" in spike.message


@pytest.mark.parametrize("seed", range(3))
def test_a_partial_recovery_then_a_climb_is_divergent(tmp_path, seed):
    """+30% at step 2000, down to +10% over 100 steps (never back at the baseline band),
    then climbing from there to +70%: the level goes above the spike's peak before any
    return."""
    run = _run(seed)
    step = run["step"]
    partial = np.where(
        step < ONSET + 100,
        0.3 - 0.2 * (step - ONSET) / 100,
        0.1 + 0.6 * (step - ONSET - 100) / 5900,
    )
    lift = np.where(step >= ONSET, partial, 0.0)
    result = analyze(str(lm.write_csv(tmp_path / "partial.csv", run, lm.loss_of(run, lift))))
    spike = _spike(result)
    assert spike.evidence["recovery_step"] is None
    assert spike.evidence["spike_type"] == 3


@pytest.mark.parametrize("seed", range(3))
def test_a_shift_that_settles_higher_is_persistent_not_divergent(tmp_path, seed):
    """+30% from step 2000 for good, the curve under it flat: type 2."""
    run = _run(seed)
    lift = np.where(run["step"] >= ONSET, 0.3, 0.0)
    result = analyze(str(lm.write_csv(tmp_path / "shift.csv", run, lm.loss_of(run, lift))))
    spike = _spike(result)
    assert spike.evidence["recovery_step"] is None
    assert spike.evidence["spike_type"] == 2
