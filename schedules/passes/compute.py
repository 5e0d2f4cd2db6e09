"""The compute pass: each pipeline action's layer blocks as compute-stream tasks, in the rank's
schedule order (a block is one task; how a pass is cut into blocks is the data-parallel pass's
rule, :func:`schedules.passes.dp.blocks` / :func:`schedules.passes.fsdp_state.blocks`).

A block's ops are the model's work (:class:`schedules.work.Work`); every gradient-producing
action of a stage but the step's first also adds its gradients into the stored ones
(``Work.grad_accumulate_ops``: eager autograd's AccumulateGrad; nothing for Megatron-LM; every
action, the first too, under DeepSpeed's BF16_Optimizer). Under
DeepSpeed 2021's ZeRO-3 (``plan.per_param_zero3``) a layer block's ops carry its hooks' gathers,
synchronizations and reductions (:func:`schedules.passes.zero3_2021.weave_layer`); a block whose
gradients are reduced right after it (ZeRO <= 1) ends with what the stack does to the bucket
first (:mod:`schedules.grad_bucket_ops`).
"""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Lane, phase_kind
from schedules.grad_bucket_ops import bucket_ops
from schedules.passes.dp import reduces_after
from schedules.passes.program import (
    ActionSlot,
    BuildContext,
    Coords,
    Emit,
    Record,
    block_key,
    block_params,
    block_point,
)
from schedules.passes.zero3_2021 import weave_layer


def compute_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The compute blocks of every action of rank ``c``'s ``step``."""
    rank = ctx.rank(c)
    seen: set[tuple[int, str]] = set()  # (stage, phase) whose gradients earlier actions produced
    out: list[Record] = []
    for slot in slots:
        a = slot.action
        accumulate = (a.stage, a.phase) in seen
        seen.add((a.stage, a.phase))
        kind = phase_kind(a.phase, ctx.split)
        name = ctx.label(a)
        for b, (ops, layer) in enumerate(_action_ops(ctx, slot, accumulate)):
            task = Task(rank, Lane.COMPUTE, kind, name, ops, step=step, stage=a.stage, chunk=a.chunk,
                        microbatch=a.microbatch, layer=layer)
            out.append(Emit(block_point(slot.index, b), task, block_key(rank, step, slot.index, b)))
    return out


def _action_ops(ctx: BuildContext, slot: ActionSlot, accumulate: bool) -> tuple[tuple[tuple[Op, ...], int], ...]:
    """The ops and the layer label (-1: several layers) of each block of ``slot``'s action, the
    same for every micro-batch whose action has these blocks (worked out once per build)."""
    a = slot.action
    reduces = ctx.zero <= 1 and reduces_after(ctx, a)
    key = ("action_ops", a.stage, a.phase, slot.blocks, accumulate, reduces)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = tuple((_shared_block_ops(ctx, slot, layers, b, accumulate, reduces),
                                       layers[0] if len(layers) == 1 else -1) for b, layers in enumerate(slot.blocks))
    return found  # type: ignore[no-any-return]


def _shared_block_ops(ctx: BuildContext, slot: ActionSlot, layers: tuple[int, ...], b: int, accumulate: bool,
                      reduces: bool) -> tuple[Op, ...]:
    """One tuple per distinct block, for every micro-batch and rank (:attr:`BuildContext.shared_ops`)."""
    a = slot.action
    first, last = b == 0, b == len(slot.blocks) - 1
    key = ("block", a.stage, a.phase, layers, first, last, accumulate, reduces)
    ops = ctx.shared_ops.get(key)
    if ops is None:
        ops = ctx.shared_ops[key] = _block_ops(ctx, slot, layers, first, last, accumulate, reduces)
    return ops


def _block_ops(ctx: BuildContext, slot: ActionSlot, layers: tuple[int, ...], first: bool, last: bool,
               accumulate: bool, reduces: bool) -> tuple[Op, ...]:
    """The ops of one block of ``slot`` (``accumulate``: earlier actions produced its gradients;
    ``reduces``: its gradients are reduced right after it, by the bucket's ops on this stream)."""
    a = slot.action
    ops = ctx.work.block_ops(slot.stage, a.phase, layers, first, last)
    if ctx.plan.accumulates_gradients(accumulate):
        ops += ctx.work.grad_accumulate_ops(slot.stage, a.phase, layers, first, last, accumulate)
    if ctx.plan.per_param_zero3 and ctx.dp_active and len(layers) == 1:
        return weave_layer(ctx.model, ctx.plan, a.phase, layers[0], ops, first, last)
    if reduces:  # the bucket's checks and scaling, on this stream
        ops += bucket_ops(ctx.plan, block_params(slot.stage, layers))
    return ops
