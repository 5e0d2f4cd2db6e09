"""Peak memory per GPU of a plan, before simulating it.

The simulator reads activations off the Timeline: a (stage, micro-batch)'s activations are
allocated when its forward starts and freed when its backward ends (the part the weight gradient
still needs is freed when its W ends). On one pipeline rank all of these run on one compute
stream, in the schedule's order, so the peak over time equals the peak of a walk over the rank's
actions in order (frees before allocations at equal times, as on the stream). That is
:func:`schedules.pipeline.peak_inflight` weighted by each chunk's activation bytes
(:meth:`sim.memory.MemoryModel.stage_activation_bytes`), which differ between chunks when the first
and last stages hold the embedding and the head. Model states and buffers come from
:class:`sim.memory.MemoryModel` unchanged, so the estimate is the simulator's own number.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.vocab import Phase
from schedules.actions import PipelineSchedule
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.memory import MemoryBreakdown, MemoryModel
from sim.summary import HBM_RESERVE_FRACTION


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Memory of every pipeline rank's GPUs at their peak (bytes)."""

    per_rank: tuple[MemoryBreakdown, ...]

    @property
    def peak_rank(self) -> int:
        """The pipeline rank with the highest peak (lowest rank on ties)."""
        return max(range(len(self.per_rank)), key=lambda r: (self.per_rank[r].total, -r))

    @property
    def peak(self) -> MemoryBreakdown:
        """The most loaded GPU's breakdown."""
        return self.per_rank[self.peak_rank]

    def fits(self, hbm_bytes: float) -> bool:
        """Whether the peak fits in ``hbm_bytes`` less the simulator's reserve."""
        return self.peak.total <= hbm_bytes * (1 - HBM_RESERVE_FRACTION)


def activation_peaks(memory: MemoryModel, schedule: PipelineSchedule) -> list[float]:
    """Per pipeline rank, the most activation bytes held at once over the step."""
    size = {st.index: memory.stage_activation_bytes(st) for st in memory.stages}
    retained = memory.retained  # share kept until W (split-backward schedules), else 0
    peaks = []
    for order in schedule.orders:
        held = peak = 0.0
        for a in order:
            if a.phase == Phase.F:
                held += size[a.stage]
                peak = max(peak, held)
            elif a.phase == Phase.B:
                held -= size[a.stage] - size[a.stage] * retained
            else:
                held -= size[a.stage] * retained
        peaks.append(peak)
    return peaks


def estimate_memory(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule) -> MemoryEstimate:
    """Peak memory of every pipeline rank under ``plan`` run with ``schedule``."""
    memory = MemoryModel(model, plan, schedule)
    peaks = activation_peaks(memory, schedule)
    return MemoryEstimate(per_rank=tuple(memory.breakdown(r, peaks[r]) for r in range(plan.pp)))
