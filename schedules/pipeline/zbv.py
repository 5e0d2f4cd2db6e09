"""ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, sec. 6) in the order
of ``torch.distributed.pipelining.ScheduleZBVZeroBubble``.

Each rank ``r`` of ``p`` holds two chunks on the V stage map: stage ``r`` (chunk 0, on the way
down) and stage ``2p-1-r`` (chunk 1, on the way back), so the first and the last stage share
rank 0. Backward is split into ``B`` (input gradient) and ``W`` (weight gradient). The order is
written for ``n = max(2p-1, m)`` micro-batches and the actions of micro-batches ``>= m`` are then
dropped (torch's way of running fewer micro-batches than the pipeline needs to fill):

1. ``2(p-r)-1`` forwards of chunk 0;
2. ``r`` times: forward chunk 1, forward chunk 0;
3. ``p-r`` times: forward, ``B``, ``W`` of chunk 1;
4. steady state, until chunk 0 has forwarded all ``n`` and chunk 1 has caught up: forward chunk 0
   (while any remain), ``B`` and ``W`` of chunk 0, then forward, ``B``, ``W`` of chunk 1;
5. ``r`` times: ``B`` chunk 0, ``B`` chunk 1; then ``p-r`` times: ``B`` and ``W`` of chunk 0;
6. the deferred ``W`` passes: the rest of chunk 1's, then the rest of chunk 0's.

Measured with :func:`schedules.pipeline.execute_unit_costs` at ``T_F = T_B = T_W``: each rank idles
only ``p - 1`` units (the unavoidable wait for micro-batch 0 to reach the middle of the V), and with
``m >= 2p - 1`` every rank holds ``2p`` chunk activations = 1F1B's first-stage peak of ``p`` stages.
"""

from __future__ import annotations

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline._common import assemble, check_sizes, chunk_stage, require_vpp
from schedules.pipeline._writer import RankWriter


def build_zbv(pp: int, microbatches: int, vpp: int = 2) -> PipelineSchedule:
    """ZB-V order (torch's ScheduleZBVZeroBubble); two chunks per rank on the V stage map."""
    check_sizes(pp, microbatches, vpp)
    require_vpp("zbv", vpp, (2,))
    orders = [_rank_order(rank, pp, microbatches) for rank in range(pp)]
    return assemble("zbv", pp, microbatches, vpp, orders, stage_map="v")


def _rank_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    planned = max(2 * pp - 1, microbatches)
    down, up = chunk_stage(rank, 0, pp, "v"), chunk_stage(rank, 1, pp, "v")
    out = RankWriter(pp)
    _warm_up(out, rank, pp, down, up)
    _steady(out, planned, down, up)
    _cool_down(out, rank, pp, down, up)
    return [a for a in out.actions if a.microbatch < microbatches]


def _warm_up(out: RankWriter, rank: int, pp: int, down: int, up: int) -> None:
    for _ in range(2 * (pp - rank) - 1):
        out.forward(down)
    for _ in range(rank):
        out.forward(up)
        out.forward(down)
    for _ in range(pp - rank):
        _forward_backward_weight(out, up)


def _steady(out: RankWriter, planned: int, down: int, up: int) -> None:
    while out.issued(up, "F") < out.issued(down, "F") or out.issued(down, "F") < planned:
        if out.issued(down, "F") < planned:
            out.forward(down)
        out.backward(down)
        out.weight(down)
        _forward_backward_weight(out, up)


def _cool_down(out: RankWriter, rank: int, pp: int, down: int, up: int) -> None:
    for _ in range(rank):
        out.backward(down)
        out.backward(up)
    for _ in range(pp - rank):
        out.backward(down)
        out.weight(down)
    for stage in (up, down):
        while out.issued(stage, "W") < out.issued(stage, "B"):
            out.weight(stage)


def _forward_backward_weight(out: RankWriter, stage: int) -> None:
    out.forward(stage)
    out.backward(stage)
    out.weight(stage)
