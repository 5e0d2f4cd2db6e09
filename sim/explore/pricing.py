"""Price a plan's tasks on one cluster with the simulator's own TaskCoster.

Nothing here has a cost formula: every duration comes from :class:`sim.pricing.TaskCoster` (the
device roofline and the collective model) over the ops that :mod:`schedules` gives, exactly as
:func:`sim.simulate.build_priced` gets them. What is added is caching across plans:
:class:`SharedPriceCoster` remembers each op's price by what the price depends on (cost class,
FLOPs, bytes, and the group or peer it runs on), not by the op's name, so every layer of every
plan with the same placement on the same cluster reuses it; :class:`PlanPrices` prices each
distinct block, collective, send and optimizer step of one plan once.
"""

from __future__ import annotations

from collections.abc import Callable

from core.groups import PP
from core.taskgraph import Op, Task, TaskGraph
from core.vocab import COMPUTE_CLASSES, Lane
from schedules.fp8 import fp8_work_key
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo, plan_stages
from schedules.work import ModelWork
from sim.costing import COST_MEMO_ENTRIES, ByCost, CostedTask
from sim.metrics import LAYER_COMM_LANES
from sim.pricing import TaskCoster
from topo import ClusterSpec, CollectiveModel, Placement

OpPrices = dict[tuple[object, ...], float]
"""Shared op prices of one (cluster, placement, dtype): price key -> seconds."""


def plan_placement(plan: ParallelPlan) -> Placement:
    """Ranks -> devices for ``plan``, as :func:`sim.simulate.make_placement` places a job."""
    return Placement(sizes={"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}, order=plan.placement)


def rank_function(plan: ParallelPlan) -> Callable[[int, int, int, int], int]:
    """(tp, cp, dp, pp) -> global rank under the plan's placement (innermost dimension first)."""
    return plan_placement(plan).grid_rank_function()


class SharedPriceCoster(TaskCoster):
    """A :class:`TaskCoster` that looks op prices up in (and adds them to) a shared table (its
    one-op communication tasks are shared by every plan through :meth:`TaskCoster.cost_task`).

    Share the table only between costers of the same cluster, placement and dtype: the key
    leaves those out.
    """

    def __init__(self, collectives: CollectiveModel, placement: Placement, *, dtype: str,
                 gpus_per_node: int, shared: OpPrices) -> None:
        super().__init__(collectives, placement, dtype=dtype, gpus_per_node=gpus_per_node)
        self.shared = shared
        self._layouts: dict[tuple[object, ...], CostedTask] = {}
        self._kernel_s: ByCost[float] = ByCost()
        self._outside_s: ByCost[float] = ByCost()
        self._host_s: ByCost[float] = ByCost()

    def kernel_time_s(self, cost: CostedTask) -> float:
        """:func:`kernel_time_s` of ``cost``, kept across plans by its identity."""
        return self._kernel_s.get(cost, lambda: kernel_time_s(cost))

    def outside_layer_time_s(self, cost: CostedTask) -> float:
        """:func:`outside_layer_time_s` of ``cost``, kept across plans by its identity."""
        return self._outside_s.get(cost, lambda: outside_layer_time_s(cost))

    def host_time_s(self, cost: CostedTask) -> float:
        """:func:`host_time_s` of ``cost``, kept across plans by its identity."""
        return self._host_s.get(cost, lambda: host_time_s(cost))

    def layout(self, task: Task) -> CostedTask:
        """:meth:`TaskCoster.layout`, kept across plans by what it reads of the task (its ops,
        rank, peer and lane; the coster's settings are the same for every plan that shares it):
        plans that share a work share their blocks' ops (most of a grid's priced tasks). At most
        :data:`sim.costing.COST_MEMO_ENTRIES`, then afresh."""
        key = (task.ops, task.rank, task.peer, task.lane)
        cached = self._layouts.get(key)
        if cached is None:
            if len(self._layouts) >= COST_MEMO_ENTRIES:
                self._layouts.clear()
            cached = self._layouts[key] = super().layout(task)
        return cached

    def op_duration(self, op: Op, rank: int, peer: int = -1) -> float:
        """The op's price from the shared table, computed by :class:`TaskCoster` on a miss."""
        if op.duration_s is not None:
            return op.duration_s
        if op.op_class in COMPUTE_CLASSES:
            key: tuple[object, ...] = (op.op_class, op.flops, op.bytes, op.m, op.n, op.k, op.batch, op.rate,
                                       op.split, op.split_streams, op.causal)
        elif op.dim == PP:
            key = (op.op_class, op.bytes, PP, rank, peer)
        else:
            key = (op.op_class, op.bytes, op.dim, (rank,) if op.dim is None else self.group(op.dim, rank))
        price = self.shared.get(key)
        if price is None:
            price = self.shared[key] = super().op_duration(op, rank, peer)
        return price


class PriceContext:
    """Prices on one cluster under one placement and dtype, shared by every plan that has them:
    a :class:`SharedPriceCoster` whose op prices (collectives, roofline) every plan reuses."""

    def __init__(self, cluster: ClusterSpec, collectives: CollectiveModel, placement: Placement, dtype: str) -> None:
        self.coster = SharedPriceCoster(collectives, placement, dtype=dtype, gpus_per_node=cluster.gpus_per_node,
                                        shared={})


class PlanPrices:
    """Prices of one plan's tasks (seconds), looked up in a :class:`PriceContext`.

    ``work`` must be the plan's :class:`ModelWork` (it may be shared with other plans whose blocks
    are the same work: :func:`work_key`); the builder makes the plan's graph with it, so blocks
    that are the same ops are the same tuple and are priced once.
    """

    def __init__(self, work: ModelWork, stages: list[StageInfo], context: PriceContext) -> None:
        self.work, self.stages, self.context = work, stages, context

    def cost_tasks(self, graph: TaskGraph) -> list[CostedTask]:
        """The costs of every task of ``graph`` (a graph built with :attr:`work`)."""
        coster = self.context.coster
        try:
            return [coster.cost_task(t) for t in graph.tasks]
        finally:
            coster.forget_tasks()  # one graph's task costs at a time


def work_key(model: ModelSpec, plan: ParallelPlan, split_backward: bool) -> tuple[object, ...]:
    """What a :class:`ModelWork`'s ops depend on: the model, the backward split, and the plan's
    per-GPU shape (tp, cp, micro-batch size, SP, recomputation, attention kernel, ep, etp, routing
    imbalance, and the FP8 pass's settings: :func:`schedules.fp8.fp8_work_key`). Plans with equal
    keys may share one ModelWork (and its cached ops); the degrees that only change how many
    blocks run where (pp, dp, vpp, ZeRO, schedule, batch) are left out."""
    return (model, split_backward, plan.tp, plan.cp, plan.microbatch_size, plan.sequence_parallel,
            plan.recompute, plan.flash_attention, plan.ep, plan.etp, plan.moe_imbalance, plan.moe_dispatcher,
            plan.dtype, *fp8_work_key(plan))


def plan_prices(model: ModelSpec, plan: ParallelPlan, split_backward: bool, cluster: ClusterSpec,
                collectives: CollectiveModel | None = None) -> PlanPrices:
    """Fresh (unshared) prices of one plan on one cluster."""
    context = PriceContext(cluster, collectives or CollectiveModel(cluster), plan_placement(plan), plan.compute_dtype)
    return PlanPrices(ModelWork(model, plan, split_backward), plan_stages(model, plan), context)


def kernel_time_s(cost: CostedTask) -> float:
    """Time inside a task during which one of its compute-lane ops runs (seconds)."""
    return _lanes_time_s(cost, lambda lane: lane == Lane.COMPUTE)


def outside_layer_time_s(cost: CostedTask) -> float:
    """Time inside a task during which one of its ops runs on a lane outside a layer's own work
    (compute, tensor- and context-parallel collectives: :data:`sim.metrics.LAYER_COMM_LANES`),
    such as an expert all-to-all or an FP8 amax all-reduce: the Timeline's bubble counts it as
    idle (seconds; 0 when there is none)."""
    return _lanes_time_s(cost, lambda lane: lane != Lane.COMPUTE and lane not in LAYER_COMM_LANES)


def host_time_s(cost: CostedTask) -> float:
    """Time inside a task during which one of its host ops runs (the GPU's wait after a host
    synchronisation, :mod:`sim.host_sync`): the Timeline's metrics count it neither as compute
    nor as communication (seconds)."""
    return _lanes_time_s(cost, lambda lane: lane == Lane.HOST)


def _lanes_time_s(cost: CostedTask, on_lane: Callable[[str], bool]) -> float:
    """Time inside a task during which one of its ops on a lane ``on_lane`` accepts runs (seconds)."""
    spans = sorted((s.offset_s, s.offset_s + s.duration_s) for s in cost.segments
                   if on_lane(s.op.lane) and s.duration_s > 0)
    total, reach = 0.0, float("-inf")
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total
