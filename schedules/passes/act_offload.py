"""The activation-offload pass (``plan.offload_activations``): each micro-batch's stored
activations of a stage are copied to the host after its forward (copy stream) and back before its
backward, prefetched: the copy back may start once the action two before the backward ended."""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Kind, Lane, OpClass, Phase
from schedules.layer_kinds import stage_activation_bytes
from schedules.passes.program import (
    ActionSlot,
    BuildContext,
    Coords,
    Edge,
    Emit,
    Key,
    Record,
    after_action,
    before_action,
    first_block_key,
    last_block_key,
)

ACT_TO_HOST, ACT_TO_DEVICE = "act d2h", "act h2d"
"""Names of activation-offload copies (the memory model finds them by name)."""
_COPY = 2  # sub-point of "before action": after the pipeline's receives


def act_offload_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The copies of rank ``c``'s ``step`` (every step runs the same actions, so the actions
    before the first ones are the previous step's last)."""
    rank = ctx.rank(c)
    ends = [last_block_key(rank, step - 1, s) for s in slots[-2:]] if step > 0 else []
    to_host: dict[tuple[int, int], Key] = {}
    out: list[Record] = []
    for slot in slots:
        a = slot.action
        d2h = to_host.pop((a.stage, a.microbatch), None)
        if a.phase == Phase.B and d2h is not None:
            point, key = before_action(slot.index, _COPY), ("act_h2d", rank, step, slot.index)
            deps = (d2h, ends[-2]) if len(ends) >= 2 else (d2h,)
            out += [Emit(point, _copy(ctx, c, step, slot, ACT_TO_DEVICE, OpClass.PCIE_TO_DEVICE), key, deps),
                    Edge(point, first_block_key(rank, step, slot), key)]
        last = last_block_key(rank, step, slot)
        ends.append(last)
        if a.phase == Phase.F:
            key = ("act_d2h", rank, step, slot.index)
            to_host[(a.stage, a.microbatch)] = key
            out.append(Emit(after_action(slot.index), _copy(ctx, c, step, slot, ACT_TO_HOST, OpClass.PCIE_TO_HOST),
                            key, (last,)))
    return out


def _copy(ctx: BuildContext, c: Coords, step: int, slot: ActionSlot, name: str, op_class: OpClass) -> Task:
    a = slot.action
    size = stage_activation_bytes(ctx.model, ctx.plan, ctx.stages[a.stage])
    op = Op(Lane.MEMCPY, Kind.OFFLOAD, name, op_class, bytes=size)
    return Task(rank=ctx.rank(c), lane=Lane.MEMCPY, kind=Kind.OFFLOAD, name=name, ops=(op,), step=step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch)
