"""Price ops on hardware: compute ops by the device roofline, communication ops by the collective
cost model over the groups the placement gives (or by measured fits of a hardware profile, when
one covers the operation on the group's link kind). Identical work is priced once: ops are
cached with the group they use, tasks by their (shared) ops tuple and groups, and one-op
communication tasks (each pipeline send has its own op, named after its micro-batch) by their
op's priced fields and end points.

Host time: a device with ``host_overhead_s`` (CPU processes: Python and dispatch between ops)
spends that long on the host lane before each compute op; under tensor parallelism it adds
``tp_host_overhead_s`` there and ``tp_overhead_s`` to the op itself (DTensor dispatch); an
optimizer op over distributed-tensor parameters (``dtensor_params``) adds
``dtensor_optimizer_overhead_s``; a tensor-parallel collective adds ``tp_comm_overhead_s``; ops the
framework runs on plain tensors under TP (``local_op``: the included trainer's MoE block,
:mod:`schedules.moe_torch`) get neither DTensor overhead;
every communication op adds ``comm_delay_s`` (scheduling delay on an oversubscribed CPU host). An op
of class "step" (a training step's setup on the host) lasts ``step_overhead_s``, one of class
"action" (a pipeline action's bookkeeping on the host) ``action_overhead_s``.

Compute runs at the pace of the job's slowest device: every compute op's price is multiplied by
``compute_pace`` = 1 + ``speed_cv`` x E[max of world-size standard normals]
(:func:`topo.variability.slowest_gpu_factor`; part-to-part speed variation, Sinha et al. SC'22).
Collectives are priced on links and are not scaled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.errors import invalid
from core.groups import PP, TP, CommGroup
from core.taskgraph import Op, Task, TaskGraph
from core.vocab import (
    COLLECTIVE_OPS,
    COMPUTE_CLASSES,
    HOST_OP_CLASSES,
    Collective,
    Lane,
    OpClass,
)
from schedules.attention_kernels import fused_attention_rate
from schedules.optimizer_traffic import CPU_ADAM_BYTES_PER_PARAM
from schedules.stage_ops import EAGER_ADAMW_PASSES
from sim.costing import COST_MEMO_ENTRIES, ByCost, CostedTask, Segment, layout_ops
from sim.gemm_pricing import accumulation_slowdown, decomposed_gemm_s
from sim.host_sync import price_host_syncs
from sim.placement import deepep_volume
from sim.rank_groups import RankGroups
from sim.rank_loops import rank_copies_s, rank_loop_s
from topo.collective_fit import CollectiveFits
from topo.collectives import CollectiveModel
from topo.compute import alloc_time_s, compute_time_s, dram_bound_s
from topo.gemm_shape import GemmShape
from topo.placement import Placement
from topo.variability import slowest_gpu_factor

SlowdownMemo = tuple[dict[tuple[object, ...], float], ByCost[float]]
"""Interference slowdowns found on one device for one dtype (:func:`sim.interference.memoized_task_slowdown`):
the ops' by what they read of an op, the tasks' by the priced task and its rank's load (CTAs,
HBM GB/s)."""


def new_slowdown_memo() -> SlowdownMemo:
    """An empty :data:`SlowdownMemo`."""
    return {}, ByCost()


SAME_MEMORY_CLASSES = (OpClass.PCIE_TO_HOST, OpClass.PCIE_TO_DEVICE, OpClass.CPU_ADAM)  # no bus when the device is the host


class TaskCoster:
    """Prices ops and tasks for one job on one cluster."""

    def __init__(self, collectives: CollectiveModel, placement: Placement, *, dtype: str,
                 gpus_per_node: int, ideal_network: bool = False, fits: CollectiveFits | None = None,
                 dtensor_params: bool = False, comm_delay_s: float = 0.0,
                 host_ops: Callable[[Op], float] | None = None, gemm_shapes: bool = True,
                 local_op: Callable[[Op], bool] | None = None) -> None:
        self.collectives = collectives
        self.device = collectives.cluster.device
        self.fits = fits or CollectiveFits(())
        tp = placement.sizes.get("tp", 1) > 1
        self.host_gap_s = self.device.host_overhead_s + (self.device.tp_host_overhead_s if tp else 0.0)
        self.tp_extra_s = self.device.tp_overhead_s if tp else 0.0
        self.local_op = local_op if tp else None  # ops outside DTensor: no TP overheads
        self.optimizer_extra_s = self.device.dtensor_optimizer_overhead_s if dtensor_params else 0.0
        self.comm_delay_s = comm_delay_s
        self.host_ops = host_ops  # prices offload copies and CPU Adam (sim.host_pricing)
        # matmuls with a shape priced by tile/wave quantisation (topo.gemm_shape) on devices with
        # an SM count and no calibrated GEMM curve; off by default (proposed wiring)
        device = collectives.cluster.device
        self.gemm_shapes = gemm_shapes and device.sm_count > 0 and not device.gemm_curve_flops
        self.device_is_host = collectives.cluster.intra_node == "host"
        self.placement = placement
        self.dtype = dtype
        self.gpus_per_node = gpus_per_node
        self.ideal_network = ideal_network
        self.compute_pace = slowest_gpu_factor(device.speed_cv, placement.world_size)
        self._op_cache: dict[tuple[object, ...], float] = {}
        self._task_cache: dict[tuple[tuple[Op, ...], tuple[object, ...]], CostedTask] = {}
        # id(ops) -> its _OpsPrices: tasks that share one ops tuple (the builder's blocks and
        # pipeline messages, tiled over micro-batches and ranks) price it by identity, without
        # hashing its ops again; the entry holds the tuple, so its id is not reused
        self._by_ops: dict[int, _OpsPrices] = {}
        self._unnamed: dict[tuple[object, ...], tuple[float, bool]] = {}  # one-op comm task -> (duration, crosses)
        self._loads: dict[tuple[object, ...], tuple[int, float]] = {}  # comm_load by what it reads of a task
        self.groups = RankGroups(placement)
        self._slowdowns = new_slowdown_memo()

    def slowdown_memo(self) -> SlowdownMemo:
        """The interference slowdowns found with this coster's prices (its device and dtype),
        kept for its next graphs (explore's plans, a job simulated again), started afresh with
        the ops' slowdowns when the tasks' reach :data:`sim.costing.COST_MEMO_ENTRIES`."""
        if len(self._slowdowns[1]) >= COST_MEMO_ENTRIES:
            self._slowdowns = new_slowdown_memo()
        return self._slowdowns

    # ---- groups ----
    def group(self, dim: CommGroup, rank: int) -> tuple[int, ...]:
        """Ranks of ``rank``'s group ``dim`` (:meth:`sim.rank_groups.RankGroups.group`)."""
        return self.groups.group(dim, rank)

    # ---- ops ----
    def op_duration(self, op: Op, rank: int, peer: int = -1) -> float:
        """Seconds ``op`` takes on ``rank`` (``peer``: the receiver of a pipeline send)."""
        if op.duration_s is not None:
            return op.duration_s
        if self.comm_delay_s and op.lane.startswith("comm") and not op.concurrent:
            return self._op_cost(op, rank, peer) + self.comm_delay_s
        return self._op_cost(op, rank, peer)

    def _op_cost(self, op: Op, rank: int, peer: int) -> float:
        if op.op_class == OpClass.STEP:
            return self.device.step_overhead_s
        if op.op_class == OpClass.ACTION:
            return self.device.action_overhead_s
        if op.op_class in HOST_OP_CLASSES:
            if self.device_is_host and op.op_class in SAME_MEMORY_CLASSES:
                return self._on_host_device(op)
            if self.host_ops is None:
                raise invalid("op_class", op.op_class, "no host pricer given")
            return self.host_ops(op)
        if op.op_class in COMPUTE_CLASSES:
            key: tuple[int, ...] = ()
        elif op.dim == PP:
            key = (rank, peer)
        elif op.dim is None:  # an op of one rank (an allocation)
            key = (rank,)
        else:
            key = self.group(op.dim, rank)
        cache_key = (op.op_class, op.flops, op.bytes, op.dim, key, op.m, op.n, op.k, op.batch, op.rate,
                     op.split, op.split_streams, op.causal, op.dtype, op.strided_bytes, self._local(op),
                     op.kind if op.op_class == OpClass.RANK_LOOP else "")  # not the name; a loop's kind prices it
        if cache_key not in self._op_cache:
            self._op_cache[cache_key] = self._price(op, key)
        return self._op_cache[cache_key]

    def _local(self, op: Op) -> bool:
        """``op`` runs on plain tensors under TP (no DTensor dispatch)."""
        return self.local_op is not None and self.local_op(op)

    def _shaped_gemm_s(self, op: Op) -> float:
        """A matmul by its shape (and its TP-overlap decomposition): :func:`decomposed_gemm_s`."""
        shape = GemmShape(op.m, op.n, op.k, op.batch)
        return decomposed_gemm_s(self.device, shape, self._dtype(op), op.split, op.split_streams) * accumulation_slowdown(
            self.device, op)

    def _dtype(self, op: Op) -> str:
        """The dtype ``op``'s math runs in: its own (an FP8 GEMM) or the job's compute dtype."""
        return op.dtype or self.dtype

    def _on_host_device(self, op: Op) -> float:
        """Offload ops where the "device" is a CPU process (intra_node="host"): its memory is the
        host's, so a device<->host copy moves nothing (torch's ``Tensor.to`` returns the tensor
        itself) and the host optimizer is the device's own optimizer step (same cores, same
        bytes per parameter: torch's AdamW over CPU tensors, the single-tensor loop)."""
        if op.op_class == OpClass.CPU_ADAM:
            params = op.bytes / CPU_ADAM_BYTES_PER_PARAM
            element = 4 if self.dtype == "fp32" else 2
            return self._op_cost(dataclasses.replace(op, op_class=OpClass.OPTIMIZER,
                                                     bytes=EAGER_ADAMW_PASSES * element * params), -1, -1)
        return 0.0

    def _price(self, op: Op, key: tuple[int, ...]) -> float:
        if op.op_class == OpClass.ALLOC:
            return alloc_time_s(self.device, op.bytes)
        if op.op_class == OpClass.RANK_LOOP:  # host time of a loop over the group's ranks
            return rank_loop_s(op.kind, len(key), op.batch)
        if op.op_class == OpClass.RANK_COPIES:
            return rank_copies_s(self.device, len(key), op.bytes, self.dtype)
        if op.op_class in COMPUTE_CLASSES:
            extra = (self.optimizer_extra_s if op.op_class == OpClass.OPTIMIZER
                     else 0.0 if self._local(op) else self.tp_extra_s)
            if self.gemm_shapes and op.op_class == OpClass.GEMM and op.m > 0:
                return self._shaped_gemm_s(op) * self.compute_pace + extra
            flops = op.flops / op.rate  # a slower kernel: its math takes 1/rate as long
            if op.op_class == OpClass.ATTENTION and op.m > 0:  # the fused kernel's rate at its shape
                flops /= fused_attention_rate(self.device.compute_capability, op.m, op.n, op.k, op.causal)
            return (compute_time_s(self.device, op.op_class, flops, op.bytes, self._dtype(op), op.strided_bytes)
                    * self.compute_pace + extra)
        if self.ideal_network or len(key) < 2:
            return 0.0
        dim = op.dim
        assert dim is not None, f"communication op {op.name!r} has no group"
        if dim == PP:
            fitted = self.fits.time_s("p2p", self._link_kind(key), op.bytes, 2)
            return fitted if fitted is not None else self.collectives.p2p(op.bytes, key[0], key[1]).time_s
        if op.op_class == OpClass.P2P:  # ring-attention K/V exchange: a ring all-gather of the blocks
            n = len(key)
            return self._collective(Collective.ALL_GATHER, op.bytes * n / (n - 1), key, dim)
        if op.op_class in COLLECTIVE_OPS:
            extra = self.device.tp_comm_overhead_s if dim == TP else 0.0
            size = op.bytes
            if (deepep := dim.deepep) is not None:  # one copy per destination node (rank in one node)
                nodes = len({r // self.gpus_per_node for r in key})
                size *= deepep_volume(deepep.experts, deepep.top_k, nodes if nodes > 1 else len(key), deepep.routing)
            return self._collective(op.op_class, size, key, dim) + extra
        raise invalid("op_class", op.op_class, "no cost model for it")

    def _collective(self, kind: str, size: float, group: tuple[int, ...], dim: CommGroup) -> float:
        fitted = self.fits.time_s(kind, self._link_kind(group), size, len(group))
        if fitted is not None:
            return fitted
        cost = self.collectives.collective(kind, size, group, concurrent=self.groups.concurrent(dim, group))
        return cost.time_s

    def comm_load(self, task: Task) -> tuple[int, float]:
        """(CTAs, bus GB/s) the NCCL kernel of communication task ``task`` runs with, from the
        collective model (:attr:`topo.collectives.CollectiveCost.channels`): what it takes from
        compute running beside it (:mod:`sim.interference`); (0, 0) for what is not an NCCL
        kernel (a fitted or fixed cost, a copy, no group)."""
        op = task.ops[-1]
        if self.ideal_network or op.duration_s is not None or not op.dim:
            return 0, 0.0
        key = (op.op_class, op.bytes, op.dim, task.rank, task.peer)
        found = self._loads.get(key)
        if found is None:
            if len(self._loads) >= COST_MEMO_ENTRIES:  # a coster shared by many plans stays bounded
                self._loads.clear()
            found = self._loads[key] = self._comm_load(op, op.dim, task.rank, task.peer)
        return found

    def _comm_load(self, op: Op, dim: CommGroup, rank: int, peer: int) -> tuple[int, float]:
        """:meth:`comm_load` of a task on ``rank`` (a send's ``peer``) whose last op is ``op`` over ``dim``."""
        if dim == PP and peer >= 0:
            cost = self.collectives.p2p(op.bytes, rank, peer)
        elif op.op_class in COLLECTIVE_OPS:
            group = self.group(dim, rank)
            if len(group) < 2:
                return 0, 0.0
            cost = self.collectives.collective(op.op_class, op.bytes, group,
                                               concurrent=self.groups.concurrent(dim, group))
        else:
            return 0, 0.0
        return cost.channels, cost.busbw_GBps

    def alone_time_s(self, kind: str, size: float, group: Sequence[int]) -> float:
        """Seconds of one collective ``kind`` of ``size`` bytes among ``group`` (kind "p2p": a send
        from ``group[0]`` to ``group[1]``) with the links to itself: the hardware profile's fit for
        the links it uses when there is one, else the analytic model without stream sharing (the
        flow model's uncontended reference, :mod:`sim.flow.decompose`)."""
        ranks = tuple(group)
        fitted = self.fits.time_s(kind, self._link_kind(ranks), size, len(ranks))
        if fitted is not None:
            return fitted
        if kind == "p2p":
            return self.collectives.p2p(size, ranks[0], ranks[1]).time_s
        return self.collectives.collective(kind, size, ranks).time_s

    def _link_kind(self, ranks: Sequence[int]) -> str:
        """Kind of link the ranks' traffic uses: the node's internal link, or the NIC's."""
        cluster = self.collectives.cluster
        if len({r // self.gpus_per_node for r in ranks}) > 1:
            return cluster.nic.kind if cluster.nic is not None else cluster.pcie.kind
        if cluster.intra_node == "nvswitch" and cluster.nvlink is not None:
            return cluster.nvlink.kind
        return cluster.pcie.kind

    # ---- tasks ----
    def cost_task(self, task: Task) -> CostedTask:
        """Duration and span layout of ``task`` (cached by its ops tuple's identity and where it
        runs, then by its ops' value and the groups it uses; a one-op communication task's price
        by its op without the name, see :meth:`_one_op_key`)."""
        ops = task.ops
        if len(ops) == 1 and task.lane != Lane.COMPUTE:
            return self._cost_one_op(task)
        entry = self._by_ops.get(id(ops))
        if entry is None:
            entry = self._by_ops[id(ops)] = _OpsPrices(ops)
        where = (task.rank, task.peer, task.lane)  # what a price reads of the task besides its ops
        cached = entry.by_where.get(where)
        if cached is None:
            cached = entry.by_where[where] = self._cost_by_value(task, entry)
        return cached

    def _cost_by_value(self, task: Task, entry: _OpsPrices) -> CostedTask:
        """:meth:`cost_task` of a task whose ops tuple was not priced where it runs: by the
        groups it uses (ranks of one group share a price), then by its ops' value (equal tuples
        made apart)."""
        if entry.dims is None:
            entry.dims = tuple(sorted({op.dim for op in task.ops if op.dim}, key=str))
        groups = (task.rank, task.peer) if task.peer >= 0 else tuple(self.group(d, task.rank) for d in entry.dims)
        cached = entry.by_groups.get(groups)
        if cached is None:
            key = (task.ops, groups)
            cached = self._task_cache.get(key)
            if cached is None:
                cached = self._task_cache[key] = self._layout(task)
            entry.by_groups[groups] = cached
        return cached

    def _cost_one_op(self, task: Task) -> CostedTask:
        """:meth:`_layout` of a one-op task off the compute lane, its duration and node crossing
        shared by the tasks whose op differs only in name and layer (its segment keeps its op)."""
        key = self._one_op_key(task)
        priced = self._unnamed.get(key)
        if priced is None:
            costed = self._layout(task)
            self._unnamed[key] = (costed.segments[0].duration_s, costed.crosses_nodes)
            return costed
        duration, crosses = priced
        return CostedTask(max(0.0, 0.0 + duration), (Segment(task.ops[0], 0.0, duration),), crosses)  # layout_ops

    @staticmethod
    def _one_op_key(task: Task) -> tuple[object, ...]:
        """What decides a one-op task's price off the compute lane: its rank and peer (the
        groups of its op's dimension, the send's end points, the nodes crossed) and every field
        of its op but the name, kind and layer (labels the price does not read)."""
        op = task.ops[0]
        return (task.rank, task.peer, op.lane, op.op_class, op.flops, op.bytes, op.dim, op.duration_s,
                op.concurrent, op.m, op.n, op.k, op.batch, op.rate, op.split, op.split_streams, op.causal, op.dtype,
                op.strided_bytes)

    def forget_tasks(self) -> None:
        """Drop the cached task costs (op prices stay): a coster shared by many graphs (explore's
        plans) keeps its memory bounded to one graph's tasks."""
        self._task_cache.clear()
        self._by_ops.clear()

    def layout(self, task: Task) -> CostedTask:
        """Duration and span layout of ``task``, not cached (for tasks made on the fly)."""
        return self._layout(task)

    def _layout(self, task: Task) -> CostedTask:
        ops = self._with_host_gaps(task.ops) if self.host_gap_s > 0 and task.lane == Lane.COMPUTE else task.ops
        durations = [self.op_duration(op, task.rank, task.peer) for op in ops]
        if not self.device_is_host and any(op.op_class == OpClass.HOST_SYNC for op in ops):
            durations = price_host_syncs(ops, durations)  # the GPU's wait for the host after each
        costed = layout_ops(ops, durations, self._crosses_nodes(task))
        if task.lane != Lane.COMPUTE:
            return costed
        wait = sum(d for op, d in zip(ops, durations, strict=True) if op.lane.startswith("comm") and not op.concurrent)
        dram = 0.0
        if self.device.cache_bytes > 0:
            dram = sum(dram_bound_s(self.device, op.op_class, op.flops, op.bytes, self._dtype(op))
                       for op in ops if op.op_class in COMPUTE_CLASSES and op.duration_s is None)
        return dataclasses.replace(costed, dram_s=dram, wait_s=wait) if (dram or wait) else costed

    def _with_host_gaps(self, ops: tuple[Op, ...]) -> tuple[Op, ...]:
        """The ops with the host's time before each compute op (a span on the host lane)."""
        out: list[Op] = []
        for op in ops:
            if op.op_class in COMPUTE_CLASSES and not op.concurrent:
                gap = self.device.host_overhead_s if self._local(op) else self.host_gap_s
                out.append(Op(Lane.HOST, op.kind, op.name + ".host", OpClass.FIXED, layer=op.layer, duration_s=gap))
            out.append(op)
        return tuple(out)

    def _crosses_nodes(self, task: Task) -> bool:
        if task.lane == Lane.COMPUTE:
            return False
        node = task.rank // self.gpus_per_node
        members: Sequence[int] = [task.peer] if task.peer >= 0 else [
            r for op in task.ops if op.dim for r in self.group(op.dim, task.rank)]
        return any(r // self.gpus_per_node != node for r in members)


def cost_graph(graph: TaskGraph, coster: TaskCoster) -> list[CostedTask]:
    """Costs of every task of ``graph``, by task id."""
    return [coster.cost_task(t) for t in graph.tasks]


@dataclass(slots=True)
class _OpsPrices:
    """The prices of one ops tuple (held, so that its id stays its own): by where a task runs
    (rank, peer, lane), and by the groups it uses (``dims``: the communication dimensions of
    its ops, sorted)."""

    ops: tuple[Op, ...]
    by_where: dict[tuple[int, int, str], CostedTask] = field(default_factory=dict)
    by_groups: dict[tuple[object, ...], CostedTask] = field(default_factory=dict)
    dims: tuple[CommGroup, ...] | None = None
