"""Expert-parallel all-to-alls under another micro-batch's compute (DualPipe's overlap).

DualPipe and DualPipeV (DeepSeek-V3 Technical Report §3.2.1) pair a forward chunk of one
micro-batch with a backward chunk of another and interleave them so that each one's dispatch
and combine all-to-alls run while the other computes; Megatron-Core's 1F1B "A2A overlap" does
the same for the steady state's forward/backward pairs. With ``plan.overlaps_moe``
(``moe_overlap`` on, or auto under DualPipeV) this pass runs the compute pass and then, for every
such pair of consecutive actions (a forward and a backward of different micro-batches or
chunks), takes the EP-lane ops (all-to-alls, expert-TP gathers) out of both actions' compute
blocks and issues them as communication tasks on the EP stream when the pair starts (after the
compute that precedes it); the pair's last block waits for all of them. A pair thus lasts
about max(its compute, its all-to-alls): what the all-to-alls need beyond the compute shows as
exposed communication (the compute stream idles before the pair's last block), what they need
less is hidden. Actions outside a pair (warm-up forwards, cool-down backwards) keep their
all-to-alls inline, blocking. The model neglects that a chunk's own layers wait for their own
dispatch (the pair's two chunks fill each other's gaps, which is what the schedule is for).
"""

from __future__ import annotations

import dataclasses

from core.taskgraph import Task
from core.vocab import Kind, Lane, Phase
from schedules.layer_kinds import layer_kind
from schedules.model import ModelSpec
from schedules.passes.compute import compute_records
from schedules.passes.ep_dp import expert_group_tag
from schedules.passes.program import (
    PREV_COMPUTE,
    ActionSlot,
    BuildContext,
    Coords,
    Edge,
    Emit,
    Record,
    before_action,
    block_key,
    block_point,
)
from schedules.plan import ParallelPlan


def overlaps_all_to_alls(model: ModelSpec, plan: ParallelPlan) -> bool:
    """The plan overlaps the all-to-alls of an MoE model with expert parallelism."""
    return layer_kind(model).overlaps_all_to_alls(plan)


def applies(ctx: BuildContext) -> bool:
    """This build overlaps the all-to-alls (:func:`overlaps_all_to_alls`)."""
    return overlaps_all_to_alls(ctx.model, ctx.plan)


def pairs(slots: tuple[ActionSlot, ...]) -> dict[int, tuple[int, int]]:
    """Action index -> (first, second) of its overlapped forward/backward pair, greedily left
    to right over consecutive actions."""
    out: dict[int, tuple[int, int]] = {}
    i = 0
    while i + 1 < len(slots):
        a, b = slots[i].action, slots[i + 1].action
        if {a.phase, b.phase} == {Phase.F, Phase.B} and (a.microbatch, a.chunk) != (b.microbatch, b.chunk):
            out[i] = out[i + 1] = (i, i + 1)
            i += 2
        else:
            i += 1
    return out


def ep_overlap_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The compute blocks, with the all-to-alls of paired actions moved to the EP stream."""
    records = compute_records(ctx, c, step, slots)
    paired = pairs(slots)
    rank = ctx.rank(c)
    out: list[Record] = []
    waits: list[Record] = []
    for rec in records:
        index = rec.key[3] if isinstance(rec, Emit) and isinstance(rec.key, tuple) else -1
        if not isinstance(rec, Emit) or index not in paired:
            out.append(rec)
            continue
        task, block = rec.task, rec.key
        comm = tuple(op for op in task.ops if op.lane == Lane.EP)
        if not comm:
            out.append(rec)
            continue
        out.append(dataclasses.replace(rec, task=dataclasses.replace(
            task, ops=tuple(op for op in task.ops if op.lane != Lane.EP))))
        first, second = paired[index]
        key = ("ep_a2a", block)
        # unfolded, the EP group's members meet (one run of the group's flows, not one per member)
        group = "" if ctx.options.folded else \
            f"ep/{step}/{task.stage}/{task.kind}{task.microbatch}/{task.name}/{expert_group_tag(ctx, c, 'ep')}"
        a2a = Task(rank=rank, lane=Lane.EP, kind=Kind.ALL_TO_ALL, name=f"{task.name} a2a", ops=comm, step=step,
                   stage=task.stage, chunk=task.chunk, microbatch=task.microbatch, layer=task.layer, group=group)
        out.append(Emit(before_action(first, 1), a2a, key, (PREV_COMPUTE,)))
        last = len(slots[second].blocks) - 1
        waits.append(Edge(block_point(second, last), block_key(rank, step, second, last), key))
    return out + waits
