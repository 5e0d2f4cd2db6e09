"""ZB-H1, the memory-efficient handcrafted zero-bubble schedule (Qi, Wan, Huang, Lin 2023,
"Zero Bubble Pipeline Parallelism", arXiv 2401.10241, sec. 2.1 / Fig. 3 top).

The backward of a micro-batch is split into ``B`` (gradient w.r.t. the stage input, which the
previous stage waits for) and ``W`` (gradient w.r.t. the weights, which nobody waits for).
Construction on rank ``r`` of ``p`` (one chunk per rank, ``m`` micro-batches):

1. Warm-up: ``min(p-1-r, m)`` forwards, as in 1F1B.
2. Steady state: one ``F`` then one ``B`` per step, the F/B order of 1F1B, so ``B`` passes start
   as early as 1F1B's and the rank holds at most ``p - r`` micro-batches between F and B.
3. ``W`` passes are deferred by the rank's index: after its ``B`` of micro-batch ``k`` the rank
   runs ``W`` of micro-batch ``k - r`` (nothing while ``k < r``). Every rank thus forwards ``p``
   micro-batches before its first ``W`` — the same number of in-flight micro-batches (awaiting
   ``W``) on every stage, which is the first stage's 1F1B peak, so peak memory does not exceed
   1F1B's.
4. Cool-down: the remaining ``B`` passes, each followed by its lagged ``W``; the last ``r`` ``W``
   passes close the rank's order, filling the tail where 1F1B's later stages sit idle.

With ``T_F = T_B = T_W`` the bubble is ``(p-1)(T_F + T_B - T_W)`` instead of 1F1B's
``(p-1)(T_F + T_B + T_W)``: a third. The order equals torch's ``ScheduleInterleavedZeroBubble``
with one stage per rank (and :mod:`schedules.pipeline.interleaved_zb` with ``vpp=1``).
"""

from __future__ import annotations

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline._common import act, assemble, check_sizes, require_vpp


def build_zb_h1(pp: int, microbatches: int, vpp: int = 1) -> PipelineSchedule:
    """ZB-H1 order for ``pp`` ranks and ``microbatches`` micro-batches (one chunk per rank)."""
    check_sizes(pp, microbatches, vpp)
    require_vpp("zb-h1", vpp, (1,))
    return assemble("zb-h1", pp, microbatches, vpp,
                    (_rank_order(rank, pp, microbatches) for rank in range(pp)))


def _rank_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    warmup = min(pp - 1 - rank, microbatches)
    order = [act(rank, "F", mb, pp) for mb in range(warmup)]
    for k in range(microbatches):
        if warmup + k < microbatches:
            order.append(act(rank, "F", warmup + k, pp))
        order.append(act(rank, "B", k, pp))
        if k >= rank:
            order.append(act(rank, "W", k - rank, pp))
    order += [act(rank, "W", mb, pp) for mb in range(max(0, microbatches - rank), microbatches)]
    return order
