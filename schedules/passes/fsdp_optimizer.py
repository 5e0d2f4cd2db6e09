"""The optimizer step under FSDP2 and replicate (:mod:`schedules.passes.dp_torch`): AdamW unit by
unit after every reduction, ZeRO-1's broadcasts of the updated shards, or under CPU offload the
host's optimizer."""

from __future__ import annotations

from core.taskgraph import Op, Task
from core.vocab import Collective, Kind, Lane, OpClass, Phase
from schedules.actions import Action
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from schedules.passes import ep_dp
from schedules.passes.dp import dp_collective
from schedules.passes.fsdp_state import (
    COPY_IN_TOUCHES,
    COPY_OUT_TOUCHES,
    FsdpStep,
    host_offload,
    trainer_edp,
    unit_label,
    units,
)
from schedules.passes.program import STEP_END, Alias, Dep, Emit, Key, optimizer_key, step_end_key
from schedules.stage_ops import adam_bytes_per_param
from schedules.stages import StageInfo


def optimizer_step(s: FsdpStep) -> None:
    """AdamW unit by unit after every reduction; ZeRO-1 then broadcasts the updated shards."""
    ctx = s.ctx
    stages = ctx.rank_stages(s.c)
    share = ctx.shard if ctx.zero >= 1 else 1
    key = optimizer_key(s.rank, s.step)
    deps = tuple(s.pending)
    if host_offload(ctx):
        _host_optimizer(s, stages, key, deps)
        s.out.append(Alias(step_end_key(s.rank, s.step), key))
        return
    ops = tuple(Op(Lane.COMPUTE, Kind.OPTIMIZER, f"optimizer.{unit_label(u)}", OpClass.OPTIMIZER,
                   bytes=adam_bytes_per_param(ctx.plan, host_loop=ctx.options.gloo_host) * params / share)
                for stage in stages for u, params in units(stage))
    experts = ep_dp.optimizer_params(ctx, stages)
    if trainer_edp(ctx) == 1:  # the trainer's EDP: one rank (a dense model's: no experts, 0)
        experts = sum(stage.expert_params_local for stage in stages)  # its experts unit is not sharded
    if experts > 0:
        ops += (Op(Lane.COMPUTE, Kind.OPTIMIZER, "optimizer.experts", OpClass.OPTIMIZER,
                   bytes=adam_bytes_per_param(ctx.plan, host_loop=ctx.options.gloo_host) * experts),)
    s.out.append(Emit(STEP_END, Task(rank=s.rank, lane=Lane.COMPUTE, kind=Kind.OPTIMIZER, name="optimizer",
                                     ops=ops, step=s.step), key, deps))
    end = _zero1_broadcasts(s, stages, key) if ctx.zero == 1 else key
    s.out.append(Alias(step_end_key(s.rank, s.step), end))


def _zero1_broadcasts(s: FsdpStep, stages: list[StageInfo], after: Key) -> Key:
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


def _host_optimizer(s: FsdpStep, stages: list[StageInfo], key: Key, deps: tuple[Dep, ...]) -> None:
    """CPU offload: the optimizer steps on the host over the rank's shards, unit by unit,
    after the last gradient copy; nothing goes back (the next all-gathers fetch the shards).
    Where the ranks are CPU processes (``gloo_host``) the host is the device: the step is the
    rank's own compute (its compute stream, on the node's cores), as its trace shows it."""
    ctx = s.ctx
    lane = Lane.COMPUTE if ctx.options.gloo_host else Lane.HOST
    ops = tuple(Op(lane, Kind.OPTIMIZER, f"optimizer.{unit_label(u)}", OpClass.CPU_ADAM,
                   bytes=CPU_ADAM_BYTES_PER_PARAM * params / ctx.shard)
                for stage in stages for u, params in units(stage))
    task = Task(rank=s.rank, lane=lane, kind=Kind.OPTIMIZER, name="cpu optimizer", ops=ops, step=s.step)
    s.out.append(Emit(STEP_END, task, key, deps))
