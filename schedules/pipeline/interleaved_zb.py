"""Interleaved zero bubble (ZB1P with chunks; Qi et al. 2023/2024, "Zero Bubble Pipeline
Parallelism", arXiv 2401.10241) as ``torch.distributed.pipelining.ScheduleInterleavedZeroBubble``
orders it.

Loop stage map, ``v >= 1`` chunks per rank, backward split into ``B`` (input gradient) and ``W``
(weight gradient). The depth-first looped order of :mod:`schedules.pipeline.looped` with rounds of
``g = m // max(1, m // p)`` micro-batches, a warm-up of ``min((v-1)*g + (p-1-r), v*m)`` forwards
on rank ``r`` (one forward per hop from the last rank instead of interleaved 1F1B's two, since a
``B`` no longer waits for the next stage's ``W``), and each rank's ``W`` passes lagging its ``B``
passes by ``r`` so that every rank keeps the same number of micro-batches awaiting ``W``. With
``v = 1`` this is exactly ZB-H1 (:mod:`schedules.pipeline.zb_h1`).
"""

from __future__ import annotations

from schedules.actions import PipelineSchedule
from schedules.pipeline._common import assemble, check_sizes, interleave_group
from schedules.pipeline.looped import order_looped_rank


def build_interleaved_zb(pp: int, microbatches: int, vpp: int = 2) -> PipelineSchedule:
    """Interleaved zero-bubble order (torch's ScheduleInterleavedZeroBubble) for ``vpp`` chunks."""
    check_sizes(pp, microbatches, vpp)
    group = interleave_group(pp, microbatches, "interleaved-zb")
    orders = []
    for rank in range(pp):
        warmup = min((vpp - 1) * group + (pp - 1 - rank), vpp * microbatches)
        orders.append(order_looped_rank(rank=rank, pp=pp, microbatches=microbatches, vpp=vpp,
                                        group=group, warmup=warmup, weight_lag=rank))
    return assemble("interleaved-zb", pp, microbatches, vpp, orders)
