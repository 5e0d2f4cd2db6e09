"""Price a plan's tasks on one cluster with the simulator's own TaskCoster.

Nothing here has a cost formula: every duration comes from :class:`sim.pricing.TaskCoster` (the
device roofline and the collective model) over the ops that :mod:`schedules` gives, exactly as
:func:`sim.simulate.price` gets them. What is added is caching across plans:
:class:`SharedPriceCoster` remembers each op's price by what the price depends on (cost class,
FLOPs, bytes, and the group or peer it runs on), not by the op's name, so every layer of every
plan with the same placement on the same cluster reuses it; :class:`PlanPrices` prices each
distinct block, collective, send and optimizer step of one plan once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from schedules.actions import Action
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo, plan_stages
from schedules.taskgraph import Op, Task
from schedules.vocab import COMPUTE_CLASSES
from schedules.work import ModelWork
from sim.costing import CostedTask
from sim.pricing import TaskCoster
from topo import ClusterSpec, CollectiveModel, Placement

OpPrices = dict[tuple[object, ...], float]
"""Shared op prices of one (cluster, placement, dtype): price key -> seconds."""
_SEND_ACTION = Action(stage=0, phase="F", microbatch=0)


@dataclass(frozen=True, slots=True)
class Price:
    """A task's duration, the time a compute kernel runs inside it, and whether it uses the fabric."""

    duration_s: float
    kernel_s: float
    crosses_nodes: bool


def plan_placement(plan: ParallelPlan) -> Placement:
    """Ranks -> devices for ``plan``, as :func:`sim.simulate.make_placement` places a job."""
    return Placement(sizes={"tp": plan.tp, "cp": plan.cp, "dp": plan.dp, "pp": plan.pp}, order=plan.placement)


def rank_function(plan: ParallelPlan) -> Callable[[int, int, int, int], int]:
    """(tp, cp, dp, pp) -> global rank under the plan's placement (innermost dimension first)."""
    return plan_placement(plan).grid_rank_function()


class SharedPriceCoster(TaskCoster):
    """A :class:`TaskCoster` that looks op prices up in (and adds them to) a shared table.

    Share the table only between costers of the same cluster, placement and dtype: the key
    leaves those out.
    """

    def __init__(self, collectives: CollectiveModel, placement: Placement, *, dtype: str,
                 gpus_per_node: int, shared: OpPrices) -> None:
        super().__init__(collectives, placement, dtype=dtype, gpus_per_node=gpus_per_node)
        self.shared = shared

    def op_duration(self, op: Op, rank: int, peer: int = -1) -> float:
        """The op's price from the shared table, computed by :class:`TaskCoster` on a miss."""
        if op.duration_s is not None:
            return op.duration_s
        if op.op_class in COMPUTE_CLASSES:
            key: tuple[object, ...] = (op.op_class, op.flops, op.bytes)
        elif op.dim == "pp":
            key = (op.op_class, op.bytes, "pp", rank, peer)
        else:
            key = (op.op_class, op.bytes, op.dim, self.group(op.dim, rank))
        price = self.shared.get(key)
        if price is None:
            price = self.shared[key] = super().op_duration(op, rank, peer)
        return price


class PriceContext:
    """Prices on one cluster under one placement and dtype, shared by every plan that has them.

    Tasks are priced by a :class:`SharedPriceCoster` and remembered by what they run: a block by
    the identity of its ops tuple (ops come from a :class:`ModelWork` that the caller keeps alive,
    which caches them), the rest by value.
    """

    def __init__(self, cluster: ClusterSpec, collectives: CollectiveModel, placement: Placement, dtype: str) -> None:
        self.coster = SharedPriceCoster(collectives, placement, dtype=dtype, gpus_per_node=cluster.gpus_per_node,
                                        shared={})
        self.prices: dict[tuple[object, ...], Price] = {}
        self._alive: list[tuple[Op, ...]] = []  # TaskCoster caches by id(ops): keep them alive

    def keep(self, ops: tuple[Op, ...]) -> None:
        """Keep ``ops`` alive as long as prices keyed by its identity are."""
        self._alive.append(ops)

    def price(self, key: tuple[object, ...], task: Callable[[], Task]) -> Price:
        """The price of the task ``key`` names, costing ``task()`` on first use."""
        found = self.prices.get(key)
        if found is None:
            t = task()
            self._alive.append(t.ops)
            cost = self.coster.cost_task(t)
            found = self.prices[key] = Price(cost.duration_s, kernel_time_s(cost), cost.crosses_nodes)
        return found


class PlanPrices:
    """Prices of one plan's tasks (seconds), looked up in a :class:`PriceContext`.

    ``work`` must be the plan's :class:`ModelWork` (it may be shared with other plans whose blocks
    are the same work: :func:`work_key`).
    """

    def __init__(self, work: ModelWork, stages: list[StageInfo], context: PriceContext) -> None:
        self.work, self.stages, self.context = work, stages, context

    def block(self, rank: int, stage: int, phase: str, layers: tuple[int, ...], first: bool, last: bool) -> Price:
        """A compute block of a pipeline action (the builder's ``Work.block_ops``).

        Looked up by the ops tuple's identity, then by its content without names (every field a
        price depends on: so the blocks of different layers, equal but for their names, are
        priced once)."""
        ops = self.work.block_ops(self.stages[stage], phase, layers, first, last)
        by_id = ("block", rank, id(ops))
        found = self.context.prices.get(by_id)
        if found is None:
            content = ("block-content", rank, tuple(
                (op.lane, op.op_class, op.flops, op.bytes, op.dim, op.duration_s, op.concurrent) for op in ops))
            found = self.context.price(content, lambda: Task(rank=rank, lane="compute", kind="fwd", name="", ops=ops))
            self.context.prices[by_id] = found
            self.context.keep(ops)
        return found

    def collective(self, rank: int, kind: str, size_bytes: float) -> Price:
        """A data-parallel collective on the rank's DP x CP group (as :mod:`schedules.build.dp` emits)."""
        op = Op("comm.dp", kind, kind, kind, bytes=size_bytes, dim="dp")
        return self.context.price(("dp", rank, kind, size_bytes),
                                  lambda: Task(rank=rank, lane="comm.dp", kind=kind, name="", ops=(op,)))

    def send(self, rank: int, peer: int) -> Price:
        """A pipeline send of one micro-batch's activations or gradients to ``peer``."""
        op = self.work.send_op(_SEND_ACTION, "send")
        return self.context.price(("send", rank, peer, op.bytes), lambda: Task(
            rank=rank, lane="comm.pp", kind="send", name="", ops=(op,), peer=peer, ordered=False))

    def optimizer(self, rank: int, params_local: float) -> Price:
        """The optimizer step over ``params_local`` parameters."""
        ops = self.work.optimizer_ops(params_local)
        return self.context.price(("optimizer", rank, params_local),
                                  lambda: Task(rank=rank, lane="compute", kind="optimizer", name="", ops=ops))


def work_key(model: ModelSpec, plan: ParallelPlan, split_backward: bool) -> tuple[object, ...]:
    """What a :class:`ModelWork`'s ops depend on: the model, the backward split, and the plan's
    per-GPU shape (tp, cp, micro-batch size, SP, recomputation, attention kernel). Plans with equal
    keys may share one ModelWork (and its cached ops); the degrees that only change how many
    blocks run where (pp, dp, vpp, ZeRO, schedule, batch) are left out."""
    return (model, split_backward, plan.tp, plan.cp, plan.microbatch_size, plan.sequence_parallel,
            plan.recompute, plan.flash_attention)


def plan_prices(model: ModelSpec, plan: ParallelPlan, split_backward: bool, cluster: ClusterSpec,
                collectives: CollectiveModel | None = None) -> PlanPrices:
    """Fresh (unshared) prices of one plan on one cluster."""
    context = PriceContext(cluster, collectives or CollectiveModel(cluster), plan_placement(plan), plan.dtype)
    return PlanPrices(ModelWork(model, plan, split_backward), plan_stages(model, plan), context)


def kernel_time_s(cost: CostedTask) -> float:
    """Time inside a task during which one of its compute-lane ops runs (seconds)."""
    spans = sorted((s.offset_s, s.offset_s + s.duration_s) for s in cost.segments
                   if s.op.lane == "compute" and s.duration_s > 0)
    total, reach = 0.0, float("-inf")
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total
