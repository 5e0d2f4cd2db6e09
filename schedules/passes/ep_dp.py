"""Expert gradients and ZeRO over the expert-data-parallel group (Megatron-Core's
``expert_data_parallel_group``): what :mod:`schedules.passes.dp` adds for an MoE model.

The routed experts of a rank (E/ep experts per MoE layer, each split over etp) are replicated
over the EDP group (tp x cp x dp / (ep x etp) ranks) instead of the DP x CP group: their
gradients are reduced there, in the same buckets and at the same points as the other
parameters' (all-reduce under ZeRO-0, reduce-scatter under ZeRO >= 1, on the DP stream), the
distributed optimizer shards their states over it, and ZeRO-1/2/3 all-gather their updated
(or, ZeRO-3, needed) parameters over it. Nothing is added for a dense model or when the EDP
group is a single rank.
"""

from __future__ import annotations

from core.groups import Axis
from core.taskgraph import Task, collective_op
from core.vocab import Collective, Lane
from schedules.actions import Action
from schedules.expert_layout import expert_coordinates
from schedules.layer_kinds import layer_kind
from schedules.moe_params import stage_expert_params
from schedules.moe_sizes import expert_dim
from schedules.passes.program import BuildContext, Coords, Dep, Emit, Key, Point, Record
from schedules.stages import StageInfo


def active(ctx: BuildContext) -> bool:
    """The model has routed experts and their EDP group has more than one rank (once per build)."""
    found = ctx.memo.get("edp_active")
    if found is None:
        found = ctx.memo["edp_active"] = layer_kind(ctx.model).expert_data_ranks(ctx.plan) > 1
    return found  # type: ignore[no-any-return]


def block_expert_params(ctx: BuildContext, layers: tuple[int, ...]) -> float:
    """Routed-expert parameters of ``layers`` on one rank (0 for dense layers; once per build)."""
    key = ("expert_params", layers)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = stage_expert_params(ctx.model, ctx.plan, layers)
    return found  # type: ignore[no-any-return]


def expert_group_tag(ctx: BuildContext, c: Coords, dim: str) -> str:
    """What the members of rank ``c``'s group along expert dimension ``dim`` ("ep" or "edp") share
    and no other group of the job does: the pipeline coordinate and the other two expert
    coordinates (:func:`schedules.expert_layout.expert_coordinates`, the pricer's groups)."""
    plan = ctx.plan
    coords = expert_coordinates({"tp": c.tp, "cp": c.cp, "dp": c.dp}, {"tp": plan.tp, "cp": plan.cp, "dp": plan.dp},
                                plan.placement, plan.ep, plan.etp)
    return f"pp{c.pp}" + "".join(f"{d}{coords[d]}" for d in ("etp", "ep", "edp") if d != dim)


def edp_collective(ctx: BuildContext, c: Coords, step: int, coll: Collective, name: str, size: float, a: Action,
                   layer: int = -1) -> Task:
    """An EDP collective of ``size`` bytes on the DP stream (members meet by a group key when
    not folded)."""
    op = collective_op(Lane.DP, coll, name, bytes=size, dim=expert_dim(Axis.EDP, ctx.plan), layer=layer)
    group = "" if ctx.options.folded else \
        f"edp/{step}/{a.stage}/{a.phase}{a.microbatch}/{name}/{expert_group_tag(ctx, c, 'edp')}"
    return Task(rank=ctx.rank(c), lane=Lane.DP, kind=op.kind, name=name, ops=(op,), step=step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=layer, group=group)


def reductions(ctx: BuildContext, c: Coords, step: int, point: Point, key: Key, a: Action,
               layers: tuple[int, ...], after: tuple[Dep, ...]) -> list[Record]:
    """Reduce a block's expert gradients over EDP, beside its other gradients' reduction."""
    if not active(ctx):
        return []
    params = block_expert_params(ctx, layers)
    if params <= 0:
        return []
    kind = ctx.grad_reduction
    name = f"expert_grad_{'ar' if kind == Collective.ALL_REDUCE else 'rs'} L{layers[0]}-{layers[-1]}"
    task = edp_collective(ctx, c, step, kind, name, ctx.plan.element_bytes * params, a,
                          layer=layers[0] if len(layers) == 1 else -1)
    return [Emit(point, task, key, after)]


def gathers(ctx: BuildContext, c: Coords, step: int, point: Point, key: Key, a: Action,
            layers: tuple[int, ...], deps: tuple[Dep, ...]) -> list[Emit]:
    """All-gather a block's expert parameters over EDP (ZeRO-1/2 after the update, ZeRO-3
    before each use)."""
    if not active(ctx) or ctx.zero == 0:
        return []
    params = block_expert_params(ctx, layers)
    if params <= 0:
        return []
    task = edp_collective(ctx, c, step, Collective.ALL_GATHER, f"expert_param_ag L{layers[0]}-{layers[-1]}",
                          ctx.plan.param_gather_bytes * params, a, layer=layers[0] if len(layers) == 1 else -1)
    return [Emit(point, task, key, deps)]


def optimizer_params(ctx: BuildContext, stages: list[StageInfo]) -> float:
    """Expert parameters a rank's optimizer updates: its experts, sharded over EDP under ZeRO >= 1."""
    params = sum(stage.expert_params_local for stage in stages)
    return params / ctx.plan.edp if ctx.zero >= 1 and active(ctx) else params
