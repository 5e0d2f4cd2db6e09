"""The pipeline pass (Megatron-LM): activations and gradients between stages.

A forward of stage s > 0 waits for stage s-1's forward of the same micro-batch; a backward waits
for its own forward and for stage s+1's backward. When the two stages sit on different pipeline
ranks the producer sends the tensor right after computing it: an unordered send task (it starts
as soon as its data is ready, on its own stream) that delivers it; on the same rank (V-shaped
schedules) the producer's last block delivers it.
"""

from __future__ import annotations

from core.taskgraph import Task
from core.vocab import Kind, Lane, Phase
from schedules.passes.program import (
    ActionSlot,
    Alias,
    BuildContext,
    Coords,
    Edge,
    Emit,
    Key,
    Record,
    after_action,
    first_block_key,
    last_block_key,
)


def pipeline_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """Sends and cross-stage dependencies of rank ``c``'s ``step``. What delivers stage s's
    output of micro-batch mb is keyed ("F" | "B", step, tp, cp, dp, s, mb) (activations,
    gradients), and ("Fdone", ...) is its forward's last block."""
    rank, n = ctx.rank(c), ctx.schedule.num_stages
    grid = (step, c.tp, c.cp, c.dp)
    dest: dict[int, tuple[int, int]] = {}  # stage -> (its pipeline rank, its global rank)
    out: list[Record] = []
    for slot in slots:
        a, point = slot.action, after_action(slot.index)
        first, last = first_block_key(rank, step, slot), last_block_key(rank, step, slot)
        s, mb = a.stage, a.microbatch
        if a.phase == Phase.F:
            if s > 0:
                out.append(Edge(point, first, ("F", *grid, s - 1, mb)))
            if s < n - 1:
                out.append(_send(ctx, rank, c.pp, step, slot, last, _dest(ctx, c, dest, s + 1), ("F", *grid, s, mb)))
            out.append(Alias(("Fdone", *grid, s, mb), last))
        elif a.phase == Phase.B:
            out.append(Edge(point, first, ("Fdone", *grid, s, mb)))
            if s < n - 1:
                out.append(Edge(point, first, ("B", *grid, s + 1, mb)))
            if s > 0:
                out.append(_send(ctx, rank, c.pp, step, slot, last, _dest(ctx, c, dest, s - 1), ("B", *grid, s, mb)))
    return out


def _dest(ctx: BuildContext, c: Coords, memo: dict[int, tuple[int, int]], stage: int) -> tuple[int, int]:
    """The pipeline rank holding ``stage`` and the global rank of ``c``'s peer there (memoized)."""
    found = memo.get(stage)
    if found is None:
        pp = ctx.schedule.rank_of(stage)
        found = memo[stage] = (pp, ctx.rank(c, pp))
    return found


def _send(ctx: BuildContext, rank: int, pp: int, step: int, slot: ActionSlot, after: Key, dest: tuple[int, int],
          key: Key) -> Record:
    """What delivers the output of ``slot`` on global ``rank`` (pipeline rank ``pp``) to the stage
    on ``dest`` (its pipeline and global rank): a send, or the block itself."""
    a = slot.action
    if dest[0] == pp:
        return Alias(key, after)
    ops = ctx.message_ops(a, "act" if a.phase == Phase.F else "grad")
    task = Task(rank=rank, lane=Lane.PP, kind=Kind.SEND, name=ops[0].name, ops=ops, step=step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, peer=dest[1], ordered=False)
    return Emit(after_action(slot.index), task, key, (after,))
