"""Whether a sustained event that was not back within the recovery window ended all the
same: a bump, which its accumulated excess judges, not a step (issue 36).

A sustained event whose loss is not back at its frozen baseline within the recovery
window is read as a step and must settle `spike_persistent_min_rise_frac` above the curve
over a spike window's points (`settle.settled_rise`): a +3-4% curriculum step whose first
three points the noise drew high is under the spec's 5%. A bump of ten logged points
lasts longer than the recovery window whenever the log is written every 10 steps or more
sparsely, and on a rising curve (a mixture hump) or under AR(1) noise the loss may not
come back to a baseline frozen a window behind the curve for a long time. Its settled
level over a window holding the bump and the stretch after it is the bump's mean excess
diluted by the points that came back: a +8% ten-point bump logged every 10 steps read
+4% over twenty points, and the run was `healthy`.

The two differ in what comes after. Over the same stretch the step stays up; the bump's
later half is back near the level the run was on (the one the settled reading measures
over, `settle.curve_ahead`). The event ended when its later half sits nearer that level
than the event's own first `spike_excess_points` points do: under half their mean excess.
A hump's rise after the flag counts against the bump (the later half is read high), a
decay's fall for it; a cubic carried through both sides (`carried_curve`) would follow
either, but with the event's ten points left out of a twenty-point stretch it bent 3% off
the curve in AR(1) noise and read a bump that came back as a level that stayed.
A step of +3.5% at noise 1% whose first points summed past the excess bar (a mean of 4
sigma or more) has a later half 3.5 sigma up, 1.5 over half of it: it stays a step.
"""

from __future__ import annotations

import numpy as np

from stabilitycli.core.config import Thresholds
from stabilitycli.detect.settle import settle_span


def bump_ended(
    row: int, steps: np.ndarray, loss: np.ndarray, base: float, thresholds: Thresholds
) -> bool:
    """Did the event flagged at `row` end within its settle span: the span's later half
    under half the mean excess of the event's first points over `base`? A span the log cuts
    short says nothing of whether the level stayed."""
    span = int(settle_span(steps, np.array([row]), thresholds)[0])
    first = int(thresholds.spike_excess_points)
    if row + span > loss.size or span < 2 * first or not base > 0:
        return False
    values = loss[row : row + span]
    own, later = values[:first], values[span // 2 :]
    if not (np.all(np.isfinite(own)) and np.isfinite(later).sum() >= first):
        return False
    rise = float(np.mean(own)) - base
    return bool(rise > 0 and float(np.nanmean(later)) - base < rise / 2.0)
