"""What the rules tell later rules and the classifier, as one typed object.

Each field is provided by exactly one rule (its `provides` in the registry)
and read by the rules that declare it in `needs`; the run order of the rules
is derived from those declarations. The classifier reads the finished object.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import TYPE_CHECKING, Any, TypedDict

from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from stabilitycli.detect.kinds.divergence import TrendEvidence
    from stabilitycli.detect.kinds.nan import FiniteLoss, NanEvidence
    from stabilitycli.detect.kinds.restart_replay import RestartReplayEvidence
    from stabilitycli.detect.kinds.spike import RecurringSpikesEvidence, SpikeEvent
    from stabilitycli.detect.log_words import LogWords
    from stabilitycli.detect.lr_plan import LrPlan
    from stabilitycli.detect.overflow_ledger import OverflowLedger
    from stabilitycli.detect.ranks.report import RankReport


class OverflowSummary(TypedDict, total=False):
    """§3's reading of the fp16 scaler, built up as the rule goes (the scale keys only when
    a loss-scale series is logged)."""

    overflows: int  # overflows in the ledger (a lower bound unless overflows_exact)
    overflows_exact: bool
    overflow_steps: list[int]
    span_steps: int  # steps the log spans
    has_scale: bool  # a loss-scale series is logged
    has_messages: bool  # overflow messages are logged
    rate: float  # overflows per step
    scale_min: float
    scale_max: float
    scale_final: float
    scale_drops: int
    scale_halvings: int  # the halvings the drops took (a lower bound unless halvings_exact)
    halvings_exact: bool
    scale_rises: int
    sources: str  # the ledger's count by source, in words
    hidden: str  # why the count is a lower bound, in words ('' when exact)


class EvalSeries(TypedDict):
    """One eval/validation loss series as read (rule `eval-nonfinite`)."""

    series: str  # the column: `eval_loss`, or a second eval set's own key
    key: str  # the key the log wrote it under
    points: int  # evaluations logged
    nonfinite: int
    first_step: int
    last_step: int


@dataclass(frozen=True)
class TrendScan:
    """What §4's scan looked at, and the lasting rise it found (None: none)."""

    window: str  # how the trend window was formed, in words
    windows: int  # windows scanned
    max_z: float  # the largest Mann-Kendall z among them
    shortened: bool  # the window was shortened to fit the log
    # what the scan could not judge (a rise too near the end of the log to tell whether
    # the loss comes back) or judged a step rather than a trend, in words ("" for neither)
    unjudged: str = ""
    rise: TrendEvidence | None = None


@dataclass
class Facts:
    rank_report: RankReport | None = None
    """The per-rank comparison (rule `ranks`); None for a log without ranks."""
    nonfinite: NanEvidence | FiniteLoss | None = None
    """§1 evidence: first step, count, origin layer... (rule `nan`); `count` 0 when clean."""
    spikes: list[SpikeEvent] = field(default_factory=list)
    """§2 material spikes, in step order (rule `spike`)."""
    recurring_spikes: RecurringSpikesEvidence | None = None
    """Many causeless one-point spikes told once: count, steps, sizes (rule `spike`)."""
    blips: list[int] = field(default_factory=list)
    """Steps of flagged points below the materiality bar (rule `spike`)."""
    spike_window: str = ""
    """How the spike baseline window was formed, said in the Q2.1 evidence (rule `spike`)."""
    spike_insufficient: bool = False
    """The log is too short for the spike baseline: the run cannot be called healthy."""
    overflow: OverflowSummary | None = None
    """§3 overflow counts and loss-scale history (rule `loss-scale`), read off the ledger."""
    overflow_ledger: OverflowLedger | None = None
    """Every overflow and scale move, reconciled across sources (rule `loss-scale`)."""
    trend: TrendScan | None = None
    """§4 trend windows scanned and their largest z (rule `divergence`)."""
    restart_replays: list[RestartReplayEvidence] = field(default_factory=list)
    """Per restart, the replayed steps judged against pre-restart noise (rule `restart-replay`)."""
    log_words: LogWords | None = None
    """What the log says its loss and grad norm are (`log_words.read_log_words`): set by the
    pipeline from the view, not by a rule, since it reports no instability."""
    evals: list[EvalSeries] = field(default_factory=list)
    """Every eval loss series read: its key, evaluations and non-finite ones (`eval-nonfinite`)."""

    lr_plan: LrPlan | None = None
    """The LR schedule as planned (warmup, restarts, decays, cooldown), read from the LR and
    the declared restarts before any rule runs (`lr_plan.recognise_plan`)."""
    ignored: frozenset[str] = frozenset()
    """Codes the user ignored (--ignore): a spike cause resting on one is not named."""

    def provide(self, rule_code: str, allowed: tuple[str, ...], values: dict[str, Any]) -> None:
        """Store what a rule found, refusing names it did not declare (a wiring bug, not input)."""
        for name, value in values.items():
            if name not in FACT_NAMES:
                raise AssertionError(f"rule {rule_code!r} provided unknown fact {name!r}")
            if name not in allowed:
                raise AssertionError(f"rule {rule_code!r} provided {name!r} without declaring it")
            setattr(self, name, value)


FACT_NAMES: frozenset[str] = frozenset(f.name for f in fields(Facts))
