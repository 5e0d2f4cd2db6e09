"""ZeRO-2/3 under FSDP2 (:mod:`schedules.passes.dp_torch`): a unit's parameters gathered before
it computes (prefetched where FSDP does), copied in and out of the all-gather buffer on the
compute stream, and resharded after forward as the plan says."""

from __future__ import annotations

from core.taskgraph import Op
from core.vocab import Collective, Kind, Lane, OpClass, Phase
from schedules.moe import is_moe_layer
from schedules.passes import ep_dp, offload
from schedules.passes.dp import dp_collective
from schedules.passes.fsdp_state import (
    COPY_IN_TOUCHES,
    COPY_OUT_TOUCHES,
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
    PREV_COMPUTE,
    ActionSlot,
    BuildContext,
    Dep,
    Edge,
    Emit,
    Hold,
    Key,
    Point,
    before_block,
    block_key,
    pass_layers,
)
from schedules.plan import ParallelPlan


def unit_reshards_after_forward(ctx: BuildContext, unit: int) -> bool:
    """:func:`reshards_after_forward` for this build's plan and model."""
    return reshards_after_forward(ctx.plan, ctx.model.num_layers, unit)


def reshard_after_forward(s: FsdpStep, slot: ActionSlot, layers: tuple[int, ...]) -> None:
    """ZeRO-3, after a forward block: the block's units (and the root) that FSDP reshards are
    sharded again (:func:`reshards_after_forward`), and their experts' units."""
    if s.ctx.zero != 3 or slot.action.phase != Phase.F:
        return
    for unit, _ in units(slot.stage):
        if (unit in layers or unit == ROOT) and unit_reshards_after_forward(s.ctx, unit):
            s.sharded[(slot.stage.index, unit)] = True
            s.sharded[experts_state(slot.stage, unit)] = True


def reshards_after_forward(plan: ParallelPlan, num_layers: int, unit: int) -> bool:
    """ZeRO-3: whether ``unit`` frees its gathered parameters after its forward
    (``plan.fsdp_reshard_after_forward``), so that its next backward (or forward) gathers again.

    - "all": every unit, the root too: the included trainer passes ``reshard_after_forward=True``
      to every ``fully_shard``, and torch 2.13 exempts the root only when the argument is left
      unset (``FSDPState._lazy_init``: ``if self._auto_reshard_after_forward``), as its traces
      show (the root gathered again before the backward).
    - "non-root": FSDP's default: the root keeps its parameters for the backward that follows:
      FSDP2 ``FSDPState._lazy_init`` ("For the root, do not reshard after forward since for
      training, the parameters would be freed and all-gathered immediately":
      torch/distributed/_composable/fsdp/_fsdp_state.py@005da465, unconditional in 2024), FSDP1
      ``_post_forward_reshard`` (``free_unsharded_flat_param = not state._is_root and ...``).
    - "torchtitan": also the model's last block without PP (``reshard_after_forward =
      int(layer_id) < len(model.layers) - 1``: "FSDP would prefetch it immediately"), and no unit
      at all with PP (``reshard_after_forward = False`` per block, ``not pp_enabled`` for the
      root): ``apply_fsdp`` in torchtitan parallelisms/parallelize_llama.py@9dec370."""
    mode = plan.fsdp_reshard_after_forward
    if mode == "all":
        return True
    if unit == ROOT:
        return False
    if mode == "torchtitan":
        return plan.pp == 1 and unit != num_layers - 1
    return True


def gather_before_block(s: FsdpStep, slot: ActionSlot, b: int, layers: tuple[int, ...]) -> None:
    """ZeRO-2/3: gather the (root and) block's units that are sharded, and copy them out of the
    gathered buffer on the compute stream; in backward (ZeRO-3) also prefetch the next block's
    gather. The block waits for the last copy-out."""
    ctx, a = s.ctx, slot.action
    if not (ctx.zero >= 2 and a.phase in (Phase.F, Phase.B)):
        return
    point = before_block(slot.index, b)
    order = pass_layers(slot.stage, a.phase)
    unit_params = dict(units(slot.stage))
    first_block = layers[:1] == order[:1]
    wanted = ([ROOT] if first_block and ROOT in unit_params else []) + [u for u in layers if u in unit_params]
    for unit in wanted:
        _gather(s, slot, point, unit, unit_params[unit])
    experts = [_gather_experts(s, slot, point, unit) for unit in wanted]
    prefetch: Key | None = None
    nxt = order.index(layers[-1]) + 1 if layers else len(order)
    if nxt < len(order) and _prefetches(ctx, a.phase):
        prefetch = _gather(s, slot, point, order[nxt], unit_params[order[nxt]])
    last: Key | None = None
    for unit in wanted:
        gather = s.issued.pop((slot.stage.index, unit), None)
        if gather is None:
            continue
        last = _copy_out(s, slot, point, unit_label(unit), unit, unit_params[unit], gather,
                         ("copy_out", s.rank, s.step, slot.index, unit))
    for unit, gather in zip(wanted, experts, strict=True):
        if gather is not None:
            last = _copy_out(s, slot, point, f"{unit_label(unit)}.experts", unit, ep_dp.block_expert_params(ctx, (unit,)),
                             gather, ("experts_copy_out", s.rank, s.step, slot.index, unit))
    if prefetch is not None and ctx.options.gloo_host:
        # gloo: the prefetch's all-gather (no async_op) returns when done, inside the hook;
        # one op's dispatch for the hook itself, the span stretches over the wait, as traced
        op = Op(Lane.COMPUTE, Kind.BWD, f"{unit_label(order[nxt])}.prefetch_wait", OpClass.ELEMENTWISE, bytes=0.0,
                layer=order[nxt])
        last = ("prefetch_wait", s.rank, s.step, slot.index, b)
        s.out += [Emit(point, compute_task(s, slot, Kind.BWD, op), last), Hold(point, last, prefetch)]
    if last is not None:
        s.out.append(Edge(point, block_key(s.rank, s.step, slot.index, b), last))


def _prefetches(ctx: BuildContext, phase: str) -> bool:
    """Whether a block issues the next block's all-gather when it starts. Backward (ZeRO-3):
    FSDP2's explicit backward prefetch. Forward (ZeRO-2/3) on an accelerator: FSDP's implicit
    forward prefetching ("always enabled": the all-gathers run on their own stream, so block
    i + 1's overlaps block i's compute although the CPU issues it afterwards; FSDP2 allows two
    all-gather outputs alive at once: PyTorch docs, notes/fsdp.rst "FSDP Prefetch Nuances";
    pytorch#128884). Not on CPU hosts, where the host is the device: the gather is issued when
    the block is reached and nothing runs ahead (the trainer's gloo traces)."""
    if phase == Phase.B:
        return ctx.zero == 3
    return phase == Phase.F and ctx.zero >= 2 and not ctx.options.gloo_host


def _gather(s: FsdpStep, slot: ActionSlot, point: Point, unit: int, params: float) -> Key | None:
    """Issue the all-gather of ``unit`` after the rank's latest compute, if it is sharded and not
    issued yet: its shard's copy into a new buffer (compute stream), then the collective."""
    ctx, a = s.ctx, slot.action
    state = (slot.stage.index, unit)
    if not s.sharded.get(state, True) or state in s.issued:
        return None
    after: Dep = PREV_COMPUTE
    if host_offload(ctx):  # the shard comes from host memory first
        fetch_key = ("fetch", s.rank, s.step, slot.index, unit)
        s.out += offload.fetch_params(ctx, s.c, s.step, point, fetch_key, a, params / ctx.shard, after, unit)
        after = fetch_key
    shard_bytes = ctx.plan.param_gather_bytes * params / ctx.shard
    copy_in = _copy_in(s, slot, point, unit_label(unit), unit, shard_bytes, after,
                       ("copy_in", s.rank, s.step, slot.index, unit))
    # the rest of the new all-gather buffer is first written by the collective itself
    dim = ctx.plan.shard_dim  # hybrid sharding: inside the replica
    fill = (Op(Lane.DP, Kind.ALL_GATHER, f"{unit_label(unit)}.param_ag.alloc", OpClass.ALLOC, dim=dim, layer=unit,
               bytes=ctx.plan.param_gather_bytes * params - shard_bytes),)
    gather = ("fsdp_ag", s.rank, s.step, slot.index, unit)
    task = dp_collective(ctx, s.c, s.step, Collective.ALL_GATHER, f"{unit_label(unit)}.param_ag",
                         ctx.plan.param_gather_bytes * params, a, layer=unit, before=fill, dim=dim)
    s.out.append(Emit(point, task, gather, (copy_in,)))
    s.issued[state] = gather
    s.sharded[state] = False
    return gather


def _gather_experts(s: FsdpStep, slot: ActionSlot, point: Point, unit: int) -> Key | None:
    """ZeRO-2/3 with an expert-data-parallel group of more than one rank: all-gather MoE layer
    ``unit``'s routed experts over it when they are sharded (its shard's copy into a new
    buffer, then the collective). FSDP2 issues it from the experts module's own pre-forward
    (pre-backward) hook, which the host reaches only inside the layer, after the router and the
    dispatch (whose token counts it waits for under DeepEP and Megatron's all-to-all
    dispatcher), so nothing prefetches it: the block waits for it. Returns the gather's key."""
    ctx, a = s.ctx, slot.action
    state = experts_state(slot.stage, unit)
    edp = trainer_edp(ctx)
    if (unit == ROOT or edp <= 1 or not is_moe_layer(ctx.model, unit) or not ep_dp.active(ctx)
            or not s.sharded.get(state, True)):
        return None
    params = ep_dp.block_expert_params(ctx, (unit,))
    copy_in = _copy_in(s, slot, point, f"{unit_label(unit)}.experts", unit, ctx.plan.param_gather_bytes * params / edp,
                       PREV_COMPUTE, ("experts_copy_in", s.rank, s.step, slot.index, unit))
    gather = ("experts_ag", s.rank, s.step, slot.index, unit)
    task = ep_dp.edp_collective(ctx, s.c, s.step, Collective.ALL_GATHER, f"{unit_label(unit)}.experts.param_ag",
                                ctx.plan.param_gather_bytes * params, a, layer=unit)
    s.out.append(Emit(point, task, gather, (copy_in,)))
    s.sharded[state] = False
    return gather


def _copy_in(s: FsdpStep, slot: ActionSlot, point: Point, label: str, unit: int, shard_bytes: float, after: Dep,
             key: Key) -> Key:
    """A unit's shard copied into a new all-gather buffer on the compute stream, after
    ``after`` (``label``: the unit's name, a block's or its experts'); returns ``key``."""
    kind = Kind.FWD if slot.action.phase == Phase.F else Kind.BWD
    name = f"{label}.param_copy_in"
    ops = (Op(Lane.COMPUTE, kind, name, OpClass.ELEMENTWISE, bytes=COPY_IN_TOUCHES * shard_bytes, layer=unit),
           Op(Lane.COMPUTE, kind, f"{name}.alloc", OpClass.ALLOC, bytes=shard_bytes, layer=unit))
    s.out.append(Emit(point, compute_task(s, slot, kind, *ops), key, (after,)))
    return key


def _copy_out(s: FsdpStep, slot: ActionSlot, point: Point, label: str, unit: int, params: float, gather: Key,
              key: Key) -> Key:
    """A unit's ``params`` copied out of their gathered buffer on the compute stream after
    ``gather``; in backward the pre-backward hook runs inside autograd, so its wait for the
    gather is a compute span. Returns ``key``."""
    kind = Kind.FWD if slot.action.phase == Phase.F else Kind.BWD
    op = Op(Lane.COMPUTE, kind, f"{label}.param_copy", OpClass.ELEMENTWISE,
            bytes=COPY_OUT_TOUCHES * s.ctx.plan.element_bytes * params, layer=unit)
    if slot.action.phase == Phase.F:
        s.out.append(Emit(point, compute_task(s, slot, kind, op), key, (gather,)))
    else:
        s.out += [Emit(point, compute_task(s, slot, kind, op), key), Hold(point, key, gather)]
    return key
