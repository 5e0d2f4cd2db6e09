"""The data-parallel collectives of :mod:`schedules.passes.dp` as tasks, and what a block's
collectives are, worked out once per build.

A collective's ops are made once per build (:attr:`BuildContext.shared_ops`) and handed to every
rank and micro-batch that runs it; what a layer block reduces after its backward
(:func:`block_reduction`) and gathers before it runs under ZeRO-3 (:func:`block_gathers`)
depends only on its stage and layers (and the pass's phase), so each is worked out on a block's
first use (:attr:`BuildContext.memo`) and only the tasks are made per micro-batch.
Units: bytes, parameters on one TP rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.groups import DP, Axis, CommGroup
from core.taskgraph import Op, Task, collective_op
from core.vocab import Collective, Kind, Lane
from schedules.actions import Action
from schedules.grad_bucket_ops import zero3_predivide
from schedules.hybrid import replica_and_place
from schedules.passes.program import BuildContext, Coords, block_params
from schedules.passes.zero3_fetch import PERSISTENCE_THRESHOLD, module_fetches, split_copy
from schedules.stages import StageInfo


@dataclass(frozen=True, slots=True)
class BlockCollective:
    """One collective of a block: its task's name, ops, kind and layer (-1: several), and
    ``prefetched`` (a ZeRO-3 gather issued ahead of its block) or ``params`` (a reduction's
    parameters, which an offloaded optimizer copies to the host)."""

    name: str
    ops: tuple[Op, ...]
    kind: Kind
    layer: int
    prefetched: bool = False
    params: float = 0.0


def dp_ops(ctx: BuildContext, coll: Collective, name: str, size: float, layer: int = -1,
           before: tuple[Op, ...] = (), dim: CommGroup = DP, after: tuple[Op, ...] = ()) -> tuple[Op, ...]:
    """The ops of a DP collective of ``size`` bytes (``before``/``after``: ops the call runs
    first/last, inside it), made once per build for every rank and micro-batch that runs it."""
    key = ("dp", coll, name, size, dim, layer, before, after)
    ops = ctx.shared_ops.get(key)
    if ops is None:
        op = collective_op(Lane.DP, coll, name, bytes=size, dim=dim, layer=layer)
        ops = ctx.shared_ops[key] = (*before, op, *after)
    return ops


def dp_task(ctx: BuildContext, c: Coords, rank: int, step: int, ops: tuple[Op, ...], kind: Kind, name: str,
            a: Action, layer: int = -1, dim: CommGroup = DP) -> Task:
    """Rank ``c``'s (global ``rank``) task running a DP collective's ``ops``; when not folded its
    members meet by a group key naming the instance."""
    group = "" if ctx.options.folded else \
        f"{dim}/{step}/{a.stage}/{a.phase}{a.microbatch}/{name}/tp{c.tp}pp{c.pp}{_subgroup(ctx, c, dim)}"
    return Task(rank=rank, lane=Lane.DP, kind=kind, name=name, ops=ops, step=step,
                stage=a.stage, chunk=a.chunk, microbatch=a.microbatch, layer=layer, group=group)


def dp_collective(ctx: BuildContext, c: Coords, step: int, coll: Collective, name: str, size: float, a: Action,
                  layer: int = -1, before: tuple[Op, ...] = (), dim: CommGroup = DP, after: tuple[Op, ...] = ()) -> Task:
    """A DP collective of ``size`` bytes over ``dim`` (the DP x CP group, or a hybrid-sharding
    replica's ranks or the ranks across replicas: :attr:`ParallelPlan.shard_dim`,
    :attr:`ParallelPlan.replicate_dim`) as rank ``c``'s task (:func:`dp_ops`, :func:`dp_task`)."""
    ops = dp_ops(ctx, coll, name, size, layer, before, dim, after)
    return dp_task(ctx, c, ctx.rank(c), step, ops, ops[len(before)].kind, name, a, layer, dim)


def _subgroup(ctx: BuildContext, c: Coords, dim: CommGroup) -> str:
    """What tells a rank's hybrid-sharding group apart beyond its tp and pp coordinates: its
    replica (replicas are outermost in the DP group), or its place in the replica and its cp."""
    if not dim.is_hybrid:
        return ""
    replica, place = replica_and_place(c.dp, ctx.plan.dp, ctx.plan.dp_replicate)
    return f"r{replica}" if dim.axis == Axis.DP_SHARD else f"s{place}cp{c.cp}"


def block_reduction(ctx: BuildContext, stage: StageInfo, layers: tuple[int, ...]) -> BlockCollective | None:
    """The reduction of a block's gradients (all-reduce under ZeRO-0, else reduce-scatter, with
    DeepSpeed's pre-division first); None when DeepSpeed 2021's ZeRO-3 reduces every parameter of
    the block inside it (:mod:`schedules.passes.zero3_2021`)."""
    key = ("dp_reduction", stage.index, layers)
    if key not in ctx.memo:
        ctx.memo[key] = _reduction(ctx, stage, layers)
    return ctx.memo[key]  # type: ignore[no-any-return]


def _reduction(ctx: BuildContext, stage: StageInfo, layers: tuple[int, ...]) -> BlockCollective | None:
    params = block_params(stage, layers)
    if ctx.plan.per_param_zero3:  # the layers' gradients are reduced inside their blocks (zero3_2021)
        params -= len(layers) * stage.layer_params_local
        if params <= 0:
            return None
    kind = ctx.grad_reduction
    name = f"grad_{'ar' if kind == Collective.ALL_REDUCE else 'rs'} L{layers[0]}-{layers[-1]}" if layers else "grad"
    before = zero3_predivide(ctx.plan, name, params) if kind == Collective.REDUCE_SCATTER else ()
    layer = layers[0] if len(layers) == 1 else -1
    ops = dp_ops(ctx, kind, name, ctx.plan.grad_reduce_bytes * params, layer, before)
    return BlockCollective(name, ops, ops[len(before)].kind, layer, params=params)


def block_gathers(ctx: BuildContext, stage: StageInfo, layers: tuple[int, ...],
                  phase: str) -> tuple[BlockCollective, ...]:
    """ZeRO-3's all-gathers before a block of ``phase`` (:func:`gathered`), in order."""
    key = ("dp_gathers", stage.index, layers, phase)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = tuple(_gather(ctx, layers, *item) for item in
                                      gathered(ctx, stage, layers, block_params(stage, layers), phase))
    return found  # type: ignore[no-any-return]


def _gather(ctx: BuildContext, layers: tuple[int, ...], name: str, size: float, prefetched: bool,
            coalesced: bool) -> BlockCollective:
    label, size = f"L{layers[0]}.{name}", ctx.plan.param_gather_bytes * size
    ops = dp_ops(ctx, Collective.ALL_GATHER, label, size, layers[0],
                 after=split_copy(label, size, layers[0]) if coalesced else ())
    return BlockCollective(label, ops, ops[0].kind, layers[0], prefetched=prefetched)


def gathered(ctx: BuildContext, stage: StageInfo, layers: tuple[int, ...], params: float,
             phase: str) -> list[tuple[str, float, bool, bool]]:
    """What ZeRO-3 all-gathers before a block, (name, parameters on one TP rank, prefetched,
    coalesced: :attr:`schedules.passes.zero3_fetch.ModuleFetch.coalesced`) each:
    the whole block at once (``zero3_unit="block"``), or DeepSpeed's per-submodule fetches
    (``"module"``: the embedding and the output head, prefetched, and each layer's
    :func:`schedules.passes.zero3_fetch.module_fetches`)."""
    if ctx.plan.zero3_unit == "block":
        return [("param_ag", params, True, False)]
    out: list[tuple[str, float, bool, bool]] = []
    blocking = ctx.plan.per_param_zero3  # 2021: a forward's first fetch gathers itself; the layers' in the block
    if stage.first and stage.layers and stage.layers[0] in layers:
        out.append(("embedding", stage.embedding_params_local, not blocking, False))
    per_layer = [] if blocking else [(f"{f.name}_ag", f.params, f.prefetched, f.coalesced)
                                     for f in module_fetches(ctx.model, ctx.plan, phase)]
    out += [item for _ in layers for item in per_layer]
    if stage.last and stage.layers and stage.layers[-1] in layers:
        out.append(("head", stage.head_params_local, not blocking, False))
    return [item for item in out if item[1] * ctx.plan.tp >= PERSISTENCE_THRESHOLD]
