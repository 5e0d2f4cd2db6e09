"""Turn (model, plan, pipeline schedule) into a TaskGraph, pass by pass.

Each simulated rank's step program is its schedule's actions cut into layer blocks
(:class:`schedules.passes.program.ActionSlot`). Pure passes turn the program into records (tasks
at points of the program, dependency edges, holds), each pass one concern:

1. the step's link to the previous one, and the trainer's host setup (:mod:`schedules.passes.step_start`);
2. pipeline sends and receives (:mod:`schedules.passes.pipeline` for Megatron-LM,
   :mod:`schedules.passes.p2p_torch` for ``torch.distributed.pipelining``);
3. data-parallel / ZeRO / FSDP collectives, offload copies and the optimizer step
   (:mod:`schedules.passes.dp`, :mod:`schedules.passes.dp_torch`, :mod:`schedules.passes.offload`);
4. activation offload (:mod:`schedules.passes.act_offload`);
5. the compute blocks themselves (:mod:`schedules.passes.compute`; what each block computes,
   recomputation included, is the :class:`schedules.work.Work`'s).

:mod:`schedules.passes.assemble` then orders every rank's records into program order and resolves
the keys. Simulate, the playground and explore all build their graphs here.

Folding (the default): ranks that do identical work — TP peers, CP peers and DP replicas on a
uniform cluster — are simulated once, so the graph has one rank per pipeline rank and collective
tasks carry no rendezvous; the simulator prices them for the full group. ``folded=False`` builds
every rank, with collectives that start when all members are ready.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from core.taskgraph import TaskGraph
from core.timeline_meta import TimelineMeta
from schedules.actions import PipelineSchedule
from schedules.layer_kinds import model_flops_per_step
from schedules.model import ModelSpec
from schedules.passes import dp, dp_torch, ep_overlap, fsdp_state
from schedules.passes.act_offload import act_offload_records
from schedules.passes.assemble import Assembler
from schedules.passes.compute import compute_records
from schedules.passes.p2p_torch import p2p_records
from schedules.passes.pipeline import pipeline_records
from schedules.passes.program import ActionSlot, BuildContext, BuildOptions, Coords, RankOf, Record
from schedules.passes.step_start import step_records
from schedules.plan import ParallelPlan, check_plan
from schedules.stages import plan_stages
from schedules.work import Work, model_work

__all__ = ["BuildOptions", "Coords", "RankOf", "build_task_graph"]

Pass = Callable[[BuildContext, Coords, int, tuple[ActionSlot, ...]], list[Record]]


def build_task_graph(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule,
                     rank_of: RankOf, options: BuildOptions | None = None,
                     work: Work | None = None) -> TaskGraph:
    """The TaskGraph of ``options.steps`` training steps of ``model`` under ``plan``.

    ``work`` prices nothing; it only says what each block does (default: the model's FLOPs and
    bytes; the playground passes fixed unit times).
    """
    check_plan(model, plan)
    ctx = BuildContext(model=model, plan=plan, schedule=schedule, options=options or BuildOptions(),
                       work=work or model_work(model, plan, schedule.split_backward),
                       stages=tuple(plan_stages(model, plan)), rank_of=rank_of)
    passes = _passes(ctx)
    assembler = Assembler()
    programs: dict[int, tuple[ActionSlot, ...]] = {}
    for c in simulated_ranks(ctx):
        slots = programs.setdefault(c.pp, rank_program(ctx, c.pp))
        for step in range(ctx.options.steps):
            assembler.add_rank_step(ctx.rank(c), [p(ctx, c, step, slots) for p in passes])
    graph = assembler.graph(_meta(ctx))
    return dataclasses.replace(graph, single_queue=True) if ctx.options.single_queue else graph


def _passes(ctx: BuildContext) -> tuple[Pass, ...]:
    """The passes of this build, in priority order (records at one point keep this order)."""
    if ctx.torch:
        return (step_records, p2p_records, dp_torch.dp_torch_records, compute_records)
    stage_copies = ctx.plan.activation_copies == "stage"  # "layer": in the blocks' ops
    extra: tuple[Pass, ...] = (act_offload_records,) if stage_copies else ()
    compute = ep_overlap.ep_overlap_records if ep_overlap.applies(ctx) else compute_records
    pipeline = p2p_records if ctx.plan.blocking_p2p else pipeline_records
    return (step_records, pipeline, dp.dp_records, *extra, compute)


def rank_program(ctx: BuildContext, pp: int) -> tuple[ActionSlot, ...]:
    """Pipeline rank ``pp``'s actions with their layer blocks (the same in every step)."""
    cut = fsdp_state.blocks if ctx.torch else dp.blocks
    out = []
    for index, a in enumerate(ctx.schedule.orders[pp]):
        stage = ctx.stages[a.stage]
        out.append(ActionSlot(index=index, action=a, stage=stage, blocks=cut(ctx, stage, a)))
    return tuple(out)


def simulated_ranks(ctx: BuildContext) -> list[Coords]:
    """The ranks the graph holds: one per pipeline rank when folded, else every rank."""
    p = ctx.plan
    if ctx.options.folded:
        return [Coords(0, 0, 0, r) for r in range(p.pp)]
    return [Coords(*c) for c in itertools.product(range(p.tp), range(p.cp), range(p.dp), range(p.pp))]


def _meta(ctx: BuildContext) -> TimelineMeta:
    p = ctx.plan
    coords = {ctx.rank(c): (c.tp, c.cp, c.dp, c.pp) for c in simulated_ranks(ctx)}
    return TimelineMeta(world_size=p.world_size, folded=ctx.options.folded, steps=ctx.options.steps,
                        rank_coords=coords, rank_pp={r: xyz[3] for r, xyz in coords.items()},
                        model_flops_per_step=model_flops_per_step(ctx.model, p.global_batch),
                        tokens_per_step=p.global_batch * ctx.model.seq_len, schedule=ctx.schedule.name,
                        num_microbatches=p.num_microbatches)
