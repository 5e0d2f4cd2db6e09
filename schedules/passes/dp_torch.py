"""The data-parallel pass as the included trainer runs it (framework="torch"): FSDP2 units under
``torch.distributed.pipelining``.

The trainer wraps each transformer block in its own unit and the stage module (embedding, final
norm, head) in a root unit, with ``fully_shard`` (ZeRO-2: parameters kept unsharded after
forward; ZeRO-3: resharded) or ``replicate`` (ZeRO-0, and ZeRO-1 with a sharded optimizer).
Seen in its traces (torch 2.13, gloo) and in ``pipelining/stage.py``:

- Gradient reduction is deferred to the stage's ``REDUCE_GRAD`` (``perform_reduce_grad``),
  right after its last backward: unit by unit (root first), a post-backward copy of the unit's
  gradients on the compute stream (``fsdp::chunk_cat`` and a copy: 4 passes over them), then
  its all-reduce (replicate) or reduce-scatter (FSDP), which the next unit waits for (FSDP2
  keeps one reduction in flight; on CPUs it is done before the next copy starts). Then (with several
  micro-batches, and also without DP) the gradients are divided by the number of
  micro-batches, unit by unit (``scale_grads``). That is the pipelining runtime (the trainer,
  a one-stage pipeline even without PP, whose plans say ``overlap_grad_reduce=False``; any
  pp > 1). Without PP and with ``overlap_grad_reduce`` (the FSDP presets: torchtitan runs a
  plain ``loss.backward()``), FSDP's own post-backward hooks reduce each block's gradients as
  soon as its backward ends, under the next block's backward, and the root's in the final
  callback, in every micro-batch's backward (:func:`_reduces_in_hooks`); under PP too with
  ``plan.grad_sync="every-microbatch"`` (a stage module that is not itself an FSDP unit gets a
  regular backward from the pipelining stage).
- ZeRO-2/3 gather a unit's parameters right before the unit computes, when they are sharded
  (no prefetch in forward on CPUs; on accelerators and in backward the next block's gather is
  issued when a block starts, so it overlaps that block's compute (:func:`_prefetches`), except
  where collectives block their caller:
  gloo's all-gather without ``async_op``, as FSDP2's prefetch issues it, returns when done, so
  on CPU hosts the block starts after it; ``BuildOptions.gloo_host``), then copy them out of the gathered buffer on
  the compute stream (``foreach_all_gather_copy_out``: 2 passes over the unit's parameters). In
  backward the wait for the gather happens in the block's pre-backward hook, inside an autograd
  function: the trace shows it as compute, and so does the model (the copy-out spans the wait). A unit is sharded at the start of the step; after a forward ZeRO-3
  reshards it (every unit in the trainer; FSDP's default keeps the root, torchtitan the last
  block too: ``plan.fsdp_reshard_after_forward``, :func:`_reshards_after_forward`); after a
  backward that is not the last it stays unsharded; ``REDUCE_GRAD`` reshards it (and so does
  every backward whose hooks reduce). So ZeRO-2 gathers once per step (per micro-batch where the hooks reduce), ZeRO-3 before every backward and every forward
  that follows a forward; every step starts with every unit sharded.
- The optimizer (AdamW) steps unit by unit over the rank's parameters: all of them (ZeRO-0),
  the owned 1/N (ZeRO-1), or the 1/N shards (ZeRO-2/3), as ``plan.optimizer`` says (torch's
  AdamW: ``EAGER_ADAMW_PASSES`` over each fp32 parameter, :func:`schedules.stage_ops.adam_bytes_per_param`). ZeRO-1 then broadcasts each DP rank's
  updated parameters to the others (``profiler/trainer/zero1.py``, per DP rank: every rank
  flattens the owner's parameters into a new buffer, a blocking broadcast, a copy back).
- CPU offload (``plan.offload="optimizer"``, FSDP2's ``CPUOffloadPolicy``, ZeRO-2/3): the
  sharded parameters, gradients and optimizer states live in host memory. Before each
  all-gather the unit's parameter shard is copied host -> device (``param h2d``), after each
  reduce-scatter its gradient shard device -> host (``grad d2h``), both "offload" tasks in the
  ``memcpy`` lane priced as PCIe transfers on GPUs and as host memory copies at the DRAM
  bandwidth on a CPU host (``pcie_to_device``/``pcie_to_host``, see :mod:`sim.host_pricing`);
  the optimizer steps on the host (``cpu_adam``, ``host`` lane) after the last gradient copy,
  and nothing is copied back: the next all-gather fetches the updated shard. On a CPU device
  torch does not copy at all (``Tensor.to("cpu")`` returns the host tensor) and the "host"
  optimizer is the same cores' optimizer: the simulator prices those copies at zero and the
  host optimizer as the device's (:meth:`sim.pricing.TaskCoster._on_host_device`).
- Routed experts (MoE with expert parallelism) are their own unit over the expert-data-parallel
  group (the trainer's ``fully_shard``/``replicate`` over edp): their gradients are reduced after
  the stage's other units (:mod:`schedules.passes.ep_dp`) and the optimizer steps them last. The
  trainer's EDP group is dp / ep ranks (EP ranks are DP ranks): with one rank nothing is reduced
  over it and nothing sharded. Under TP the MoE parameters' partial gradients are all-reduced
  over TP one parameter at a time around the layer's unit (:func:`_moe_tp_sums`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import invalid
from core.groups import DP, TP
from core.taskgraph import Op, Task, collective_op
from core.vocab import Collective, Kind, Lane, Offload, OpClass, Phase
from schedules.actions import Action
from schedules.moe import is_moe_layer
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from schedules.passes import ep_dp, offload
from schedules.passes.dp import dp_collective
from schedules.passes.program import (
    PREV_COMPUTE,
    STEP_END,
    ActionSlot,
    Alias,
    BuildContext,
    Coords,
    Dep,
    Edge,
    Emit,
    Hold,
    Key,
    Point,
    Record,
    after_action,
    after_block,
    before_block,
    block_key,
    optimizer_key,
    pass_layers,
    step_end_key,
)
from schedules.plan import ParallelPlan
from schedules.stage_ops import adam_bytes_per_param
from schedules.stages import StageInfo

ROOT = -1  # unit id of the stage's root (embedding, final norm, head)
POST_BACKWARD_TOUCHES = 4  # reads+writes of a unit's gradient bytes in FSDP's post-backward copy/scale
COPY_OUT_TOUCHES = 2  # read the gathered buffer, write the unsharded parameters
COPY_IN_TOUCHES = 2  # read the parameter shard, write it into the all-gather buffer
# Buffers the copies write that are freshly allocated (first touch: page faults on a CPU host,
# op class "alloc"), in units of the bytes they cover; read off the torch 2.13 traces:
# replicate's post-backward writes two new unit-sized buffers (fsdp::chunk_cat, then a copy_),
# fully_shard's one (fsdp::chunk_cat; the reduce-scatter's own copy is inside the collective);
# the copy-in writes its shard into a new all-gather buffer (whose other shards the all-gather
# itself writes first). The copy-out (``fsdp::split_with_sizes_copy``, 3-5 ms per 11.8 MB block,
# the streaming time) finds the unsharded parameters' storage, re-allocated at the same size after
# every reshard, already touched.
POST_BACKWARD_FRESH = {"replicate": 2, "fully_shard": 1}


def blocks(ctx: BuildContext, stage: StageInfo, a: Action) -> tuple[tuple[int, ...], ...]:
    """One block per layer with ZeRO-2/3 (each unit gathers before it computes), else one."""
    layers = pass_layers(stage, a.phase)
    if ctx.zero >= 2 and layers:
        return tuple((layer,) for layer in layers)
    return (layers,) if layers else ((),)


def units(stage: StageInfo) -> list[tuple[int, float]]:
    """(unit, parameters) of a stage: the root (if it holds any) then the blocks in order."""
    root = stage.embedding_params_local + stage.head_params_local
    return ([(ROOT, root)] if root > 0 else []) + [(layer, stage.layer_params_local) for layer in stage.layers]


def _label(unit: int) -> str:
    return "root" if unit == ROOT else f"L{unit}"


def _host_offload(ctx: BuildContext) -> bool:
    """FSDP2's CPUOffloadPolicy is in effect (ZeRO-2/3 with DP)."""
    return ctx.plan.offload != Offload.NONE and ctx.zero >= 2


@dataclass
class _Step:
    """One rank's step as the pass walks it: which units are sharded, which gathers are issued
    and not yet copied out, how many backwards each stage ran, the reductions the optimizer waits for."""

    ctx: BuildContext
    c: Coords
    step: int
    sharded: dict[tuple[int, int] | tuple[int, int, str], bool] = field(default_factory=dict)
    issued: dict[tuple[int, int], Key] = field(default_factory=dict)
    backwards: dict[int, int] = field(default_factory=dict)
    pending: list[Key] = field(default_factory=list)
    red: Key | None = None  # the latest reduction issued (the next post-backward copy waits for it)
    out: list[Record] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.ctx.rank(self.c)


def dp_torch_records(ctx: BuildContext, c: Coords, step: int, slots: tuple[ActionSlot, ...]) -> list[Record]:
    """The FSDP2/replicate tasks of rank ``c``'s ``step`` and its optimizer step."""
    if ctx.plan.grad_sync == "every-microbatch" and ctx.split:
        raise invalid("grad_sync", ctx.plan.grad_sync, "FSDP's hooks with a split backward (B then W) are not "
                      f"modelled: use a schedule without split backward, not {ctx.plan.schedule}")
    s = _Step(ctx, c, step)
    for slot in slots:
        hooks = _reduces_in_hooks(s, slot)
        reductions_from = len(s.pending)
        for b, layers in enumerate(slot.blocks):
            _before_block(s, slot, b, layers)
            if ctx.zero == 3 and slot.action.phase == Phase.F:  # FSDP reshards after forward
                for unit, _ in units(slot.stage):
                    if (unit in layers or unit == ROOT) and _reshards_after_forward(ctx, unit):
                        s.sharded[(slot.stage.index, unit)] = True
                        s.sharded[_experts_state(slot.stage, unit)] = True
            if hooks:  # the block's post-backward hook reduces its gradients as its backward ends
                params = dict(units(slot.stage))
                for unit in layers:
                    _reduce_unit(s, slot, after_block(slot.index, b), unit, params[unit])
                    _gloo_blocks(s, slot, after_block(slot.index, b), unit)
        _after_action(s, slot, hooks, reductions_from)
    _step_end(s)
    return s.out


def _reshards_after_forward(ctx: BuildContext, unit: int) -> bool:
    """:func:`reshards_after_forward` for this build's plan and model."""
    return reshards_after_forward(ctx.plan, ctx.model.num_layers, unit)


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


def _before_block(s: _Step, slot: ActionSlot, b: int, layers: tuple[int, ...]) -> None:
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
        last = _copy_out(s, slot, point, _label(unit), unit, unit_params[unit], gather,
                         ("copy_out", s.rank, s.step, slot.index, unit))
    for unit, gather in zip(wanted, experts, strict=True):
        if gather is not None:
            last = _copy_out(s, slot, point, f"{_label(unit)}.experts", unit, ep_dp.block_expert_params(ctx, (unit,)),
                             gather, ("experts_copy_out", s.rank, s.step, slot.index, unit))
    if prefetch is not None and ctx.options.gloo_host:
        # gloo: the prefetch's all-gather (no async_op) returns when done, inside the hook;
        # one op's dispatch for the hook itself, the span stretches over the wait, as traced
        op = Op(Lane.COMPUTE, Kind.BWD, f"{_label(order[nxt])}.prefetch_wait", OpClass.ELEMENTWISE, bytes=0.0,
                layer=order[nxt])
        last = ("prefetch_wait", s.rank, s.step, slot.index, b)
        s.out += [Emit(point, _task(s, slot, Kind.BWD, op), last), Hold(point, last, prefetch)]
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


def _task(s: _Step, slot: ActionSlot, kind: Kind, *ops: Op, name: str | None = None) -> Task:
    """A compute-stream task of ``ops`` labelled with ``slot``'s action and the first op's layer."""
    a = slot.action
    return Task(rank=s.rank, lane=Lane.COMPUTE, kind=kind, name=name or ops[0].name, ops=ops, step=s.step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=ops[0].layer)


def _gather(s: _Step, slot: ActionSlot, point: Point, unit: int, params: float) -> Key | None:
    """Issue the all-gather of ``unit`` after the rank's latest compute, if it is sharded and not
    issued yet: its shard's copy into a new buffer (compute stream), then the collective."""
    ctx, a = s.ctx, slot.action
    state = (slot.stage.index, unit)
    if not s.sharded.get(state, True) or state in s.issued:
        return None
    after: Dep = PREV_COMPUTE
    if _host_offload(ctx):  # the shard comes from host memory first
        fetch_key = ("fetch", s.rank, s.step, slot.index, unit)
        s.out += offload.fetch_params(ctx, s.c, s.step, point, fetch_key, a, params / ctx.shard, after, unit)
        after = fetch_key
    shard_bytes = ctx.plan.param_gather_bytes * params / ctx.shard
    copy_in = _copy_in(s, slot, point, _label(unit), unit, shard_bytes, after,
                       ("copy_in", s.rank, s.step, slot.index, unit))
    # the rest of the new all-gather buffer is first written by the collective itself
    dim = ctx.plan.shard_dim  # hybrid sharding: inside the replica
    fill = (Op(Lane.DP, Kind.ALL_GATHER, f"{_label(unit)}.param_ag.alloc", OpClass.ALLOC, dim=dim, layer=unit,
               bytes=ctx.plan.param_gather_bytes * params - shard_bytes),)
    gather = ("fsdp_ag", s.rank, s.step, slot.index, unit)
    task = dp_collective(ctx, s.c, s.step, Collective.ALL_GATHER, f"{_label(unit)}.param_ag",
                         ctx.plan.param_gather_bytes * params, a, layer=unit, before=fill, dim=dim)
    s.out.append(Emit(point, task, gather, (copy_in,)))
    s.issued[state] = gather
    s.sharded[state] = False
    return gather


def trainer_edp(ctx: BuildContext) -> int:
    """Ranks of the trainer's (and AutoModel's) expert-data-parallel group, over which a
    layer's routed experts are their own FSDP unit: dp / ep (EP ranks are DP ranks:
    ``profiler/trainer/moe_parallel.py``; AutoModel's ``ep_shard`` mesh dimension, dp / ep:
    nemo_automodel/components/distributed/fsdp2.py @ 01926a5c). 1 for a dense model."""
    return ctx.plan.dp // ctx.plan.ep if ctx.model.moe is not None else 1


def _experts_state(stage: StageInfo, unit: int) -> tuple[int, int, str]:
    """The sharding-state key of layer ``unit``'s experts unit."""
    return (stage.index, unit, "experts")


def _gather_experts(s: _Step, slot: ActionSlot, point: Point, unit: int) -> Key | None:
    """ZeRO-2/3 with an expert-data-parallel group of more than one rank: all-gather MoE layer
    ``unit``'s routed experts over it when they are sharded (its shard's copy into a new
    buffer, then the collective). FSDP2 issues it from the experts module's own pre-forward
    (pre-backward) hook, which the host reaches only inside the layer, after the router and the
    dispatch (whose token counts it waits for under DeepEP and Megatron's all-to-all
    dispatcher), so nothing prefetches it: the block waits for it. Returns the gather's key."""
    ctx, a = s.ctx, slot.action
    state = _experts_state(slot.stage, unit)
    edp = trainer_edp(ctx)
    if (unit == ROOT or edp <= 1 or not is_moe_layer(ctx.model, unit) or not ep_dp.active(ctx)
            or not s.sharded.get(state, True)):
        return None
    params = ep_dp.block_expert_params(ctx, (unit,))
    copy_in = _copy_in(s, slot, point, f"{_label(unit)}.experts", unit, ctx.plan.param_gather_bytes * params / edp,
                       PREV_COMPUTE, ("experts_copy_in", s.rank, s.step, slot.index, unit))
    gather = ("experts_ag", s.rank, s.step, slot.index, unit)
    task = ep_dp.edp_collective(ctx, s.c, s.step, Collective.ALL_GATHER, f"{_label(unit)}.experts.param_ag",
                                ctx.plan.param_gather_bytes * params, a, layer=unit)
    s.out.append(Emit(point, task, gather, (copy_in,)))
    s.sharded[state] = False
    return gather


def _copy_in(s: _Step, slot: ActionSlot, point: Point, label: str, unit: int, shard_bytes: float, after: Dep,
             key: Key) -> Key:
    """A unit's shard copied into a new all-gather buffer on the compute stream, after
    ``after`` (``label``: the unit's name, a block's or its experts'); returns ``key``."""
    kind = Kind.FWD if slot.action.phase == Phase.F else Kind.BWD
    name = f"{label}.param_copy_in"
    ops = (Op(Lane.COMPUTE, kind, name, OpClass.ELEMENTWISE, bytes=COPY_IN_TOUCHES * shard_bytes, layer=unit),
           Op(Lane.COMPUTE, kind, f"{name}.alloc", OpClass.ALLOC, bytes=shard_bytes, layer=unit))
    s.out.append(Emit(point, _task(s, slot, kind, *ops), key, (after,)))
    return key


def _copy_out(s: _Step, slot: ActionSlot, point: Point, label: str, unit: int, params: float, gather: Key,
              key: Key) -> Key:
    """A unit's ``params`` copied out of their gathered buffer on the compute stream after
    ``gather``; in backward the pre-backward hook runs inside autograd, so its wait for the
    gather is a compute span. Returns ``key``."""
    kind = Kind.FWD if slot.action.phase == Phase.F else Kind.BWD
    op = Op(Lane.COMPUTE, kind, f"{label}.param_copy", OpClass.ELEMENTWISE,
            bytes=COPY_OUT_TOUCHES * s.ctx.plan.element_bytes * params, layer=unit)
    if slot.action.phase == Phase.F:
        s.out.append(Emit(point, _task(s, slot, kind, op), key, (gather,)))
    else:
        s.out += [Emit(point, _task(s, slot, kind, op), key), Hold(point, key, gather)]
    return key


def _reduces_in_hooks(s: _Step, slot: ActionSlot) -> bool:
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


def _after_action(s: _Step, slot: ActionSlot, hooks: bool, reductions_from: int) -> None:
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
        _gloo_blocks(s, slot, point, ROOT)
        _final_callback_wait(s, slot, point, reductions_from)
    if s.backwards[a.stage] < m:
        return
    if ctx.dp_active and not hooks:
        s.red = None  # each stage module is its own FSDP root, with its own reduction in flight
        _reduce(s, slot, point, units(slot.stage))
        _final_callback_wait(s, slot, point, reductions_from)
    if m > 1:
        share = ctx.shard if ctx.zero >= 2 else 1
        ops = tuple(Op(Lane.COMPUTE, Kind.BWD, f"{_label(u)}.grad_scale", OpClass.ELEMENTWISE,
                       bytes=2 * ctx.plan.element_bytes * params / share, layer=u) for u, params in units(slot.stage))
        task = Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.BWD, name="grad_scale", ops=ops, step=s.step,
                    stage=a.stage, chunk=a.chunk)
        s.out.append(Emit(point, task))


def _final_callback_wait(s: _Step, slot: ActionSlot, point: Point, reductions_from: int) -> None:
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
    s.out.append(Emit(point, _task(s, slot, Kind.BWD, op), None, reductions))


def _gloo_blocks(s: _Step, slot: ActionSlot, point: Point, unit: int) -> None:
    """On a CPU host (gloo) the hook's reduce-scatter, called without ``async_op`` (FSDP2
    ``foreach_reduce``), returns when done: the backward goes on only then (a wait span on
    the compute stream, as for the gloo prefetch)."""
    if not s.ctx.options.gloo_host or s.red is None:
        return
    op = Op(Lane.COMPUTE, Kind.BWD, f"{_label(unit)}.reduce_wait", OpClass.ELEMENTWISE, bytes=0.0, layer=unit)
    wait = ("reduce_wait", s.rank, s.step, slot.index, unit)
    s.out += [Emit(point, _task(s, slot, Kind.BWD, op), wait), Hold(point, wait, s.red)]


def _reduce(s: _Step, slot: ActionSlot, point: Point, todo: list[tuple[int, float]]) -> None:
    """Each unit of ``todo`` in turn: its post-backward copy, then its all-reduce /
    reduce-scatter (asynchronous); then the experts' own unit (over EDP, none where the
    trainer's EDP group is one rank); under TP an MoE layer's TP gradient sums around its unit
    (:func:`_moe_tp_sums`)."""
    for unit, params in todo:
        _moe_tp_sums(s, slot, point, unit, experts=False)
        _reduce_unit(s, slot, point, unit, params)
        _moe_tp_sums(s, slot, point, unit, experts=True)
    if s.ctx.model.moe is not None and trainer_edp(s.ctx) == 1:
        return  # the trainer's EDP groups have one rank
    experts = ep_dp.reductions(s.ctx, s.c, s.step, point, ("expert_grad", s.rank, s.step, slot.index), slot.action,
                               slot.stage.layers, () if s.red is None else (s.red,))  # over EDP
    s.out += experts
    s.pending += [e.key for e in experts if isinstance(e, Emit)]
    if s.ctx.zero >= 2:  # the stage's experts units, reduced together above, are sharded again
        for layer in slot.stage.layers:
            s.sharded[_experts_state(slot.stage, layer)] = True


def _moe_tp_sums(s: _Step, slot: ActionSlot, point: Point, unit: int, *, experts: bool) -> None:
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
    moe = ctx.model.moe
    if moe is None or ctx.plan.tp == 1 or unit == ROOT or not is_moe_layer(ctx.model, unit):
        return
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
        s.out.append(Emit(point, task, key, () if s.red is None else (s.red,)))
        s.red = key
        s.pending.append(key)


def _reduce_unit(s: _Step, slot: ActionSlot, point: Point, unit: int, params: float) -> None:
    """``unit``'s post-backward copy on the compute stream, after the previous reduction (FSDP2
    keeps one in flight: ``post_backward`` makes the compute stream wait for the last
    reduce-scatter's event), then its all-reduce / reduce-scatter; the unit is sharded again."""
    ctx, a = s.ctx, slot.action
    kind = Collective.ALL_REDUCE if ctx.zero <= 1 else Collective.REDUCE_SCATTER
    wrapper = "replicate" if ctx.zero <= 1 else "fully_shard"
    label, grad_bytes = _label(unit), ctx.plan.element_bytes * params
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
    if _host_offload(ctx):  # the reduced shard goes to host memory
        done = ("d2h", s.rank, s.step, slot.index, unit)
        s.out.append(offload.grads_to_host(ctx, s.c, s.step, point, done, a, params / ctx.shard, red))
    s.pending.append(done)
    if ctx.zero >= 2:
        s.sharded[(slot.stage.index, unit)] = True


def _replica_all_reduce(s: _Step, slot: ActionSlot, point: Point, unit: int, shard_bytes: float, red: Key) -> Key:
    """Hybrid sharding: the unit's reduce-scattered gradient shard all-reduced across the replicas,
    after its reduce-scatter (FSDP2's ``foreach_reduce`` with an ``all_reduce_group``: the
    all-reduce stream waits for the reduce-scatter stream; the next unit's post-backward waits
    only for the reduce-scatter, so ``s.red`` stays on it). Approximation: FSDP2 runs it on its
    own all-reduce stream; here it runs on the DP stream, so the next unit's reduce-scatter
    queues behind it instead of sharing the links with it. Returns the all-reduce's key."""
    ctx = s.ctx
    key = ("grad_ar_replicas", s.rank, s.step, slot.index, unit)
    task = dp_collective(ctx, s.c, s.step, Collective.ALL_REDUCE, f"{_label(unit)}.grad_ar_replicas", shard_bytes,
                         slot.action, layer=unit, dim=ctx.plan.replicate_dim)
    s.out.append(Emit(point, task, key, (red,)))
    return key


def _step_end(s: _Step) -> None:
    """AdamW unit by unit after every reduction; ZeRO-1 then broadcasts the updated shards."""
    ctx = s.ctx
    stages = ctx.rank_stages(s.c)
    share = ctx.shard if ctx.zero >= 1 else 1
    key = optimizer_key(s.rank, s.step)
    deps = tuple(s.pending)
    if _host_offload(ctx):
        _host_optimizer(s, stages, key, deps)
        s.out.append(Alias(step_end_key(s.rank, s.step), key))
        return
    ops = tuple(Op(Lane.COMPUTE, Kind.OPTIMIZER, f"optimizer.{_label(u)}", OpClass.OPTIMIZER,
                   bytes=adam_bytes_per_param(ctx.plan, host_loop=ctx.options.gloo_host) * params / share)
                for stage in stages for u, params in units(stage))
    experts = ep_dp.optimizer_params(ctx, stages)
    if ctx.model.moe is not None and trainer_edp(ctx) == 1:  # the trainer's EDP: one rank
        experts = sum(stage.expert_params_local for stage in stages)  # its experts unit is not sharded
    if experts > 0:
        ops += (Op(Lane.COMPUTE, Kind.OPTIMIZER, "optimizer.experts", OpClass.OPTIMIZER,
                   bytes=adam_bytes_per_param(ctx.plan, host_loop=ctx.options.gloo_host) * experts),)
    s.out.append(Emit(STEP_END, Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name="optimizer",
                                     ops=ops, step=s.step), key, deps))
    end = _zero1_broadcasts(s, stages, key) if ctx.zero == 1 else key
    s.out.append(Alias(step_end_key(s.rank, s.step), end))


def _zero1_broadcasts(s: _Step, stages: list[StageInfo], after: Key) -> Key:
    """ZeRO-1: per owner DP rank, flatten its updated shard into a new buffer, broadcast it
    (blocking), copy it back; returns the last copy's key."""
    ctx = s.ctx
    shard_bytes = ctx.plan.element_bytes * sum(stage.params_local for stage in stages) / ctx.shard
    a = Action(stage=stages[0].index, phase=Phase.F, microbatch=-1, chunk=0)
    last = after
    for owner in range(ctx.shard):
        flatten = (Op(Lane.COMPUTE, Kind.OPTIMIZER, f"param_flatten dp{owner}", OpClass.ELEMENTWISE,
                      bytes=COPY_IN_TOUCHES * shard_bytes),
                   Op(Lane.COMPUTE, Kind.OPTIMIZER, f"param_flatten dp{owner}.alloc", OpClass.ALLOC, bytes=shard_bytes))
        flat = ("flatten", s.rank, s.step, owner)
        s.out.append(Emit(STEP_END, Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name=flatten[0].name,
                                         ops=flatten, step=s.step), flat, (last,)))
        bcast = ("bcast", s.rank, s.step, owner)
        task = dp_collective(ctx, s.c, s.step, Collective.BROADCAST, f"param_bcast from dp{owner}", shard_bytes, a)
        s.out.append(Emit(STEP_END, task, bcast, (flat,)))
        unflatten = Op(Lane.COMPUTE, Kind.OPTIMIZER, f"param_unflatten dp{owner}", OpClass.ELEMENTWISE,
                       bytes=COPY_OUT_TOUCHES * shard_bytes)
        last = ("unflatten", s.rank, s.step, owner)
        s.out.append(Emit(STEP_END, Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name=unflatten.name,
                                         ops=(unflatten,), step=s.step), last, (bcast,)))
    return last


def _host_optimizer(s: _Step, stages: list[StageInfo], key: Key, deps: tuple[Dep, ...]) -> None:
    """CPU offload: the optimizer steps on the host over the rank's shards, unit by unit,
    after the last gradient copy; nothing goes back (the next all-gathers fetch the shards).
    Where the ranks are CPU processes (``gloo_host``) the host is the device: the step is the
    rank's own compute (its compute stream, on the node's cores), as its trace shows it."""
    ctx = s.ctx
    lane = Lane.COMPUTE if ctx.options.gloo_host else Lane.HOST
    ops = tuple(Op(lane, Kind.OPTIMIZER, f"optimizer.{_label(u)}", OpClass.CPU_ADAM,
                   bytes=CPU_ADAM_BYTES_PER_PARAM * params / ctx.shard)
                for stage in stages for u, params in units(stage))
    task = Task(rank=s.rank, lane=lane, kind=Kind.OPTIMIZER, name="cpu optimizer", ops=ops, step=s.step)
    s.out.append(Emit(STEP_END, task, key, deps))
