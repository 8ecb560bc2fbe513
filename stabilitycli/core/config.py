"""Every threshold `stab` uses, in one place, with its unit and its source.

Defaults are the seeds' numbers (shared/spec/stability-tree.md); a user changes
them in `[tool.stab]` of a pyproject.toml, in a stab.toml, or with
`--set name=value` on the command line (`settings.load_settings` reads both).
Unknown names are refused.
"""

from __future__ import annotations

import functools
from dataclasses import field, fields, replace
from typing import Any

from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.records import dataclass


def threshold(default: Any, doc: str) -> Any:
    """A `Thresholds` field: its default, and what it does (`Thresholds.describe`)."""
    return field(default=default, metadata={"doc": doc})


# `eq=False, repr=False`: `__eq__`, `__hash__` and `__repr__` are written below, once,
# instead of generated: `@dataclass` writes each out as source over every field, which the
# interpreter compiles anew in every process (no bytecode cache holds it): for these 115
# fields, some 15,000 characters compiled at each start-up (docs/scale.md). They give what
# the generated ones gave (tests/core/test_thresholds.py).
@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Thresholds:
    # Each field's text is its `stab explain thresholds` line and the README's: kept in the
    # field's metadata, so it is there at run time without the source (a zipped install).

    # --- windows (spec 0) ---
    min_points_per_window: int = threshold(
        8,
        "A step window needs this many logged points; fewer and it widens (spec 0).",
    )
    widened_window_points: int = threshold(
        20,
        "A too-sparse window widens to this many trailing logged points (spec 0).",
    )

    # --- §2 spikes ---
    spike_window_steps: int = threshold(100, "Trailing baseline window [t-100, t) in steps (Q2.1).")
    spike_sigma: float = threshold(3.0, "A point above mu + spike_sigma * sigma is flagged (Q2.1).")
    sigma_floor_frac: float = threshold(
        0.01,
        "sigma is at least this fraction of |mu|, so a flat loss does not spike on every uptick.",
    )
    spike_excess_points: int = threshold(
        3,
        "Materiality (a): excess summed over a flagged point and the logged points after "
        "it, in all.",
    )
    spike_excess_sigma: float = threshold(
        11.0,
        "...and must reach this many baseline sigmas (noise rarely puts three points that far up).",
    )
    spike_excess_cap_sigma: float = threshold(
        6.0,
        "...each point counting at most this many sigmas (one huge point is the large-z "
        "bar's case).",
    )
    spike_excess_min_sigma: float = threshold(
        2.0,
        "...with none of them under this many sigmas (one noise triple rarely stays up).",
    )
    spike_excess_max_sigma: float = threshold(
        15.0,
        "...a bar that rises with the noise's autocorrelation (the fourth root of the variance "
        "factor of a sum of correlated points) up to this many sigmas: the spec's 5 sigma at "
        "each of 3 points.",
    )
    spike_excess_max_points: int = threshold(
        10,
        "...or their mean over up to this many logged points reaches the bar's share per "
        "point (a ten-point bump whose first points dipped, issue 36; farther on, the frozen "
        "baseline lags a curve that moves).",
    )
    noise_autocorr_min: float = threshold(
        0.15,
        "Loss noise with a lag-1 autocorrelation under this counts as independent point to "
        "point (AR(1)-like noise above it widens the excess bar and the trend test's null).",
    )
    noise_far_lag_points: int = threshold(
        50,
        "Loss points this many logged points apart count as independent: the spread of their "
        "differences is the reference the noise's autocorrelation is measured against.",
    )
    spike_sustained_min_rise_frac: float = threshold(
        0.03,
        "...and those points must sit this fraction above the baseline on average.",
    )
    spike_persistent_min_rise_frac: float = threshold(
        0.04,
        "A sustained spike with no cause that did not come back must have settled this "
        "fraction above its baseline (the mean of its points over a spike window from the "
        "onset, at least widened_window_points, each counting at most spike_excess_cap_sigma, "
        "against the curve the run was on): a +3-4% step (a curriculum switch) is under "
        "the spec's 5% multi-point bar, a +5% shift above it (issue 36).",
    )
    recurring_spike_min_count: int = threshold(
        3,
        "This many causeless one-point spikes that came straight back are one recurring finding.",
    )
    noise_level_windows: int = threshold(
        10,
        "In a sparse log, sigma is pooled from the successive differences of this many "
        "trailing windows' worth of points (a 10-point window's own std is too noisy to "
        "trust).",
    )
    spike_large_z: float = threshold(
        6.0,
        "Materiality (c): an isolated point is a spike at z >= this (OLMo-core's threshold)...",
    )
    spike_large_ratio: float = threshold(
        1.5,
        "...and a peak at least this multiple of the baseline mean (real spikes: 2-100x).",
    )
    recovery_window_steps: int = threshold(
        50,
        "Recovered if the loss returns to <= mu + recovery_sigma * sigma within this many "
        "steps (Q2.2).",
    )
    recovery_sigma: float = threshold(0.5, "Recovery level in baseline sigmas above mu (Q2.2).")
    cause_lead_steps: int = threshold(
        3,
        "Causes are looked for in [t - cause_lead_steps, t]: grad norm leads the loss by "
        "1-3 steps.",
    )
    grad_norm_outlier_ratio: float = threshold(
        10.0,
        "A pre-clip grad norm this multiple of its trailing level is noted (info), and "
        "explains a large spike.",
    )
    grad_norm_spike_ratio: float = threshold(
        30.0,
        "Pre-clip grad norm at least this multiple of its trailing mean -> long-tail batch (Q2.3).",
    )
    lr_jump_ratio: float = threshold(
        0.5,
        "An upward LR change of more than this fraction between logged points is a jump (Q2.3).",
    )
    lr_jump_cause_steps: int = threshold(
        50,
        "An LR jump is a spike's cause up to this many steps later, while the LR stays up "
        "(a step change keeps acting).",
    )
    restart_spike_steps: int = threshold(
        10,
        "A spike within this many steps after a restart points at unrestored state.",
    )
    duplicate_batch_window_steps: int = threshold(
        100,
        "A batch id repeated within this many steps is a duplicate batch (Q2.3).",
    )
    level_lag_sigma: float = threshold(
        1.5,
        "Where the spike bar of the local level (the window's trend at t, between its last "
        "quarter's mean and its mean) and the spread around the trend is this many sigmas "
        "(that spread) below the bar of the trailing mean and std (a fast fall: warmup, a "
        "decay's tail), a spike is judged against the local level; where the trend at t "
        "sits as far above the mean (a rising stretch), recovery is judged against the "
        "trend (issue 36).",
    )
    level_fall_speedup: float = threshold(
        2.0,
        "...but only where the fall over the window's later half is at most this multiple "
        "of the fall over the whole window, and the fall over the window before at least "
        "1/this of it: a fall that speeds up at its end (a memorised batch) or begins "
        "inside the window (a dip of noise) is no curve to judge against. Inside the LR's "
        "planned warmup and a window after its peak the LR quickens the fall: there a "
        "speed-up is allowed, and in a sparse log the level of a fall that quickens is its "
        "trend at t (issue 36).",
    )
    level_fall_z: float = threshold(
        4.0,
        "...and only where the window's earlier half sits this many standard errors (of "
        "two half-window means, from the noise around the trend or the pooled noise of a "
        "sparse log) above its later half (below it, for a rising stretch): a trend, "
        "not noise. Half as many inside the LR's planned warmup and a window after its "
        "peak, where the LR plans the fall (issue 36).",
    )
    sparse_fall_z: float = threshold(
        4.0,
        "In a sparse log, inside the LR's planned warmup and a window after its peak, where "
        "the window before sits this many standard errors (of the two windows' means, from "
        "the pooled noise with its memory) above the trailing window, a spike is judged "
        "against the line through the two means read at the point, and a multi-point "
        "excess against that line carried on down: a ten-point window's mean lags a "
        "warmup's fall by 2-3 sigma (issue 36).",
    )
    level_change_points: int = threshold(
        8,
        "A level change (the loss stepping down at an epoch boundary or an LR step) is read "
        "from the medians of this many logged points either side (and of 2 and 4 times as "
        "many, at the same odds, for a smaller step to a level that held that long); the "
        "spike baseline restarts there.",
    )
    level_change_frac: float = threshold(
        0.05,
        "...a step down of at least this fraction of the level before it...",
    )
    level_change_sigma: float = threshold(
        4.0,
        "...and of at least this many point-to-point noise sigmas...",
    )
    level_change_ratio: float = threshold(
        2.5,
        "...and this multiple of the change between the medians a further "
        "level_change_points points out on either side (a fall that goes on is no step).",
    )
    level_change_short_points: int = threshold(
        4,
        "A step down whose new level held this many logged points or more, fewer than "
        "level_change_points, before a rise (a shift right after an epoch boundary hides "
        "it from the medians) is read from the mean of those points against the median of "
        "twice level_change_points points before...",
    )
    level_change_short_se: float = threshold(
        5.0,
        "...where that mean is this many standard errors (of the difference, with the "
        "noise's memory) under the median, as well as level_change_frac under it (issue 36).",
    )
    level_recent_points: int = threshold(
        5,
        "The local level of a dense log's fall is never below the mean of the loss over "
        "this many logged points before the point judged, less two of its standard errors: "
        "where the fall stops (the end of warmup), the flattening is no rise.",
    )
    recovery_median_points: int = threshold(
        5,
        "Back to baseline is judged on the median of a point and the next ones, this many "
        "in all (Q2.2).",
    )
    stable_std_points: int = threshold(
        30,
        "A window with fewer logged points takes its sigma from the pooled recent noise "
        "(sparse logs).",
    )
    lr_jump_local_ratio: float = threshold(
        10.0,
        "An LR jump must also be this multiple of the LR's recent step-to-step change "
        "(warmup is no jump).",
    )
    lr_jump_still_up_frac: float = threshold(
        0.8,
        "An LR jump keeps acting while the LR stays within this fraction of its jumped value.",
    )
    # --- planned schedules (warm restarts): recognised from the LR, or declared ---
    lr_restart_peak_frac: float = threshold(
        0.1,
        "An LR rise whose top is within this fraction of the run's earlier peak (or of the "
        "other rises' tops) returns to the same peak: a warm restart, not a jump.",
    )
    lr_restart_period_frac: float = threshold(
        0.1,
        "Warm restarts are regular when each gap between them is within this fraction of "
        "the gap the period (or its constant growth, T_mult) predicts.",
    )
    restart_decay_period_frac: float = threshold(
        0.5,
        "A loss bump after a planned restart has decayed when it is back to baseline within "
        "this fraction of the restart period (or recovery_window_steps, if longer).",
    )
    restart_back_sigma: float = threshold(
        1.0,
        "A restart's bump is back when the median of recovery_median_points points is within "
        "this many sigmas of the baseline mean before the restart.",
    )
    restart_decay_ratio: float = threshold(
        3.0,
        "...and within this multiple of the earlier restarts' median decay (one that stays "
        "up far longer than the ones before is reported as a spike).",
    )
    planned_lr_restart_steps: tuple[int, ...] = threshold(
        (),
        "Steps where the LR is restarted on purpose (e.g. 1000,2000): a loss bump there "
        "that decays is a schedule-restart, not a spike.",
    )
    lr_restarts_intended: bool = threshold(
        False,
        "Every LR rise back up after warmup is intended (cyclic/restart schedules), "
        "regular or not.",
    )
    short_log_loss_jump_ratio: float = threshold(
        1.5,
        "In a log too short for a baseline, a loss rise of this factor between points is reported.",
    )
    short_log_grad_norm_jump_ratio: float = threshold(
        2.0,
        "...and a grad-norm rise of this factor.",
    )
    short_log_jump_min_frac: float = threshold(
        0.2,
        "In a log long enough for the spike baseline, its first stretch without one is "
        "looked at for a loss jump only when it holds this fraction of the log's points (a "
        "short log); in a long run it is the warmup, not a short log.",
    )
    ce_loss_max_nats: float = threshold(
        25.0,
        "A loss in (0, this) reads as cross-entropy in nats, and is also said as a "
        "probability (spec 6).",
    )

    # --- §3 mixed precision ---
    min_loss_scale: float = threshold(1.0, "A dynamic loss scale below this has collapsed (Q3.2).")
    overflow_rate_unabsorbed: float = threshold(
        0.01,
        "Overflows on more than this fraction of steps with no scaler evidence -> "
        "fp16-overflow (Q3.2).",
    )
    static_scale_min_overflows: int = threshold(
        2,
        "This many overflows under a constant scale means dynamic scaling is off (Q3.2).",
    )
    failing_scaler_window_steps: int = threshold(
        20,
        "The last this many steps of the log are read for a failing loss scaler (Q3.2).",
    )
    failing_scaler_overflow_fraction: float = threshold(
        0.5,
        "Overflows on more than this fraction of those steps, from the first of them to the end "
        "of the log, with the scale falling and never regrowing -> fp16-overflow (Q3.2).",
    )
    failing_scaler_min_overflows: int = threshold(
        3,
        "...and at least this many overflows there.",
    )
    scale_search_steps: int = threshold(
        50,
        "Overflows beginning within this many steps of step 0 are the scaler searching for its "
        "first scale, not a failing scaler.",
    )
    overflow_loss_jump_ratio: float = threshold(
        1.5,
        "An overflow at a step whose loss is this many times the loss logged before it -> "
        "fp16-overflow (the overflow came with a loss jump; Q3.2).",
    )

    # --- §4 silent divergence ---
    divergence_window_steps: int = threshold(200, "Trend window in steps (Q4.1).")
    divergence_z: float = threshold(
        3.0,
        "Mann-Kendall z at or above which a window's rise is significant (Q4.1).",
    )
    divergence_min_rise_frac: float = threshold(
        0.05,
        "A rise smaller than this fraction of the window's starting level is a plateau, not"
        " divergence.",
    )
    divergence_step_share: float = threshold(
        0.8,
        "A lasting rise whose loss moves up this share of the rise to the end of the log "
        "between two neighbouring points near its onset (medians of a quarter trend window "
        "either side) is a step (a level shift, §2), not divergence.",
    )
    divergence_slow_z: float = threshold(
        4.0,
        "Windows longer than the trend window (2x, 4x... for a slow rise) need this "
        "Mann-Kendall z: every extra length is another chance for noise to look like a "
        "trend.",
    )
    divergence_falling_evidence: float = threshold(
        2.0,
        'The onset fit prefers "level, then rise" unless "falling, then rise" beats it by '
        "this much (n * ln of the ratio of their squared errors: Akaike's price of its "
        "extra slope).",
    )
    divergence_after_frac: float = threshold(
        0.5,
        "A rising window is judged (came back or never did) only when at least this fraction "
        "of a trend window's points was logged after it: at the end of the log there is "
        "nothing to come back in.",
    )
    divergence_end_z: float = threshold(
        6.0,
        "...unless its Mann-Kendall z (corrected for autocorrelation) reaches this: noise does "
        "not make a rise that certain, so a log that ends while diverging is still judged.",
    )
    trend_points: int = threshold(
        64,
        "Long windows are binned to about this many medians before the trend test (cost, "
        "and noise).",
    )
    warmup_frac: float = threshold(
        0.5,
        "LR rising before its first decrease and within this fraction of the run is warmup (Q4.2).",
    )
    lr_rise_frac: float = threshold(
        0.05,
        "LR up by more than this fraction over a window counts as rising (Q4.2).",
    )
    weight_norm_ratio: float = threshold(
        2.0,
        "A weight norm changing more than this factor within the window (Q4.3).",
    )
    grad_norm_rise_frac: float = threshold(
        0.25,
        "Grad-norm moving average up by more than this fraction over the window is rising (Q4.4).",
    )

    # --- eval series (over-fitting, §4) ---
    overfit_min_evals: int = threshold(
        6,
        "Finite evaluations an eval loss needs before over-fitting is judged on it.",
    )
    overfit_rising_evals: int = threshold(
        3,
        "The last evaluations that must all sit above the eval minimum's bar: one bad "
        "evaluation is no trend.",
    )
    overfit_sigma: float = threshold(
        3.0,
        "The bar above the eval minimum, in sigmas of the eval loss's own noise (robust, "
        "from its second differences).",
    )
    overfit_rel_floor: float = threshold(
        0.01,
        "The bar above the eval minimum is at least this fraction of it (a smooth eval "
        "curve has almost no noise to measure).",
    )
    overfit_train_drop_frac: float = threshold(
        0.01,
        "The training loss must fall by this fraction (median over the last third of the "
        "steps after the eval minimum against the first third) for a rise to be over-fitting.",
    )

    # --- never learned, collapse (spec 8) ---
    vocab_size: int = threshold(
        0,
        "Vocabulary size V, for the chance level ln V (0: unknown; a manifest's or an MLflow "
        "param's vocab_size is used then; with none, no chance-level test).",
    )
    learning_window_frac: float = threshold(
        0.1,
        "The first and last windows of the never-learned test each hold this fraction of the "
        "judged points (at least min_points_per_window).",
    )
    learning_min_decrease_sigma: float = threshold(
        2.0,
        "A fall from the first window's median to the last's below this many noise sigmas "
        "(robust sigma of the first differences / sqrt 2)...",
    )
    learning_min_decrease_frac: float = threshold(
        0.02,
        "...and below this fraction of the first window's median is no material decrease.",
    )
    learning_start_max_frac: float = threshold(
        0.05,
        "A log is judged from its first window only when its first step is at most this "
        "fraction of its last step, or its LR series shows a warmup.",
    )
    learning_min_loss: float = threshold(
        0.05,
        "A flat loss at or below this (nats) has learned its data: never called not learning.",
    )
    chance_tolerance_nats: float = threshold(
        0.1,
        "A last-window median within this many nats of ln V sits at the chance level.",
    )
    grad_vanish_norm: float = threshold(
        1e-5,
        "A grad norm below this has vanished (no update reaches the weights).",
    )
    grad_vanish_frac: float = threshold(
        0.8,
        "The grad norm vanished when this fraction of its points after the first window sit "
        "below grad_vanish_norm.",
    )
    collapse_min_ratio: float = threshold(
        100.0,
        "A collapse: the loss falls to 1/this of its level before (two orders of magnitude)...",
    )
    collapse_max_points: int = threshold(
        5,
        "...within this many logged points, or within collapse_max_steps steps where those "
        "hold more points (a log written every step)...",
    )
    collapse_max_steps: int = threshold(
        50,
        "The steps a collapse may take when the log holds more than collapse_max_points "
        "points in them: a fall of orders of magnitude in 50 steps is no convergence.",
    )
    collapse_near_zero_loss: float = threshold(
        0.05,
        "...to at most this (nats; or exactly 0.0)...",
    )
    collapse_level_points: int = threshold(
        10,
        "...from a level, the median of up to this many logged points before the fall, that "
        "spans less than collapse_level_spread (a loss already falling fast is converging).",
    )
    collapse_level_spread: float = threshold(
        10.0,
        "The max/min ratio that level window must stay under.",
    )

    # --- ranks (spec 5) ---
    rank_z: float = threshold(
        6.0,
        "A rank this many robust sigmas from the cohort median is deviating.",
    )
    rank_persist_steps: int = threshold(
        10,
        "...for at least this many logged steps in a row to be an outlier, not noise (one "
        "step back in line inside the run is tolerated).",
    )
    rank_rel_floor: float = threshold(
        0.01,
        "MAD floor as a fraction of |median|: identical all-reduced values do not make "
        "every rank an outlier.",
    )
    rank_nonfinite_steps: int = threshold(
        1,
        "A rank reporting NaN/Inf for this many logged steps in a row while the cohort is "
        "finite is named (1: a NaN is never noise).",
    )
    straggler_ratio: float = threshold(
        0.8,
        "A rank whose throughput sits below this fraction of the cohort median is a straggler.",
    )
    rank_min_cohort: int = threshold(
        3,
        "With fewer finite ranks at a step, a median cannot outvote a bad rank: the step is"
        " not judged.",
    )
    rank_pair_culprit_ratio: float = threshold(
        3.0,
        "Two ranks: one is named only if its own level moved this many times as much as the"
        " other's.",
    )
    rank_history_points: int = threshold(
        50,
        'Logged points of the past that give a level "before" an onset (a rank\'s own, or '
        "the mean's).",
    )
    rank_max_gap_points: int = threshold(
        1,
        "Unflagged logged steps tolerated inside a run of deviating steps (one noisy step "
        "breaks nothing).",
    )
    rank_spread_pool_points: int = threshold(
        51,
        "Cohort steps in the rolling median of the per-step spread (a tight step is no hair"
        " trigger).",
    )
    rank_cusum_k: float = threshold(
        2.0,
        "CUSUM drift allowance, in robust sigmas per logged step: a rank's CUSUM grows only"
        " while its z exceeds this.",
    )
    rank_cusum_h: float = threshold(
        12.0,
        "CUSUM onset level, in robust sigmas summed over logged steps: the onset is the "
        "step after the CUSUM was last zero before reaching this (and the end, seen "
        "backwards).",
    )
    rank_cusum_decide: float = threshold(
        40.0,
        "A rank whose CUSUM reaches this is an outlier even when it never holds rank_z for "
        "rank_persist_steps in a row: that bar's evidence (10 steps x (6 - 2)), "
        "accumulated.",
    )
    rank_recovery_steps: int = threshold(
        20,
        "Logged steps a rank must stay under rank_z, up to the end of the log, to be back "
        "in line (still out at the last step: not recovered).",
    )
    rank_onset_lead_steps: int = threshold(
        3,
        "A spike or drift of the mean from this many steps before a rank's onset on is that"
        " rank's doing.",
    )
    throughput_persist_points: int = threshold(
        3,
        "Throughput must stay low for this many logged points: one slow step (a checkpoint)"
        " is no drop.",
    )
    throughput_drop_frac: float = threshold(
        0.05,
        "Run throughput this fraction below its trailing median is a throughput drop.",
    )

    # --- remedies: advice a team may set to its own practice, read by no rule ---
    remedy_clip_percentile: float = threshold(
        90.0,
        "The percentile of the run's own grad norm before the event that a spike's remedy"
        " advises clipping at (Q2.4); above 100 reads as 100.",
    )
    remedy_clip_value: float = threshold(
        100.0,
        "The clip-by-value bound (+-) a NaN's remedy advises for an infinite gradient (Q1.4).",
    )

    # --- restart replays and `stab compare` ---
    replay_noise_steps: int = threshold(
        100,
        "A restart replay is judged against the loss noise over this many steps before the "
        "restart.",
    )
    noise_band_sigmas: float = threshold(
        3.0,
        "Default tolerance: this many noise sigmas of the difference of two runs as noisy "
        "as the baseline.",
    )
    smoothed_noise_band_sigmas: float = threshold(
        5.0,
        "...on smoothed curves, where one heavy-tailed mini-batch outlier is spread over "
        "many points.",
    )
    judge_points: int = threshold(
        5,
        "A deviation counts when the median of this many neighbouring points is outside the"
        " band (1: each point).",
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, tuple):  # a list of steps: each one a step
                if not all(isinstance(v, int) and v >= 0 for v in value):
                    raise StabUsageError(f"thresholds.{spec.name} must list steps >= 0")
                continue
            if not isinstance(value, (int, float)) or value < 0:
                raise StabUsageError(f"thresholds.{spec.name} must be a number >= 0, got {value!r}")
        for name in (
            "spike_window_steps",
            "divergence_window_steps",
            "min_points_per_window",
            "replay_noise_steps",
            "judge_points",
            "overfit_rising_evals",
            "remedy_clip_percentile",
            "remedy_clip_value",
        ):
            if getattr(self, name) <= 0:
                raise StabUsageError(f"thresholds.{name} must be > 0")

    def with_overrides(self, values: dict[str, Any], origin: str) -> Thresholds:
        known = {spec.name: spec for spec in fields(self)}
        typed: dict[str, Any] = {}
        for key, raw in values.items():
            name = key.replace("-", "_")
            if name not in known:
                raise StabUsageError(f"{origin}: unknown threshold {key!r}")
            kind = _parse_kind(getattr(self, name))
            try:
                typed[name] = kind(raw)
            except (TypeError, ValueError):
                raise StabUsageError(
                    f"{origin}: threshold {key} must be "
                    f"{_KIND_WORDS.get(kind, 'a ' + kind.__name__)}, got {raw!r}"
                ) from None
        return replace(self, **typed)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, spec.name) for spec in fields(self))

    def __eq__(self, other: object) -> bool:
        # as `@dataclass(eq=True)`: equal to a Thresholds of equal values (compared as tuples)
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        # as a frozen `@dataclass(eq=True)`: the hash of the values' tuple
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in fields(self))
        return f"{self.__class__.__qualname__}({shown})"

    @staticmethod
    def describe(name: str) -> str:
        """What the threshold `name` does, for `stab explain` and the README ('' if unknown)."""
        return _FIELD_DOCS.get(name, "")


@functools.cache
def default_thresholds() -> Thresholds:
    """`Thresholds()`, made once a process: a small `stab analyze` made it six times (the
    settings' two, the questions' three, the rule registry's one), 0.6 million instructions
    each over its 115 fields and their checks (#40). Frozen, and every value a number or a
    tuple: one instance serves every caller."""
    return Thresholds()


def _steps_list(raw: Any) -> tuple[int, ...]:
    """'1000,2000' (--set), [1000, 2000] (TOML) or one step, as steps."""
    items = raw.replace(";", ",").split(",") if isinstance(raw, str) else raw
    items = items if isinstance(items, (list, tuple)) else [items]
    return tuple(sorted({int(str(v).strip()) for v in items if str(v).strip()}))


def _flag(raw: Any) -> bool:
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


_KIND_WORDS: dict[Any, str] = {_steps_list: "a list of steps", _flag: "true or false"}


def _parse_kind(default: Any) -> Any:
    """How a value given as text or TOML is read for a field with this default."""
    if isinstance(default, tuple):
        return _steps_list
    if isinstance(default, bool):
        return _flag
    return int if isinstance(default, int) else float


THRESHOLD_NAMES: frozenset[str] = frozenset(spec.name for spec in fields(Thresholds))
_FIELD_DOCS: dict[str, str] = {spec.name: spec.metadata["doc"] for spec in fields(Thresholds)}
