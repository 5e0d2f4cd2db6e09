"""GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using Pipeline
Parallelism"): fill, then drain.

Every rank runs the forward of all ``m`` micro-batches, then their backwards in the same
micro-batch order (as ``torch.distributed.pipelining.ScheduleGPipe`` does). Each rank holds the
activations of all ``m`` micro-batches at the turn; the bubble share of the step is
``(p-1)/(m+p-1)`` when every stage costs the same.
"""

from __future__ import annotations

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline._common import act, assemble, check_sizes, require_vpp


def build_gpipe(pp: int, microbatches: int, vpp: int = 1) -> PipelineSchedule:
    """GPipe order for ``pp`` ranks, ``microbatches`` micro-batches, one chunk per rank."""
    check_sizes(pp, microbatches, vpp)
    require_vpp("gpipe", vpp, (1,))
    return assemble("gpipe", pp, microbatches, vpp,
                    (_rank_order(rank, pp, microbatches) for rank in range(pp)))


def _rank_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    forwards = [act(rank, "F", mb, pp) for mb in range(microbatches)]
    backwards = [act(rank, "B", mb, pp) for mb in range(microbatches)]
    return forwards + backwards
