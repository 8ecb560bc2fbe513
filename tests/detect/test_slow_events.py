"""Events the noise hides (issue 11): slow ramps in sparse logs, level shifts, 3-point bumps.

Each run is a seeded loss curve with multiplicative gamma noise (skewness 1, like
the llm.c GPT-2 residual) logged every 10 or 50 steps, so that a 100- or 200-step
window holds few points; each test checks the event is found where it was
injected, and the same run without it stays healthy.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stabilitycli import analyze


def _run(seed: int, points: int, every: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = np.arange(points, dtype=np.int64) * every
    level = 2.0 + 8.0 * np.exp(-steps / (0.05 * points * every))
    unit = (rng.standard_gamma(4.0, points) - 4.0) / 2.0
    return steps, level * (1.0 + noise * unit)


def _frame(steps: np.ndarray, loss: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"step": steps, "loss": loss})


def _codes(result) -> list[tuple[str, int | None]]:
    return [(f.code, f.step) for f in result.findings if int(f.severity) >= 1]


def _ramp(seed: int, every: int, noise: float, start: int) -> tuple[np.ndarray, np.ndarray]:
    """+25% of the level, rising in a line from point `start` to the end of the log."""
    steps, loss = _run(seed, 3000, every, noise)
    length = steps[-1] - steps[start]
    level = 2.0 + 8.0 * np.exp(-steps / (0.05 * 3000 * every))
    return steps, loss + 0.25 * level * np.clip((steps - steps[start]) / length, 0.0, 1.0)


@pytest.mark.parametrize("noise", [0.01, 0.03])
def test_a_slow_ramp_in_a_sparse_log_is_divergence_from_where_it_began(noise):
    """Every ramp is divergence, and its onset is within 5% of the ramp's length in at least
    10 of 12 runs and within 20% in all (measured: 12 of 12 at 1% noise, 10 of 12 at 3%; the
    detection-quality benchmark measures the rate over many more)."""
    start, errors = 1200, []
    for seed in range(1, 7):
        for every in (10, 50):
            steps, loss = _ramp(seed, every, noise, start)
            result = analyze(_frame(steps, loss))
            assert result.verdict.code == "divergence", (seed, every, _codes(result))
            (finding,) = [f for f in result.findings if f.code == "divergence"]
            errors.append(abs(finding.step - steps[start]) / (steps[-1] - steps[start]))
            # the same run without the ramp: nothing
            healthy = analyze(_frame(*_run(seed, 3000, every, noise)))
            assert healthy.verdict.code == "healthy", (seed, every, _codes(healthy))
    errors_frac = np.array(errors)
    assert (errors_frac <= 0.05).sum() >= 10 and errors_frac.max() <= 0.2, errors


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("every", [10, 50])
def test_a_level_shift_in_a_sparse_log_is_a_persistent_spike_at_its_first_point(seed, every):
    steps, loss = _run(seed, 3000, every, 0.01)
    at = 1700
    loss[at:] *= 1.06  # +6% for good: 6 sigmas of the noise
    result = analyze(_frame(steps, loss))
    spikes = [f for f in result.findings if f.code == "spike"]
    assert spikes and abs(spikes[0].step - steps[at]) <= 2 * every, _codes(result)
    assert spikes[0].evidence["spike_type"] == 2, spikes[0].message
    assert not [f for f in result.findings if f.code in ("divergence", "plateau")]


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_a_three_point_bump_every_10_steps_is_a_spike(seed):
    steps, loss = _run(seed, 3000, 10, 0.01)
    at = 2100
    loss[at : at + 3] *= 1.07  # 3 logged points, 7 sigmas
    result = analyze(_frame(steps, loss))
    spikes = [f for f in result.findings if f.code == "spike"]
    assert spikes and spikes[0].step == steps[at], _codes(result)
    assert spikes[0].evidence["spike_type"] == 1


def test_divergence_message_numbers_are_its_evidence_and_say_what_they_are():
    steps, loss = _ramp(2, 10, 0.01, 1200)
    (finding,) = [f for f in analyze(_frame(steps, loss)).findings if f.code == "divergence"]
    e = finding.evidence
    assert f"the loss rose {e['relative_rise']:.1%}, from {e['rise_from_level']:.4g} (" in (
        finding.message
    )
    # the end level is the mean of the last bins' medians, over the steps it names
    end_words = f"to {e['final_level']:.4g} (the mean of the medians over steps "
    assert end_words in finding.message and "the end of the log)" in finding.message
    first, last = finding.message.split(end_words)[1].split(",")[0].split("-")
    inside = (steps >= int(first)) & (steps <= int(last))
    # bins of bin_points from the first logged point; the last one may be shorter
    tail = loss[inside]
    first_bin_at = int(np.flatnonzero(inside)[0])
    assert first_bin_at % e["bin_points"] == 0
    medians = [
        np.median(tail[i : i + e["bin_points"]]) for i in range(0, tail.size, e["bin_points"])
    ]
    assert e["final_level"] == pytest.approx(np.mean(medians), rel=1e-9)
    back = f"never back down to {e['start_level']:.4g} (the mean of the medians over steps"
    assert back in finding.message


def _steep_ramp_runs(count: int):
    """Logged every step, 1% gamma noise on the decaying level (plus a grad norm and a warmup
    and cosine LR), and from a random point in 35-50% of the run a rise of +50% of the level
    over 300 steps that then holds: (frame, the step the ramp began) per run."""
    rng = np.random.default_rng(4)
    steps = np.arange(3000, dtype=np.int64)
    level = 2.0 + 8.0 * np.exp(-steps / 150.0)
    progress = np.clip((steps - 60) / 2940, 0.0, 1.0)
    lr = 3e-4 * np.minimum(1.0, (steps + 1) / 60) * (0.1 + 0.45 * (1.0 + np.cos(np.pi * progress)))
    for _ in range(count):
        unit = (rng.standard_gamma(4.0, 3000) - 4.0) / 2.0
        loss = level * (1.0 + 0.01 * unit)
        grad = 0.4 * (1.0 + 3.0 * np.exp(-steps / 150.0)) * rng.lognormal(0.0, 0.25, 3000)
        start = int(rng.integers(1050, 1500))
        loss = loss + 0.5 * level * np.clip((steps - start) / 300, 0.0, 1.0)
        yield pl.DataFrame({"step": steps, "loss": loss, "grad_norm": grad, "lr": lr}), start


def test_a_steep_ramp_that_crosses_the_spike_bar_is_divergence_from_where_it_began():
    """About 25 steps in, the ramp crosses the spike bar and a persistent spike is found
    there; the divergence is measured from where the ramp began, not from that spike (which
    put its onset 30 steps late, 10% of the ramp, in two of these runs)."""
    onsets, crossed = [], 0
    for frame, start in _steep_ramp_runs(6):
        result = analyze(frame)
        crossed += any(f.code == "spike" and f.step > start for f in result.findings)
        (finding,) = [f for f in result.findings if f.code == "divergence"]
        onsets.append(finding.step - start)
    assert crossed >= 2, "the case this test is for: a spike found on the ramp"
    assert max(abs(error) for error in onsets) <= 15, onsets  # 5% of the 300-step ramp


def test_a_level_shift_before_a_later_rise_stays_the_floor_of_that_rise():
    """A shift of +30% (a persistent spike whose first point holds the whole jump) followed
    by a slow rise: the rise is not fitted back across the shift."""
    steps, loss = _run(3, 3000, 10, 0.01)
    level = 2.0 + 8.0 * np.exp(-steps / 1500.0)
    shift_at, ramp_at = 18000, 24000
    loss = loss + 0.3 * level * (steps >= shift_at)
    loss = loss + 0.15 * level * np.clip((steps - ramp_at) / (steps[-1] - ramp_at), 0.0, 1.0)
    result = analyze(_frame(steps, loss))
    assert any(f.code == "spike" and f.step == shift_at for f in result.findings)
    for finding in result.findings:
        if finding.code == "divergence":
            assert finding.step >= shift_at, _codes(result)


def test_a_ramp_that_levels_off_is_divergence_from_where_it_began():
    """+25% over 300 logged points, then level: the onset is within 5% of the ramp's length
    in at least 70 of 72 runs and within 10% in all (measured: 70 of 72, worst 7.7%; the
    fit that saw only the first window that rose managed 67 of 72, worst 12%)."""
    start, length, errors = 1200, 300, []
    for noise in (0.01, 0.03):
        for seed in range(1, 13):
            for every in (1, 10, 50):
                steps, loss = _run(seed, 3000, every, noise)
                level = 2.0 + 8.0 * np.exp(-steps / (0.05 * 3000 * every))
                rise = np.clip((np.arange(steps.size) - start) / length, 0.0, 1.0)
                result = analyze(_frame(steps, loss + 0.25 * level * rise))
                (finding,) = [f for f in result.findings if f.code == "divergence"]
                errors.append(abs(finding.step - steps[start]) / (length * every))
    errors_frac = np.array(errors)
    assert (errors_frac <= 0.05).sum() >= 70 and errors_frac.max() <= 0.1, errors


def test_no_loss_rise_is_told_inside_the_divergence_it_belongs_to():
    """A rising window inside a divergence that dips back is the divergence's own noise: it
    is counted in the divergence's evidence, with the reason, not reported as a `loss-rise`
    that 'the run later undid' beside a divergence that never came back."""
    folded = 0
    for seed in range(1, 7):
        for every in (10, 50):
            steps, loss = _ramp(seed, every, 0.03, 1200)
            result = analyze(_frame(steps, loss))
            (divergence,) = [f for f in result.findings if f.code == "divergence"]
            rises = [f for f in result.findings if f.code == "loss-rise"]
            assert all(f.end_step < divergence.step for f in rises), (seed, every)
            inside = divergence.evidence.get("loss_rise_windows_inside", 0)
            assert bool(inside) == ("folded" in divergence.evidence)
            folded += inside
    assert folded > 0  # the runs do hold such windows: the check above is not vacuous
