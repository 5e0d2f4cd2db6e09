"""Gradient reduction under FSDP2 and replicate (:mod:`schedules.passes.dp_torch`): by the
post-backward hooks block by block, or by the pipelining stage after its last backward; each
unit's post-backward copy then its all-reduce / reduce-scatter (and, under hybrid sharding, the
all-reduce across replicas), the MoE layers' TP sums, the experts' own unit, the scaling by the
number of micro-batches and the final callback's wait."""

from __future__ import annotations

from core.groups import DP, TP
from core.taskgraph import Op, Task, collective_op
from core.vocab import Collective, Kind, Lane, OpClass
from schedules.moe import is_moe_layer, moe_of
from schedules.passes import ep_dp, offload
from schedules.passes.dp import dp_collective
from schedules.passes.fsdp_state import (
    POST_BACKWARD_FRESH,
    POST_BACKWARD_TOUCHES,
    ROOT,
    FsdpStep,
    compute_task,
    experts_state,
    host_offload,
    trainer_edp,
    unit_label,
    units,
)
from schedules.passes.program import (
    ActionSlot,
    Emit,
    Hold,
    Key,
    Point,
    after_action,
    after_block,
    last_block_key,
)


def reduces_in_hooks(s: FsdpStep, slot: ActionSlot) -> bool:
    """Whether FSDP's own post-backward hooks reduce the gradients of ``slot`` (a backward),
    block by block as each block's backward ends, rather than the stage after its last backward.

    Without pipeline parallelism torchtitan runs the step as a plain ``loss.backward()``
    (train.py@9dec370, "Non-PP forward / backward"), so FSDP2's hooks drive the reduction: each
    block's ``RegisterPostBackwardFunction`` on its forward inputs calls ``post_backward`` when
    the block's input gradients are computed, which reduce-scatters the block's gradients on
    the reduce-scatter stream (torch/distributed/_composable/fsdp/_fsdp_param_group.py, 2024);
    the root, whose inputs (token ids) need no gradient, is reduced in the final callback
    (``_root_post_backward_final_callback``, _fsdp_state.py@005da465). Nothing turns gradient
    sync off between micro-batches, so every micro-batch's backward reduces (and reshards):
    Composer's ``ddp_sync_context`` returns at once for a model that is not DDP
    (composer/distributed/dist_strategy.py), FSDP1's hooks then reduce-scatter in every backward.
    Under ``torch.distributed.pipelining`` (pp > 1, and the included trainer, a one-stage pipeline
    without PP: the plan says ``overlap_grad_reduce=False``) the stage turns gradient sync off
    for its backwards and reduces after the last one (``REDUCE_GRAD``), but only for a stage
    module that is itself an ``FSDPModule``; with ``plan.grad_sync="every-microbatch"`` it is not
    (the stage gets a "regular backward") and the hooks reduce in every micro-batch's backward
    under PP as well. ZeRO-2/3 only (one block per layer); replicate (ZeRO-0/1) keeps its
    reduction after the backward."""
    ctx = s.ctx
    in_hooks = ctx.plan.pp == 1 or ctx.plan.grad_sync == "every-microbatch"
    return (ctx.dp_active and ctx.zero >= 2 and ctx.plan.overlap_grad_reduce and in_hooks
            and not ctx.split and slot.action.phase == ctx.grad_phase)


def reduce_block_in_hooks(s: FsdpStep, slot: ActionSlot, b: int, layers: tuple[int, ...]) -> None:
    """The post-backward hook of each unit of block ``b`` reduces its gradients as its backward
    ends (:func:`reduces_in_hooks`)."""
    params = dict(units(slot.stage))
    for unit in layers:
        reduce_unit(s, slot, after_block(slot.index, b), unit, params[unit])
        gloo_reduce_wait(s, slot, after_block(slot.index, b), unit)


def reduce_after_action(s: FsdpStep, slot: ActionSlot, hooks: bool, reductions_from: int) -> None:
    """After a backward-like action: with ``hooks`` the root's reduction (its blocks were
    reduced already); after the stage's last one, REDUCE_GRAD unit by unit (without ``hooks``),
    then the gradients' division by the number of micro-batches (``scale_grads``). Either way
    the compute stream then waits for the reductions (:func:`_final_callback_wait`)."""
    ctx, a = s.ctx, slot.action
    if a.phase != ctx.grad_phase:
        return
    s.backwards[a.stage] = s.backwards.get(a.stage, 0) + 1
    m = ctx.plan.num_microbatches
    point = after_action(slot.index)
    if hooks:
        _reduce(s, slot, point, [(u, p) for u, p in units(slot.stage) if u == ROOT])
        gloo_reduce_wait(s, slot, point, ROOT)
        _final_callback_wait(s, slot, point, reductions_from)
    if s.backwards[a.stage] < m:
        return
    if ctx.dp_active and not hooks:
        s.red = None  # each stage module is its own FSDP root, with its own reduction in flight
        _reduce(s, slot, point, units(slot.stage))
        _final_callback_wait(s, slot, point, reductions_from)
    if m > 1:
        share = ctx.shard if ctx.zero >= 2 else 1
        ops = tuple(Op(Lane.COMPUTE, Kind.BWD, f"{unit_label(u)}.grad_scale", OpClass.ELEMENTWISE,
                       bytes=2 * ctx.plan.element_bytes * params / share, layer=u) for u, params in units(slot.stage))
        task = Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.BWD, name="grad_scale", ops=ops, step=s.step,
                    stage=a.stage, chunk=a.chunk)
        s.out.append(Emit(point, task))


def _final_callback_wait(s: FsdpStep, slot: ActionSlot, point: Point, reductions_from: int) -> None:
    """The compute stream waits for the gradient reductions ``slot``'s backward issued (those
    after ``s.pending[reductions_from]``) before it runs anything else: FSDP2's
    ``_root_post_backward_final_callback`` in the last backward (``is_last_backward``, the
    default, and what ``torch.distributed.pipelining`` sets for a stage's last backward before
    it runs the post-backward itself) finalizes every parameter group, whose
    ``_wait_for_post_backward`` makes the current stream wait for the group's post-reduce event,
    and waits on the retained reduce-scatter states' events ("The compute stream (which reuses
    the memory) is ordered past each reduce-scatter first": _fsdp_state.py in torch 2.13; the
    same waits in 2.6-2.9, ``_fsdp_param_group.py`` ``finalize_backward``). So a stage's last
    reduce-scatters are exposed to the compute that follows (the next chunk's backward in an
    interleaved cool-down, the next micro-batch's forward without PP). A stream wait, no kernel:
    a zero-time task after the reductions."""
    reductions = tuple(s.pending[reductions_from:])
    if not reductions:
        return
    op = Op(Lane.COMPUTE, Kind.BWD, "FSDP::root_post_backward_callback", OpClass.FIXED, duration_s=0.0)
    s.out.append(Emit(point, compute_task(s, slot, Kind.BWD, op), None, reductions))


def gloo_reduce_wait(s: FsdpStep, slot: ActionSlot, point: Point, unit: int) -> None:
    """On a CPU host (gloo) the hook's reduce-scatter, called without ``async_op`` (FSDP2
    ``foreach_reduce``), returns when done: the backward goes on only then (a wait span on
    the compute stream, as for the gloo prefetch)."""
    if not s.ctx.options.gloo_host or s.red is None:
        return
    op = Op(Lane.COMPUTE, Kind.BWD, f"{unit_label(unit)}.reduce_wait", OpClass.ELEMENTWISE, bytes=0.0, layer=unit)
    wait = ("reduce_wait", s.rank, s.step, slot.index, unit)
    s.out += [Emit(point, compute_task(s, slot, Kind.BWD, op), wait), Hold(point, wait, s.red)]


def _reduce(s: FsdpStep, slot: ActionSlot, point: Point, todo: list[tuple[int, float]]) -> None:
    """Each unit of ``todo`` in turn: its post-backward copy, then its all-reduce /
    reduce-scatter (asynchronous); then the experts' own unit (over EDP, none where the
    trainer's EDP group is one rank); under TP an MoE layer's TP gradient sums around its unit
    (:func:`_moe_tp_sums`)."""
    for unit, params in todo:
        _moe_tp_sums(s, slot, point, unit, experts=False)
        reduce_unit(s, slot, point, unit, params)
        _moe_tp_sums(s, slot, point, unit, experts=True)
    if trainer_edp(s.ctx) == 1:
        return  # the trainer's EDP groups have one rank (a dense model's: no experts)
    experts = ep_dp.reductions(s.ctx, s.c, s.step, point, ("expert_grad", s.rank, s.step, slot.index), slot.action,
                               slot.stage.layers, () if s.red is None else (s.red,))  # over EDP
    s.out += experts
    s.pending += [e.key for e in experts if isinstance(e, Emit)]
    if s.ctx.zero >= 2:  # the stage's experts units, reduced together above, are sharded again
        for layer in slot.stage.layers:
            s.sharded[experts_state(slot.stage, layer)] = True


def _moe_tp_sums(s: FsdpStep, slot: ActionSlot, point: Point, unit: int, *, experts: bool) -> None:
    """The trainer's MoE block under TP holds its parameters as replicated DTensors and computes
    with their local tensors, whose gradients are partial sums over TP
    (:func:`profiler.trainer.moe.local`); at ``REDUCE_GRAD`` each such gradient is all-reduced
    over TP, one blocking call per parameter, in unit order: the router's (and the shared
    experts' w1, w3, w2) before the layer's DP reduction, the routed experts' stacked w1, w3
    and w2 after it, before the next unit (the recorded trace, ``traces/ep2tp2dp2-moe`` rank 0:
    per layer 3 small ``gloo:all_reduce`` on the TP group, its DP all-reduce, then 3 of the
    experts' 90112 bytes each). The sequence-parallel norms' partial gradients are reduced the
    same way in dense models and are not modelled here, as there."""
    ctx = s.ctx
    if ctx.plan.tp == 1 or unit == ROOT or not is_moe_layer(ctx.model, unit):
        return
    moe = moe_of(ctx.model)
    h, element = ctx.model.hidden_size, ctx.plan.element_bytes
    if experts:
        sizes = [moe.num_experts // ctx.plan.ep * h * moe.expert_ffn_size] * 3
    else:
        shared = moe.num_shared_experts * h * moe.shared_ffn if moe.num_shared_experts else 0
        sizes = [moe.num_experts * h] + ([shared] * 3 if shared else [])
    a = slot.action
    for i, size in enumerate(sizes):
        name = f"L{unit}.{'experts' if experts else 'moe'}.tp_grad_ar{i}"
        op = collective_op(Lane.TP, Collective.ALL_REDUCE, name, bytes=element * size, dim=TP, layer=unit)
        task = Task(rank=s.rank, lane=Lane.TP, kind=Kind.ALL_REDUCE, name=name, ops=(op,), step=s.step,
                    stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=unit,
                    group="" if ctx.options.folded else f"tp/{s.step}/{a.stage}/{name}/cp{s.c.cp}dp{s.c.dp}pp{s.c.pp}")
        key = ("moe_tp_grad", s.rank, s.step, slot.index, unit, experts, i)
        # the gradient is the backward's: the first sum waits for the action's last block (the
        # compute stream's order does not hold a TP-stream task back), later ones for the one before
        after = (last_block_key(s.rank, s.step, slot),) if s.red is None else (s.red,)
        s.out.append(Emit(point, task, key, after))
        s.red = key
        s.pending.append(key)


def reduce_unit(s: FsdpStep, slot: ActionSlot, point: Point, unit: int, params: float) -> None:
    """``unit``'s post-backward copy on the compute stream, after the previous reduction (FSDP2
    keeps one in flight: ``post_backward`` makes the compute stream wait for the last
    reduce-scatter's event), then its all-reduce / reduce-scatter; the unit is sharded again."""
    ctx, a = s.ctx, slot.action
    kind = Collective.ALL_REDUCE if ctx.zero <= 1 else Collective.REDUCE_SCATTER
    wrapper = "replicate" if ctx.zero <= 1 else "fully_shard"
    label, grad_bytes = unit_label(unit), ctx.plan.element_bytes * params
    ops = (Op(Lane.COMPUTE, Kind.BWD, f"{label}.post_backward", OpClass.ELEMENTWISE,
              bytes=POST_BACKWARD_TOUCHES * grad_bytes, layer=unit),
           Op(Lane.COMPUTE, Kind.BWD, f"{label}.post_backward.alloc", OpClass.ALLOC,
              bytes=POST_BACKWARD_FRESH[wrapper] * grad_bytes, layer=unit))
    post = ("post_backward", s.rank, s.step, slot.index, unit)
    task = Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.BWD, name=ops[0].name, ops=ops, step=s.step,
                stage=a.stage, chunk=a.chunk, layer=unit)
    s.out.append(Emit(point, task, post, () if s.red is None else (s.red,)))
    name = f"{label}.grad_{'ar' if kind == Collective.ALL_REDUCE else 'rs'}"
    dim = ctx.plan.shard_dim if kind == Collective.REDUCE_SCATTER else DP
    clone: tuple[Op, ...] = ()
    if kind == Collective.REDUCE_SCATTER and ctx.options.gloo_host:  # gloo all-reduces a new copy
        clone = (Op(Lane.DP, Kind(kind), f"{name}.clone", OpClass.ALLOC, bytes=grad_bytes, dim=dim, layer=unit),)
    red: Key = ("grad", s.rank, s.step, slot.index, unit)
    reduced = ctx.plan.grad_reduce_bytes * params
    s.out.append(Emit(point, dp_collective(ctx, s.c, s.step, kind, name, reduced, a, layer=unit, before=clone,
                                           dim=dim), red, (post,)))
    s.red = red
    done: Key = red
    if kind == Collective.REDUCE_SCATTER and ctx.plan.hybrid:
        done = _replica_all_reduce(s, slot, point, unit, reduced / ctx.shard, red)
    if host_offload(ctx):  # the reduced shard goes to host memory
        done = ("d2h", s.rank, s.step, slot.index, unit)
        s.out.append(offload.grads_to_host(ctx, s.c, s.step, point, done, a, params / ctx.shard, red))
    s.pending.append(done)
    if ctx.zero >= 2:
        s.sharded[(slot.stage.index, unit)] = True


def _replica_all_reduce(s: FsdpStep, slot: ActionSlot, point: Point, unit: int, shard_bytes: float, red: Key) -> Key:
    """Hybrid sharding: the unit's reduce-scattered gradient shard all-reduced across the replicas,
    after its reduce-scatter (FSDP2's ``foreach_reduce`` with an ``all_reduce_group``: the
    all-reduce stream waits for the reduce-scatter stream; the next unit's post-backward waits
    only for the reduce-scatter, so ``s.red`` stays on it). Approximation: FSDP2 runs it on its
    own all-reduce stream; here it runs on the DP stream, so the next unit's reduce-scatter
    queues behind it instead of sharing the links with it. Returns the all-reduce's key."""
    ctx = s.ctx
    key = ("grad_ar_replicas", s.rank, s.step, slot.index, unit)
    task = dp_collective(ctx, s.c, s.step, Collective.ALL_REDUCE, f"{unit_label(unit)}.grad_ar_replicas", shard_bytes,
                         slot.action, layer=unit, dim=ctx.plan.replicate_dim)
    s.out.append(Emit(point, task, key, (red,)))
    return key
