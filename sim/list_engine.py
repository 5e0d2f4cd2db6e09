"""The fast engine: the SimPy engine's schedule computed by one event-ordered pass, without SimPy.

It runs the same TaskGraph with the same rules as :class:`sim.engine.Engine` where that engine
shares nothing but the nodes' network channels:

- each (rank, lane) stream runs its ordered tasks in program order, each once its dependencies
  have ended; an unordered task starts once its dependencies have ended;
- tasks with one collective ``group`` key start executing together when the last member has
  arrived (each member's span starts at its own arrival) and execute the last arriver's cost
  (on its node's channel when it crosses nodes);
- a task with ``holds`` ends no earlier than the tasks it holds on;
- with ``graph.single_queue`` (one hardware queue per GPU) a task starts no earlier than the task
  issued just before it on its rank (:func:`sim.device_queue.issue_pairs`);
- a transfer that crosses nodes uses the network channels of its members' nodes (its own node's
  when it has no rendezvous) and progresses at rate 1/k, k the most transfers of *different*
  streams on one of them (processor sharing, rates recomputed at every start and end, as
  :mod:`sim.channels` does).

Not modelled here (the SimPy engine runs them): CPU cores shared by a host's ranks, flow-level
networks, stragglers. Times agree with the SimPy engine to float round-off (tested to 1e-9).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from core.taskgraph import TaskGraph
from core.timeline_meta import TimelineMeta
from sim.costing import CostedTask
from sim.device_queue import issue_pairs
from sim.engine_result import EngineResult
from sim.fluid import EPS, time_resolution_s
from sim.list_network import Network, Transfer
from sim.list_passes import kernel_times, program_of, use_kernel
from sim.list_program import Program
from sim.timeline_writer import write_timeline


class ListEngine:
    """Runs one TaskGraph on nodes of ``gpus_per_node`` ranks (for network channel sharing)."""

    def __init__(self, graph: TaskGraph, costs: list[CostedTask], *, gpus_per_node: int = 1 << 30,
                 passes: GraphPasses | None = None) -> None:
        self.graph, self.costs, self.gpus_per_node = graph, costs, gpus_per_node
        self._passes = passes

    @property
    def passes(self) -> GraphPasses:
        """The price-independent part of a pass over the graph (made once)."""
        if self._passes is None:
            self._passes = GraphPasses(self.graph)
        return self._passes

    def with_costs(self, costs: list[CostedTask]) -> ListEngine:
        """The same graph with other prices (its compiled form shared)."""
        return ListEngine(self.graph, costs, gpus_per_node=self.gpus_per_node, passes=self.passes)

    def run(self, detail: str = "op", meta: TimelineMeta | None = None) -> EngineResult:
        """Simulate until every task ended; raises RuntimeError on a dependency deadlock."""
        start, end = self.times()
        timeline = write_timeline(self.graph, self.costs, start, end, detail, meta)
        return EngineResult(start, end, timeline)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (seconds) of every task."""
        return self.passes.times([c.duration_s for c in self.costs], [c.crosses_nodes for c in self.costs],
                                 self.gpus_per_node)


@dataclass(frozen=True)
class CompiledGraph:
    """What a pass needs of a TaskGraph, independent of its prices (reusable across prices):
    per task its successors (dependants and the next ordered task of its stream), how many
    predecessors it waits for, the tasks holding on it and how many it holds on, its collective
    group, rank and lane, and the task whose start it releases (the next issued on its rank
    with one hardware queue, else -1)."""

    graph: TaskGraph
    succ: list[list[int]]
    pending: list[int]
    holders: list[list[int]]
    holds: list[int]
    group: list[str]
    group_sizes: dict[str, int]
    rank: list[int]
    lane: list[str]
    issue_next: list[int]


def compile_graph(graph: TaskGraph) -> CompiledGraph:
    """The price-independent part of a pass over ``graph``."""
    tasks = graph.tasks
    n = len(tasks)
    succ: list[list[int]] = [[] for _ in range(n)]
    pending = [0] * n
    for i, ds in enumerate(graph.deps):
        pending[i] = len(ds)
        for d in ds:
            succ[d].append(i)
    for ids in graph.streams().values():
        prev = -1
        for i in ids:
            if tasks[i].ordered:
                if prev >= 0:
                    pending[i] += 1
                    succ[prev].append(i)
                prev = i
    holders: list[list[int]] = [[] for _ in range(n)]
    holds = [0] * n
    for i, hs in graph.holds.items():
        holds[i] = len(hs)
        for h in hs:
            holders[h].append(i)
    issue_next = [-1] * n
    if graph.single_queue:
        for earlier, later in zip(*issue_pairs(graph), strict=True):
            issue_next[earlier] = int(later)
            pending[later] += 1
    group = [t.group for t in tasks]
    return CompiledGraph(graph, succ, pending, holders, holds, group, dict(Counter(g for g in group if g)),
                         [t.rank for t in tasks], [t.lane for t in tasks], issue_next)


class GraphPasses:
    """Passes over one TaskGraph with any prices: its price-independent structure is made once,
    for the loop that runs it (the reference pass's lists, or the compiled kernel's arrays when
    :func:`sim.list_passes.use_kernel`; both give the same times bit for bit)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.graph = graph

    @cached_property
    def reference(self) -> CompiledGraph:
        return compile_graph(self.graph)

    @cached_property
    def program(self) -> Program:
        return program_of(self.graph)

    def times(self, durations: np.ndarray | list[float], crosses: np.ndarray | list[bool],
              gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (seconds) of every task with these per-task durations (seconds) and
        fabric flags; raises RuntimeError on a dependency deadlock."""
        if self.graph.single_queue or not use_kernel(len(self.graph)):  # the kernel has no issue order
            return run_times(self.reference, _values(durations), _values(crosses), gpus_per_node)
        start, end = kernel_times(self.program, durations, crosses, gpus_per_node)
        _check_ended(self.graph, end)
        return start, end


def _values(values: np.ndarray | list) -> list:  # type: ignore[type-arg]
    """Python numbers (the reference pass computes on Python floats)."""
    return values.tolist() if isinstance(values, np.ndarray) else values


def _check_ended(graph: TaskGraph, end: np.ndarray) -> None:
    """Raise RuntimeError naming a task that never ran (a dependency deadlock), if any."""
    stuck = np.isnan(end)
    if stuck.any():
        t = graph.tasks[int(np.flatnonzero(stuck)[0])]
        raise RuntimeError(f"deadlock: {int(stuck.sum())} tasks never ran, e.g. rank {t.rank} "
                           f"{t.lane} {t.name} (step {t.step}, stage {t.stage}, mb {t.microbatch})")


def run_times(compiled: CompiledGraph, durations: list[float], crosses: list[bool],
              gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds) of every task of a compiled graph with these per-task durations
    and fabric flags (:class:`sim.costing.CostedTask`'s ``duration_s``, ``crosses_nodes``)."""
    return _Run(compiled, durations, crosses, gpus_per_node).go()


def _no_end(i: int, now: float) -> None:
    """What a task's end triggers outside a pass: nothing."""


class _Run:
    """The state of one pass. The common path (a task that is neither a collective member nor a
    transfer across nodes: it ends ``duration`` after it starts) is inlined in :meth:`go`; events
    are ordered by (time, push order)."""

    def __init__(self, g: CompiledGraph, durations: list[float], crosses: list[bool], gpus_per_node: int) -> None:
        n = len(g.pending)
        self.g, self.dur, self.crosses, self.gpn = g, durations, crosses, gpus_per_node
        self.start = [float("nan")] * n
        self.end = [float("nan")] * n
        self.pending = list(g.pending)
        self.holds_left = list(g.holds)
        self.executed = [False] * n
        self.group_left = dict(g.group_sizes)
        self.group_members: dict[str, list[int]] = {k: [] for k in g.group_sizes}
        self.network = Network()
        self.channel_tasks: dict[int, list[int]] = {}  # executing task -> the members it finishes
        self.heap: list[tuple[float, int, int, int]] = []  # (time, push order, task, transfer version or -1)
        self.order = itertools.count()
        # 0: ends ``duration`` after it starts (inlined); 1: a transfer of its own (no collective,
        # inlined); 2: a collective member (its last arrival executes it)
        self.path = [2 if gr else int(c) for gr, c in zip(g.group, crosses, strict=True)]
        self.on_ended: Callable[[int, float], None] = _no_end  # set by go

    def go(self) -> tuple[np.ndarray, np.ndarray]:
        succ, holders, dur, path = self.g.succ, self.g.holders, self.dur, self.path
        start, end, pending, holds_left, executed = self.start, self.end, self.pending, self.holds_left, self.executed
        heap, order, network = self.heap, self.order, self.network
        transfers, on_channel, streams = network.transfers, network.on_channel, network.streams
        push, pop = heapq.heappush, heapq.heappop
        arrive, retime_all = self._arrive, self._retime
        channel = [r // self.gpn for r in self.g.rank]
        lane, issue_next = self.g.lane, self.g.issue_next

        def transfer(i: int, now: float) -> None:
            """Task ``i`` starts as a transfer of its own on its node's channel (as
            :meth:`_execute` with :meth:`Network.start`, inlined)."""
            start[i] = now
            ch, stream = channel[i], lane[i]
            counts = streams.get(ch)
            if counts is None:
                counts = streams[ch] = {}
                on = on_channel[ch] = set()
            else:
                on = on_channel[ch]
            # k grows: the others' rates change (advanced at the old rates, re-timed at the new)
            touched = network.advance_sharing(ch, now) if stream not in counts and on else None
            t = transfers[i] = Transfer(i, dur[i], (ch,), stream, now)
            on.add(i)
            counts[stream] = counts.get(stream, 0) + 1
            if touched:
                retime_all(touched, now)
            t.rate = rate = 1.0 / len(counts)
            t.version = 1
            left = t.left
            push(heap, (now if left <= EPS or left <= time_resolution_s(now) * rate else now + max(left, 0.0) / rate,
                        next(order), i, 1))

        def begin(s: int, now: float) -> None:
            """Task ``s`` may start: it starts, then so does each next issued task it was the last wait of."""
            while True:
                kind = path[s]
                if kind == 0:
                    start[s] = now
                    push(heap, (now + dur[s], next(order), s, -1))
                elif kind == 1:
                    transfer(s, now)
                else:
                    arrive(s, now)
                s = issue_next[s]
                if s < 0:
                    return
                pending[s] -= 1
                if pending[s]:
                    return

        def ended(i: int, now: float) -> None:
            """Task ``i`` ended: its successors whose last dependency it was start now."""
            end[i] = now
            for s in succ[i]:
                left = pending[s] - 1
                pending[s] = left
                if left == 0:
                    begin(s, now)
            for h in holders[i]:
                holds_left[h] -= 1
                if holds_left[h] == 0 and executed[h]:
                    ended(h, now)

        self.on_ended = ended
        for i in [i for i, left in enumerate(pending) if left == 0]:  # listed first: begin releases others
            begin(i, 0.0)
        channel_tasks = self.channel_tasks
        while heap:
            now, _, a, version = pop(heap)
            if version < 0:
                executed[a] = True
                if holds_left[a] == 0:
                    ended(a, now)
                continue
            xfer = transfers.get(a)
            if xfer is None or xfer.version != version:
                continue
            touched = network.finish(a, now)
            if touched:
                retime_all(touched, now)
            for m in channel_tasks.pop(a, None) or (a,):
                executed[m] = True
                if holds_left[m] == 0:
                    ended(m, now)
        # break the closures' cycles (ended calls itself; both hold this run): the graph they
        # reach is then freed when the pass is, not by a later cyclic collection
        ended = begin = None  # type: ignore[assignment]
        self.on_ended = _no_end
        end_s = np.asarray(end, float)
        _check_ended(self.g.graph, end_s)
        return np.asarray(start, float), end_s

    def _arrive(self, i: int, now: float) -> None:
        """Task ``i``'s dependencies have ended: it starts (or joins its collective)."""
        self.start[i] = now
        group = self.g.group[i]
        if not group:
            self._execute(i, [i], now)
            return
        self.group_members[group].append(i)
        self.group_left[group] -= 1
        if self.group_left[group] == 0:
            self._execute(i, self.group_members[group], now)

    def _execute(self, i: int, members: list[int], now: float) -> None:
        """Execute task ``i``'s cost for ``members`` (itself, or its collective's members)."""
        if not self.crosses[i]:
            end = now + self.dur[i]
            for m in members:
                heapq.heappush(self.heap, (end, next(self.order), m, -1))
            return
        rank, gpn = self.g.rank, self.gpn
        channels = (rank[i] // gpn,) if len(members) == 1 else tuple(sorted({rank[m] // gpn for m in members}))
        self.channel_tasks[i] = members
        self._retime(self.network.start(i, self.dur[i], channels, self.g.lane[i], now), now)

    def _retime(self, transfers: list[Transfer], now: float) -> None:
        """Push the new end of every transfer whose rate may have changed; one with no time
        left at its rate (within the resolution) ends now."""
        tol = time_resolution_s(now)
        retime, heap, order = self.network.retime, self.heap, self.order
        for t in transfers:
            end = retime(t)
            if t.left <= EPS or t.left <= tol * t.rate:
                end = now
            heapq.heappush(heap, (end, next(order), t.task, t.version))

    def _executed(self, i: int, now: float) -> None:
        """Task ``i``'s own work is done; it ends once the tasks it holds on have."""
        self.executed[i] = True
        if self.holds_left[i] == 0:
            self.on_ended(i, now)
