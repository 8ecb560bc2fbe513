"""Restart replays: after a resume, is the run back on the path it was on?"""

from __future__ import annotations

import math

from stabilitycli.core.config import Thresholds
from stabilitycli.core.model import Severity, Skip
from stabilitycli.detect.facts import Facts
from stabilitycli.detect.kinds.restart_replay import RESTART_REPLAY, RestartReplayEvidence
from stabilitycli.detect.registry import RuleResult, rule
from stabilitycli.detect.series import SeriesView


@rule(
    RESTART_REPLAY.rule,
    RESTART_REPLAY.section,
    "a resume's replay of the steps it rewrote departs from the abandoned trajectory",
    emits=(RESTART_REPLAY,),
    series=("loss",),
    reads=("judge_points", "noise_band_sigmas", "replay_noise_steps"),
    provides=("restart_replays",),
)
def detect_restart_replay(view: SeriesView, thresholds: Thresholds, facts: Facts) -> RuleResult:
    """The resumed loss against the abandoned loss, over the steps a restart logged twice.

    What it detects: for every resume, the steps between the checkpoint it
    resumed from and the step the log had reached are logged twice. The
    deviation between the two loss trajectories is held to the noise of the
    {replay_noise_steps} steps (`replay_noise_steps`) before the restart: the band
    is {noise_band_sigmas:g} (`noise_band_sigmas`) x sqrt(2) x that sigma, and a
    step counts as outside when the median of the {judge_points} points
    (`judge_points`) centred on it is.
    A replay that stays inside is info; one that leaves is a warning that
    says how far, for how long, and after how many steps it came back.

    Why it matters: a resume that restored weights, optimizer moments,
    scheduler and data cursor replays the abandoned trajectory within noise
    (exactly, when kernels are deterministic). One that lost the optimizer
    state jumps off it and needs tens of steps to come back, or never does:
    the evidence for the `optimizer-reset` pattern, and the proof a fixed
    resume is back on its path (`stab compare --restart N`).
    """
    from stabilitycli.detect.replay import replay_from_view, replay_judgement, restart_events

    result = RuleResult()
    events = restart_events(view.restarts)
    if not events:
        return result
    if view.abandoned is None:
        result.skipped.append(
            Skip(RESTART_REPLAY.rule, "the abandoned rows of the restart(s) were not kept")
        )
        return result
    replays = []
    for index in range(1, len(events) + 1):
        replay = replay_from_view(view, index, ["loss"])
        numbers = replay_judgement(replay, "loss", thresholds)
        lo, hi = replay.window
        if numbers is None or numbers["points"] < 3:
            result.skipped.append(
                Skip(
                    RESTART_REPLAY.rule,
                    f"restart {index} (resumed from step {lo}): fewer than "
                    "3 loss points logged both before and after it; nothing to compare",
                )
            )
            continue
        if not math.isfinite(numbers["noise_sigma"]):
            result.skipped.append(
                Skip(
                    RESTART_REPLAY.rule,
                    f"restart {index} (resumed from step {lo}): no finite "
                    "loss before it to measure the noise against",
                )
            )
            continue
        back = numbers["within_from"]
        # 0: never left the band; None: left it and was still outside at the end of the replay
        returned = 0 if not numbers["departed"] else (back - lo if back is not None else None)
        evidence = RestartReplayEvidence(
            restart=index,
            resumed_from_step=lo,
            last_step_before=hi,
            **{k: v for k, v in numbers.items() if k != "worst_band_ratio"},
            steps_to_return=returned,
        )
        replays.append(evidence)
        result.findings.append(
            RESTART_REPLAY.finding(
                _message(index, lo, hi, numbers, thresholds),
                severity=Severity.WARNING if numbers["departed"] else Severity.INFO,
                step=lo,
                end_step=hi,
                metric="loss",
                evidence=evidence,
            )
        )
    result.facts["restart_replays"] = replays
    return result


def _message(index: int, lo: int, hi: int, n: dict, thresholds: Thresholds) -> str:
    head = f"restart {index} (resumed from step {lo}, the log had reached {hi}): "
    # either is None when no replayed step has a finite loss in both trajectories (a NaN or
    # Inf on one side): the sentence says so instead of formatting a number that is not there
    mean, worst = n["mean_abs_deviation"], n["max_deviation"]
    deviation = (
        f"mean |Δloss| {mean:.3g}"
        if mean is not None
        else "no replayed step with a finite loss in both trajectories"
    )
    if worst is not None:
        deviation += f", max {worst:+.3g} at step {n['max_deviation_at']}"
    numbers = (
        f"{deviation}; band ±{n['tolerance']:.3g} = "
        f"{thresholds.noise_band_sigmas:g}·√2·σ, σ {n['noise_sigma']:.3g} "
        f"over steps {n['noise_steps'][0]}-{n['noise_steps'][1]}"
    )
    if not n["departed"]:
        return head + (
            f"the replay of {n['points']} point(s) tracks the abandoned trajectory within "
            f"noise ({numbers})"
        )
    if n["within_from"] is None:
        back = f"and did not come back within the {n['points']} replayed point(s)"
    else:
        back = (
            f"and came back within noise of the abandoned trajectory after "
            f"{n['within_from'] - lo} steps (step {n['within_from']}; back to the abandoned "
            "run's level, not to the pre-spike baseline a spike's recovery is timed against)"
        )
    return head + (
        f"the resumed loss left the abandoned trajectory at step {n['first_outside']} {back} "
        f"({numbers}); state the checkpoint did not restore (optimizer moments, scheduler, "
        "data cursor)"
    )
