"""The data-parallel pass (Megatron-LM / DeepSpeed): gradient reduction, ZeRO parameter
gathering and the optimizer step. The group is the DP x CP group, as Megatron-LM shards over it.

- ZeRO-0 (DDP): gradients accumulate locally over the micro-batches; during the last micro-batch's
  backward they are all-reduced in buckets as each bucket's gradients are ready (overlapped with
  the rest of the backward when ``overlap_grad_reduce``; otherwise after the rank's whole
  schedule, as Megatron-LM's ``finalize_model_grads`` does), then every rank runs the full Adam step.
- ZeRO-1 (Megatron's distributed optimizer): the same, with reduce-scatter instead of
  all-reduce; each rank updates its 1/N shard and the updated bf16 parameters are all-gathered —
  at the start of the next step, bucket by bucket before each chunk's first forward when
  ``overlap_param_gather``, else right after the optimizer step.
- ZeRO-2 (DeepSpeed): gradients stay sharded, so every micro-batch's backward reduce-scatters its
  buckets; parameters are all-gathered after the update as for ZeRO-1.
- ZeRO-3 (DeepSpeed / FSDP): parameters are sharded too: each layer's parameters are all-gathered
  before its forward and again before its backward, one layer ahead (prefetch: a gather may start
  when the block two before its own has finished), on every micro-batch; its gradients are
  reduce-scattered right after its backward.

Gradients and gathered parameters travel in bf16 (2 bytes per parameter; 4 in fp32 plans).
Offload (:mod:`schedules.passes.offload`) adds host copies around these collectives.
"""

from __future__ import annotations

import math

from core.taskgraph import Task
from core.vocab import Collective, Kind, Lane, Offload, Phase
from schedules.actions import Action
from schedules.passes import ep_dp, offload, step_end_tasks
from schedules.passes.dp_collectives import block_gathers, block_reduction, dp_collective, dp_task
from schedules.passes.program import (
    STEP_END,
    STEP_START,
    ActionSlot,
    Alias,
    BuildContext,
    Coords,
    Dep,
    Edge,
    Emit,
    Key,
    Point,
    Record,
    after_block,
    before_block,
    block_key,
    block_params,
    last_block_key,
    optimizer_key,
    pass_layers,
    step_end_key,
)
from schedules.stage_ops import grad_buffer_params
from schedules.stages import StageInfo

GRAD_BYTES = 2
PARAM_BYTES = 2


def blocks(ctx: BuildContext, stage: StageInfo, a: Action) -> tuple[tuple[int, ...], ...]:
    """Layer blocks of one pass, in execution order: a layer each under ZeRO-3 (a gather before
    each), buckets of ``dp_bucket_bytes`` when the pass's gradients are reduced right away, else one
    (worked out once per build for each stage, phase and rule)."""
    key = ("blocks", stage.index, a.phase, reduces_after(ctx, a), gathers_before(ctx, a))
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = _blocks(ctx, stage, a)
    return found  # type: ignore[no-any-return]


def _blocks(ctx: BuildContext, stage: StageInfo, a: Action) -> tuple[tuple[int, ...], ...]:
    layers = pass_layers(stage, a.phase)
    if not layers:
        return ((),)
    if ctx.zero == 3:
        return tuple((layer,) for layer in layers)
    if reduces_after(ctx, a) or gathers_before(ctx, a):
        per_bucket = max(1, int(ctx.plan.dp_bucket_bytes // (ctx.plan.element_bytes * stage.layer_params_local)))
        return tuple(layers[i:i + per_bucket] for i in range(0, len(layers), per_bucket))
    return (layers,)


def gathers_before(ctx: BuildContext, a: Action) -> bool:
    """Is this the step's first forward of a chunk under ZeRO-1/2 with overlapped parameter
    gathering? Its blocks then wait for their own bucket's all-gather, so the gathers of later
    buckets run under the earlier blocks' compute (Megatron-LM's forward pre-hooks wait per bucket)."""
    return (ctx.zero in (1, 2) and ctx.plan.overlap_param_gather and a.phase == Phase.F
            and a.microbatch == 0)


def reduces_after(ctx: BuildContext, a: Action) -> bool:
    """Does this pass produce gradients that are reduced right away (bucket by bucket)?"""
    if not ctx.dp_active or a.phase != ctx.grad_phase:
        return False
    return ctx.zero >= 2 or a.microbatch == ctx.last_microbatch


def dp_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The DP/ZeRO tasks of rank ``c``'s ``step`` and its optimizer step."""
    rank = ctx.rank(c)
    prev: tuple[Dep, ...] = (step_end_key(rank, step - 1),) if step > 0 else ()
    out: list[Record] = []
    if ctx.zero in (1, 2) and ctx.plan.overlap_param_gather:
        out += _start_gathers(ctx, c, step, slots, prev)
    gathers = ctx.zero == 3 or ctx.plan.offload == Offload.PARAMS  # before every F and B block
    recent: list[Key] = []  # every block's key so far (gathers only)
    reductions: list[Key] = []
    schedule_end = last_block_key(rank, step, slots[-1])
    for slot in slots:
        gather = gathers and slot.action.phase in (Phase.F, Phase.B)
        reduce = _reduces_or_copies(ctx, slot.action)
        for b, layers in enumerate(slot.blocks):
            if gather:
                out += _before_block(ctx, c, rank, step, slot, b, layers, recent[-2] if len(recent) >= 2 else None,
                                     recent[-1] if recent else None)
            if gathers:
                recent.append(block_key(rank, step, slot.index, b))
            red = _after_block(ctx, c, rank, step, slot, b, layers, schedule_end) if reduce else None
            if red:
                out += red
                reductions += [e.key for e in red if isinstance(e, Emit)]
    return out + _step_end(ctx, c, step, tuple(reductions))


def _reduces_or_copies(ctx: BuildContext, a: Action) -> bool:
    """Does ``a``'s pass reduce its blocks' gradients, or (offload without DP) copy them to the host?"""
    return reduces_after(ctx, a) or (ctx.plan.offload != Offload.NONE and not ctx.dp_active
                                     and a.phase == ctx.grad_phase and a.microbatch == ctx.last_microbatch)


def _start_gathers(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...],
                   prev: tuple[Dep, ...]) -> list[Record]:
    """ZeRO-1/2 with overlapped parameter gathering: the all-gathers of every chunk's updated
    parameters at the step's start, bucket by bucket, each block of the chunk's first forward
    waiting for its own bucket (:func:`gathers_before`)."""
    rank = ctx.rank(c)
    out: list[Record] = []
    for slot in slots:
        if not gathers_before(ctx, slot.action):
            continue
        a = Action(stage=slot.stage.index, phase=Phase.F, microbatch=-1, chunk=slot.action.chunk)
        for b, layers in enumerate(slot.blocks):
            size = ctx.plan.param_gather_bytes * block_params(slot.stage, layers)
            key = ("param_ag", rank, step, 0, slot.action.chunk, b)
            task = dp_collective(ctx, c, step, Collective.ALL_GATHER, f"param_ag c{slot.action.chunk} b{b}", size, a)
            out += [Emit(STEP_START, task, key, prev), Edge(STEP_START, block_key(rank, step, slot.index, b), key)]
            out += [r for e in ep_dp.gathers(ctx, c, step, STEP_START, ("expert", *key), a, layers, prev)
                    for r in (e, Edge(STEP_START, block_key(rank, step, slot.index, b), e.key))]
    return out


def _param_gathers(ctx: BuildContext, c: Coords, step: int, chunk: int, point: Point,
                   deps: tuple[Dep, ...]) -> list[Emit]:
    """All-gathers of a chunk's updated parameters, bucket by bucket."""
    stage = ctx.stages[ctx.schedule.stage_of(c.pp, chunk)]
    total = ctx.plan.param_gather_bytes * stage.params_local
    buckets = max(1, math.ceil(total / ctx.plan.dp_bucket_bytes))
    a = Action(stage=stage.index, phase=Phase.F, microbatch=-1, chunk=chunk)
    rank = ctx.rank(c)
    return [Emit(point, dp_collective(ctx, c, step, Collective.ALL_GATHER, f"param_ag c{chunk} b{i}", total / buckets, a),
                 ("param_ag", rank, step, point[0], chunk, i), deps) for i in range(buckets)] + ep_dp.gathers(
        ctx, c, step, point, ("expert_param_ag", rank, step, point[0], chunk), a, stage.layers, deps)


def _before_block(ctx: BuildContext, c: Coords, rank: int, step: int, slot: ActionSlot, b: int,
                  layers: tuple[int, ...], two_back: Key | None, one_back: Key | None) -> list[Record]:
    """ZeRO-3: all-gather this block's parameters, prefetched (after the block two before it);
    ZeRO-Infinity: first bring the shard from the host. The gathers are issued on the DP stream
    before the previous block's gradient reduction (FSDP's ``BACKWARD_PRE`` prefetch and FSDP2's
    default issue the next all-gather before the current reduce-scatter; DeepSpeed prefetches
    ahead of its reductions likewise), so a reduction waiting for its block's backward never
    holds back the next block's parameters (nor, with offload, the host copy feeding them).
    DeepSpeed's fetches that no earlier fetch prefetched (:mod:`schedules.passes.zero3_fetch`)
    start only when the block before has ended (``one_back``) and the block waits for them."""
    a = slot.action
    point, block = before_block(slot.index, b), block_key(rank, step, slot.index, b)
    issued = before_block(slot.index, b - 1) if b > 0 else point
    out: list[Record] = []
    after: Dep | None = two_back
    if ctx.plan.offload == Offload.PARAMS:
        fetch_key = ("fetch", rank, step, slot.index, b)
        out += offload.fetch_params(ctx, c, step, issued, fetch_key, a, block_params(slot.stage, layers) / ctx.shard,
                                    two_back, layers[0])
        after = fetch_key
        if not ctx.dp_active:
            return [*out, Edge(point, block, fetch_key)]
    deps: tuple[Dep, ...] = () if after is None else (after,)
    for j, g in enumerate(block_gathers(ctx, slot.stage, layers, a.phase)):
        gather_key = ("ag", rank, step, slot.index, b, j)
        task = dp_task(ctx, c, rank, step, g.ops, g.kind, g.name, a, g.layer)
        if g.prefetched:
            out += [Emit(issued, task, gather_key, deps), Edge(point, block, gather_key)]
            deps = ()  # the DP stream runs a block's gathers in order
        else:
            waits: tuple[Dep, ...] = (one_back,) if one_back is not None else ()
            out += [Emit(point, task, gather_key, waits), Edge(point, block, gather_key)]
    if ep_dp.active(ctx):
        out += [r for e in ep_dp.gathers(ctx, c, step, issued, ("expert_ag", rank, step, slot.index, b), a, layers,
                                         deps) for r in (e, Edge(point, block, e.key))]
    return out


def _after_block(ctx: BuildContext, c: Coords, rank: int, step: int, slot: ActionSlot, b: int,
                 layers: tuple[int, ...], schedule_end: Key) -> list[Record]:
    """Reduce the block's gradients (:func:`_reduces_or_copies`: all-reduce or reduce-scatter; without
    ``overlap_grad_reduce``, or on a stage that delays them (:func:`delays_reduction`), only
    once the rank's whole schedule has run, ``schedule_end``, and
    queued on the DP stream at the step's end, after every parameter gather of the schedule:
    Megatron's ``finalize_model_grads`` and DeepSpeed's ``overlap_comm=False`` reduce after the
    last backward), then (offload) copy the reduced shard to the host; without DP, offload copies
    the last micro-batch's gradients."""
    a = slot.action
    overlap = ctx.plan.overlap_grad_reduce and not delays_reduction(ctx, c)
    point = after_block(slot.index, b) if overlap else STEP_END
    block = block_key(rank, step, slot.index, b)
    if not reduces_after(ctx, a):
        return [offload.grads_to_host(ctx, c, step, point, ("d2h", rank, step, slot.index, b), a,
                                      block_params(slot.stage, layers), block)]
    red = block_reduction(ctx, slot.stage, layers)
    if red is None:
        return []
    task = dp_task(ctx, c, rank, step, red.ops, red.kind, red.name, a, red.layer)
    red_key = ("grad", rank, step, slot.index, b)
    after = (block,) if overlap else (block, schedule_end)
    out: list[Record] = [Emit(point, task, red_key, after)]
    if ep_dp.active(ctx):
        out += ep_dp.reductions(ctx, c, step, point, ("expert", *red_key), a, layers, after)
    if ctx.plan.offload != Offload.NONE:
        out.append(offload.grads_to_host(ctx, c, step, point, ("d2h", rank, step, slot.index, b), a,
                                         red.params / ctx.shard, red_key))
    return out


def delays_reduction(ctx: BuildContext, c: Coords) -> bool:
    """Does rank ``c`` launch its gradient reductions after its schedule although they overlap
    elsewhere (``delay_grad_reduce``: pipeline stages after the first, non-interleaved schedules)?"""
    return ctx.plan.delay_grad_reduce and c.pp > 0 and ctx.schedule.vpp == 1


def _step_end(ctx: BuildContext, c: Coords, step: int, reductions: tuple[Key, ...]) -> list[Record]:
    """The optimizer step after every gradient reduction (+ the parameter gathers if not
    overlapped); the step ends with the last of them."""
    rank = ctx.rank(c)
    stages = ctx.rank_stages(c)
    params = sum(stage.params_local for stage in stages)
    params /= ctx.shard if ctx.zero >= 1 else 1
    params += ep_dp.optimizer_params(ctx, stages)
    key = optimizer_key(rank, step)
    out: list[Record] = []
    if ctx.plan.offload != Offload.NONE:
        emits, end = offload.optimizer_step(ctx, c, step, STEP_END, key, params, reductions)
        out += emits
    else:
        buffer = (grad_buffer_params(ctx.plan, sum(s.params_local for s in stages), ctx.shard)
                  + grad_buffer_params(ctx.plan, sum(s.expert_params_local for s in stages), ctx.plan.edp))
        ops = ctx.work.optimizer_ops(params, buffer)
        deps: tuple[Dep, ...] = reductions
        if step_end_tasks.applies(ctx):  # embedding and norm all-reduces, then the host reads the norm
            syncs, deps = step_end_tasks.step_end_records(ctx, c, step, params, reductions)
            out += syncs
            ops = step_end_tasks.with_norm_read(ctx, ops)
        task = Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name="optimizer", ops=ops, step=step)
        out.append(Emit(STEP_END, task, key, deps))
        end = key
    if ctx.zero in (1, 2) and not ctx.plan.overlap_param_gather:
        gathers = [g for ch in range(ctx.schedule.vpp) for g in _param_gathers(ctx, c, step, ch, STEP_END, (end,))]
        out += gathers
        end = gathers[-1].key if gathers else end
    return [*out, Alias(step_end_key(rank, step), end)]
