"""1F1B (PipeDream-Flush; Narayanan et al. 2021, Megatron-LM's non-interleaved schedule).

Rank ``r`` of ``p`` first runs ``min(p-1-r, m)`` warm-up forwards, then alternates one forward
and one backward (steady state) until every forward is issued, then drains the remaining
backwards. A rank therefore never holds more than ``p - r`` micro-batches' activations (``p`` on
the first rank) instead of GPipe's ``m``, with the same bubble ``(p-1)/(m+p-1)``.

This is the order ``torch.distributed.pipelining.Schedule1F1B`` executes. Deviation: torch rejects
``m < p``; here ``m < p`` is accepted (every rank then runs its ``m`` forwards before its
backwards, as Megatron-LM does).
"""

from __future__ import annotations

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline._common import act, assemble, check_sizes, require_vpp


def build_1f1b(pp: int, microbatches: int, vpp: int = 1) -> PipelineSchedule:
    """1F1B order for ``pp`` ranks, ``microbatches`` micro-batches, one chunk per rank."""
    check_sizes(pp, microbatches, vpp)
    require_vpp("1f1b", vpp, (1,))
    return assemble("1f1b", pp, microbatches, vpp,
                    (_rank_order(rank, pp, microbatches) for rank in range(pp)))


def _rank_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    warmup = min(pp - 1 - rank, microbatches)
    order = [act(rank, "F", mb, pp) for mb in range(warmup)]
    for backward in range(microbatches - warmup):
        order.append(act(rank, "F", warmup + backward, pp))
        order.append(act(rank, "B", backward, pp))
    order += [act(rank, "B", mb, pp) for mb in range(microbatches - warmup, microbatches)]
    return order
