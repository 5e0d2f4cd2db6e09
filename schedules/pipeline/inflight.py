"""Peak in-flight micro-batches per rank: how many activations a schedule makes a rank hold.

Walking a rank's order, a (micro-batch, chunk) pair enters at its ``F`` and leaves at its ``B``
(``release="B"``: the stored activations, which the input-gradient pass consumes) or at its ``W``
(``release="W"``, split-backward schedules: what must stay alive until the weight gradient — the
inputs of each linear layer and the output gradients). Counts are in chunk activations: with
``vpp`` chunks per rank one chunk is ``1/vpp`` of a rank's layers.
"""

from __future__ import annotations

from core.errors import invalid
from core.vocab import Phase
from schedules.actions import PipelineSchedule

RELEASES = (Phase.B, Phase.W)


def peak_inflight(schedule: PipelineSchedule, release: str = "B") -> list[int]:
    """Per rank, the most (micro-batch, chunk) pairs forwarded and not yet released at once."""
    if release not in RELEASES:
        raise invalid("release", release, "expected one of " + ", ".join(RELEASES))
    if release == "W" and not schedule.split_backward:
        raise invalid("release", release, f"schedule {schedule.name} has no W actions; use 'B'")
    peaks = []
    for order in schedule.orders:
        held = peak = 0
        for action in order:
            if action.phase == Phase.F:
                held += 1
                peak = max(peak, held)
            elif action.phase == release:
                held -= 1
        peaks.append(peak)
    return peaks
