"""The SimPy engine: runs a costed TaskGraph on per-rank streams and writes a Timeline.

Each (rank, lane) of ordered tasks is one stream process that runs its tasks in program order,
each after its dependencies (as kernels on a CUDA stream wait on events). Unordered tasks
(pipeline sends) start as soon as their dependencies are done. Tasks that share a collective
``group`` key run together when the last member arrives; each member's span starts at its own
arrival, since a rank that reached a collective (or a posted receive) is inside it, waiting for
its peers, as an NCCL kernel or a gloo call is. A task with ``graph.holds`` ends no earlier than
those tasks. Transfers that leave the node share the network channels of their members' nodes
(a task without rendezvous: its own node's) with transfers of other streams
(:mod:`sim.channels`); with ``cores_per_node`` (CPU hosts whose devices are processes) compute tasks share the node's cores (:mod:`sim.cores`), and so do collectives (gloo
copies and reduces on a worker thread of each member process). With a ``flows`` factory
(fidelity "flow") communication tasks run as max-min fair flows on the cluster's links instead
(:mod:`sim.flow`). With ``graph.single_queue`` (one hardware queue per GPU) a task starts no
earlier than the task issued just before it on its rank (:mod:`sim.device_queue`). With ``jitter_cv`` > 0 a collective starts the expected lateness of its slowest
member after its last arrival (:mod:`sim.stragglers`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import simpy

from core.taskgraph import TaskGraph
from core.timeline_meta import TimelineMeta
from core.vocab import Kind, Lane
from sim.channels import SharedChannels
from sim.cores import SharedCores
from sim.costing import CostedTask
from sim.device_queue import issue_pairs
from sim.engine_result import EngineResult
from sim.stragglers import straggler_delay_s
from sim.timeline_writer import write_timeline

if TYPE_CHECKING:
    from sim.flow.transport import FlowTransport

# Collectives whose data movement runs on the CPU hosts' cores (gloo's worker threads); p2p
# transfers are small pipeline messages, mostly latency.
CPU_COLLECTIVES = (Kind.ALL_REDUCE, Kind.ALL_GATHER, Kind.REDUCE_SCATTER, Kind.BROADCAST)


@dataclass
class _Rendezvous:
    """Members of one collective instance meeting before it starts."""

    size: int
    arrived: int = 0
    started: simpy.Event | None = None
    finished: simpy.Event | None = None
    ranks: list[int] = field(default_factory=list)


class Engine:
    """Runs one TaskGraph on nodes of ``gpus_per_node`` ranks (for network channel sharing).

    ``cores_per_node``: the node's CPU cores are shared by its ranks' compute (None: each rank
    has its own device), and ``memory_streams_per_node`` (in units of one process's memory
    bandwidth) by the part of it streaming from memory (``CostedTask.dram_s``);
    ``rank_weight[r]``: how many identical ranks simulated rank r stands for; ``flows``: builds
    the flow network that runs communication tasks (None: analytic durations).
    """

    def __init__(self, graph: TaskGraph, costs: list[CostedTask], *, gpus_per_node: int = 1 << 30,
                 cores_per_node: float | None = None, memory_streams_per_node: float | None = None,
                 rank_weight: dict[int, float] | None = None,
                 flows: Callable[[simpy.Environment], FlowTransport] | None = None,
                 jitter_cv: float = 0.0, sync_sizes: Mapping[int, int] | None = None) -> None:
        self.graph, self.costs = graph, costs
        self.gpus_per_node = gpus_per_node
        self.env = simpy.Environment()
        self.channels = SharedChannels(self.env)
        self.cores = SharedCores(self.env, cores_per_node, memory_streams_per_node) if cores_per_node else None
        self.rank_weight = rank_weight or {}
        self.flows = flows(self.env) if flows is not None else None
        n = len(graph.tasks)
        self.done = [self.env.event() for _ in range(n)]
        self.issue_prev = [-1] * n  # the task issued just before it on its rank (one hardware queue)
        self.started: list[simpy.Event] = []
        if graph.single_queue:
            for earlier, later in zip(*issue_pairs(graph), strict=True):
                self.issue_prev[later] = int(earlier)
            self.started = [self.env.event() for _ in range(n)]
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        sizes = Counter(t.group for t in graph.tasks if t.group)
        self.rendezvous = {g: _Rendezvous(size) for g, size in sizes.items()}
        self.jitter_cv = jitter_cv
        self.sync_sizes = dict(sync_sizes or {})  # collective task id -> ranks it synchronises
        self.compute_since_sync: dict[int, float] = {}  # per rank: compute seconds since its last collective

    def run(self, detail: str = "op", meta: TimelineMeta | None = None) -> EngineResult:
        """Simulate until every task finished; raises RuntimeError on a dependency deadlock."""
        self.times()
        timeline = write_timeline(self.graph, self.costs, self.start, self.end, detail, meta)
        return EngineResult(self.start, self.end, timeline)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (seconds) of every task (the simulation, without writing a Timeline)."""
        for ids in self.graph.streams().values():
            ordered = [i for i in ids if self.graph.tasks[i].ordered]
            if ordered:
                self.env.process(self._stream(ordered))
            for i in ids:
                if not self.graph.tasks[i].ordered:
                    self.env.process(self._stream([i]))
        self.env.run()
        stuck = np.isnan(self.end)
        if stuck.any():
            first = int(np.flatnonzero(stuck)[0])
            t = self.graph.tasks[first]
            raise RuntimeError(f"deadlock: {int(stuck.sum())} tasks never ran, e.g. rank {t.rank} "
                               f"{t.lane} {t.name} (step {t.step}, stage {t.stage}, mb {t.microbatch})")
        return self.start, self.end

    def _stream(self, ids: list[int]):  # type: ignore[no-untyped-def]
        deps, done = self.graph.deps, self.done
        for i in ids:
            for d in deps[i]:
                if not done[d].processed:
                    yield done[d]
            if self.issue_prev[i] >= 0 and not self.started[self.issue_prev[i]].processed:
                yield self.started[self.issue_prev[i]]
            task = self.graph.tasks[i]
            self.start[i] = self.env.now
            if self.started:
                self.started[i].succeed()
            if task.group:
                yield from self._collective(i)
            else:
                delay = self._straggler_delay(i, [task.rank])
                if delay > 0:
                    yield self.env.timeout(delay)
                yield self._execute(i)
            for h in self.graph.holds.get(i, ()):
                if not done[h].processed:
                    yield done[h]
            self.end[i] = self.env.now
            if self.jitter_cv > 0 and task.lane == Lane.COMPUTE:
                self._count_compute(i, task.rank)
            done[i].succeed()

    def _count_compute(self, i: int, rank: int) -> None:
        """Straggler model: add compute task ``i`` to its rank's compute since the rank was last
        held back by a collective (waiting on one re-aligns the ranks)."""
        if any(d in self.sync_sizes for d in self.graph.deps[i]):
            self.compute_since_sync[rank] = 0.0
        self.compute_since_sync[rank] = self.compute_since_sync.get(rank, 0.0) + self.end[i] - self.start[i]

    def _collective(self, i: int):  # type: ignore[no-untyped-def]
        rv = self.rendezvous[self.graph.tasks[i].group]
        if rv.started is None:
            rv.started = self.env.event()
        rv.arrived += 1
        rv.ranks.append(self.graph.tasks[i].rank)
        if rv.arrived == rv.size:
            delay = self._straggler_delay(i, rv.ranks)
            rv.finished = (self._execute(i, rv.ranks) if delay <= 0
                           else self.env.process(self._after(delay, i, rv.ranks)))
            rv.started.succeed()
        else:
            yield rv.started
        assert rv.finished is not None
        yield rv.finished

    def _straggler_delay(self, i: int, members: list[int]) -> float:
        """Seconds collective task ``i`` still waits for its slowest rank (:mod:`sim.stragglers`):
        its data is ready when its dependencies ended; the slowest of the ``sync_sizes[i]`` ranks
        it synchronises (a folded rank stands for members the graph does not hold) gets there the
        expected lateness later, from the members' mean compute since a collective last held them
        back. A stream still busy past that point waits no more. 0 for other tasks or the model off."""
        n = self.sync_sizes.get(i, 0)
        if self.jitter_cv <= 0 or n < 2:
            return 0.0
        compute = [self.compute_since_sync.get(r, 0.0) for r in members]
        ready = max((float(self.end[d]) for d in self.graph.deps[i]), default=float(self.env.now))
        lateness = straggler_delay_s(self.jitter_cv, sum(compute) / len(compute), n)
        return max(0.0, ready + lateness - self.env.now)

    def _after(self, delay_s: float, i: int, members: list[int]):  # type: ignore[no-untyped-def]
        yield self.env.timeout(delay_s)
        yield self._execute(i, members)

    def _execute(self, i: int, members: list[int] | None = None) -> simpy.Event:
        cost = self.costs[i]
        task = self.graph.tasks[i]
        if self.flows is not None and self.flows.handles(task):
            return self.flows.run(task)
        if cost.crosses_nodes:  # the channels of every member's node (a folded task: its own)
            nodes = sorted({r // self.gpus_per_node for r in (members or [task.rank])})
            return self.channels.transfer(cost.duration_s, tuple(f"net:{n}" for n in nodes), task.lane)
        if self.cores is not None and task.lane == Lane.COMPUTE:
            return self.env.process(self._on_cpu(cost, task.rank))
        if self.cores is not None and task.kind in CPU_COLLECTIVES:
            return self.env.process(self._collective_on_cpu(cost.duration_s, members or [task.rank]))
        return self.env.timeout(cost.duration_s)

    def _collective_on_cpu(self, duration_s: float, members: list[int]):  # type: ignore[no-untyped-def]
        """A collective of CPU processes (gloo): each member's worker thread copies and reduces on
        its node's cores for the whole call, beside the ranks' compute. ``duration_s`` is the
        call's time with its members alone on the cores (as the microbenchmark measured it), so
        each node gets that much work at the members' own share of the cores: alone it takes
        ``duration_s``; ranks computing meanwhile slow it down and are slowed down by it."""
        assert self.cores is not None
        load: dict[int, float] = {}
        for rank in members:
            node = rank // self.gpus_per_node
            load[node] = load.get(node, 0.0) + self.rank_weight.get(rank, 1.0)
        capacity = self.cores.capacity["core"]
        yield self.env.all_of([self.cores.run(duration_s * min(1.0, capacity / weight), node, weight)
                               for node, weight in sorted(load.items())])

    def _on_cpu(self, cost: CostedTask, rank: int):  # type: ignore[no-untyped-def]
        """A compute task on a CPU host: its core work, its memory-streaming work, and the time
        it waits in communication inside it (which uses no core)."""
        assert self.cores is not None
        node, weight = rank // self.gpus_per_node, self.rank_weight.get(rank, 1.0)
        wait_s = min(cost.wait_s, cost.duration_s)
        memory_s = min(cost.dram_s, cost.duration_s - wait_s)
        yield self.cores.run(cost.duration_s - memory_s - wait_s, node, weight)
        if memory_s > 0:
            yield self.cores.run(memory_s, node, weight, resource="memory")
        if wait_s > 0:
            yield self.env.timeout(wait_s)
