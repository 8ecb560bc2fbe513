"""One loss spike as the spike rule measured it: what later rules and the tree read.

Apart from the rule so that `Facts` can name the type without importing the rule
(which registers itself in the registry that imports `Facts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stabilitycli.detect.kinds.spike import SpikeCause


@dataclass
class SpikeEvent:
    onset_step: int
    end_step: int
    peak_step: int
    points: int
    mu: float
    sigma: float
    threshold: float
    peak: float
    z: float
    recovered: bool
    recovery_step: int | None
    recovery_steps: int | None
    spike_type: int
    material: bool
    causes: list[SpikeCause] = field(default_factory=list)
    window: str = ""
    # the first loss logged recovery_window_steps or more after the peak, and its step
    after_window_loss: float | None = None
    after_window_step: int | None = None
    # the logged steps the frozen baseline (mu, sigma) was taken over
    baseline_first_step: int | None = None
    baseline_last_step: int | None = None
    recovery_level: float | None = None  # mu + recovery_sigma * sigma
    # steps after the onset the loss had to be back within (recovery_window_steps, or the
    # gap to the next logged point when that is longer)
    recovery_horizon_steps: int | None = None

    @property
    def cause(self) -> str | None:
        return self.causes[0]["cause"] if self.causes else None
