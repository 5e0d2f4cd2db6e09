"""The fast engine: the SimPy engine's schedule computed by one event-ordered pass, without SimPy.

It runs the same TaskGraph with the same rules as :class:`sim.engine.Engine` where that engine
shares nothing but the nodes' network channels:

- each (rank, lane) stream runs its ordered tasks in program order, each once its dependencies
  have ended; an unordered task starts once its dependencies have ended;
- tasks with one collective ``group`` key start executing together when the last member has
  arrived (each member's span starts at its own arrival) and execute the last arriver's cost
  (on its node's channel when it crosses nodes);
- a task with ``holds`` ends no earlier than the tasks it holds on;
- a transfer that crosses nodes uses the network channels of its members' nodes (its own node's
  when it has no rendezvous) and progresses at rate 1/k, k the most transfers of *different*
  streams on one of them (processor sharing, rates recomputed at every start and end, as
  :mod:`sim.channels` does).

Not modelled here (the SimPy engine runs them): CPU cores shared by a host's ranks, flow-level
networks, stragglers. Times agree with the SimPy engine to float round-off (tested to 1e-9).
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

import numpy as np

from schedules.taskgraph import TaskGraph
from sim.costing import CostedTask
from sim.engine import EngineResult
from sim.fluid import EPS, time_resolution_s
from sim.timeline_writer import write_timeline

_END, _CHANNEL = 0, 1  # event kinds: a task's execution ends / a channel's next transfer may end


class _Network:
    """The nodes' network channels: active transfers (executing task, work left in seconds alone,
    channels, stream), each progressing at 1/k where k is the most distinct streams on any of its
    channels (processor sharing, as :class:`sim.channels.SharedChannels`)."""

    __slots__ = ("active", "last", "version")

    def __init__(self) -> None:
        self.active: dict[int, list[Any]] = {}  # task -> [work left, channels, stream, rate]
        self.last = 0.0
        self.version = 0

    def advance(self, now: float) -> list[int]:
        """Progress to ``now``; returns the tasks whose transfers are done (in start order)."""
        elapsed = now - self.last
        self.last = now
        tol = time_resolution_s(now)
        done = []
        for i, t in self.active.items():
            if elapsed > 0:
                t[0] -= elapsed * t[3]
            if t[0] <= EPS or t[0] <= tol * t[3]:
                done.append(i)
        for i in done:
            del self.active[i]
        return done

    def next_end(self, now: float) -> float:
        """Recompute the rates; the time the next transfer would end (inf if none)."""
        if not self.active:
            return float("inf")
        streams: dict[int, set[str]] = {}
        for t in self.active.values():
            for ch in t[1]:
                streams.setdefault(ch, set()).add(t[2])
        for t in self.active.values():
            t[3] = 1.0 / max(len(streams[ch]) for ch in t[1])
        return now + min(t[0] / t[3] for t in self.active.values())


class ListEngine:
    """Runs one TaskGraph on nodes of ``gpus_per_node`` ranks (for network channel sharing)."""

    def __init__(self, graph: TaskGraph, costs: list[CostedTask], *, gpus_per_node: int = 1 << 30) -> None:
        self.graph, self.costs, self.gpus_per_node = graph, costs, gpus_per_node

    def run(self, detail: str = "op", meta: dict[str, Any] | None = None) -> EngineResult:
        """Simulate until every task ended; raises RuntimeError on a dependency deadlock."""
        start, end = self.times()
        timeline = write_timeline(self.graph, self.costs, start, end, detail, meta)
        return EngineResult(start, end, timeline)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (seconds) of every task."""
        return _Run(self.graph, self.costs, self.gpus_per_node).go()


class _Run:
    """The state of one pass."""

    def __init__(self, graph: TaskGraph, costs: list[CostedTask], gpus_per_node: int) -> None:
        tasks = graph.tasks
        n = len(tasks)
        self.graph, self.costs, self.gpn = graph, costs, gpus_per_node
        self.start = [float("nan")] * n
        self.end = [float("nan")] * n
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.pending = [0] * n
        for i, ds in enumerate(graph.deps):
            self.pending[i] = len(ds)
            for d in ds:
                self.succ[d].append(i)
        for ids in graph.streams().values():
            prev = -1
            for i in ids:
                if tasks[i].ordered:
                    if prev >= 0:
                        self.pending[i] += 1
                        self.succ[prev].append(i)
                    prev = i
        self.holders: list[list[int]] = [[] for _ in range(n)]
        self.holds_left = [0] * n
        for i, hs in graph.holds.items():
            self.holds_left[i] = len(hs)
            for h in hs:
                self.holders[h].append(i)
        self.executed = [False] * n
        sizes = Counter(t.group for t in tasks if t.group)
        self.group_left = dict(sizes)
        self.group_members: dict[str, list[int]] = {g: [] for g in sizes}
        self.network = _Network()
        self.channel_tasks: dict[int, list[int]] = {}  # executing task -> the members it finishes
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0

    def go(self) -> tuple[np.ndarray, np.ndarray]:
        for i in range(len(self.pending)):
            if self.pending[i] == 0:
                self._arrive(i, 0.0)
        heap = self.heap
        while heap:
            now, _, kind, a, b = heapq.heappop(heap)
            if kind == _END:
                self._executed(a, now)
            elif self.network.version == a:
                self._finish_transfers(self.network.advance(now), now)
                self._schedule(now)
        end = np.asarray(self.end, float)
        stuck = np.isnan(end)
        if stuck.any():
            t = self.graph.tasks[int(np.flatnonzero(stuck)[0])]
            raise RuntimeError(f"deadlock: {int(stuck.sum())} tasks never ran, e.g. rank {t.rank} "
                               f"{t.lane} {t.name} (step {t.step}, stage {t.stage}, mb {t.microbatch})")
        return np.asarray(self.start, float), end

    def _push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, a, b))

    def _arrive(self, i: int, now: float) -> None:
        """Task ``i``'s dependencies have ended: it starts (or joins its collective)."""
        self.start[i] = now
        group = self.graph.tasks[i].group
        if not group:
            self._execute(i, [i], now)
            return
        self.group_members[group].append(i)
        self.group_left[group] -= 1
        if self.group_left[group] == 0:
            self._execute(i, self.group_members[group], now)

    def _execute(self, i: int, members: list[int], now: float) -> None:
        """Execute task ``i``'s cost for ``members`` (itself, or its collective's members)."""
        cost = self.costs[i]
        if not cost.crosses_nodes:
            for m in members:
                self._push(now + cost.duration_s, _END, m)
            return
        task = self.graph.tasks[i]
        channels = tuple(sorted({self.graph.tasks[m].rank // self.gpn for m in members}))
        finished = self.network.advance(now)
        self.channel_tasks[i] = members
        self.network.active[i] = [cost.duration_s, channels, task.lane, 1.0]
        self._finish_transfers(finished, now)
        self._schedule(now)

    def _finish_transfers(self, done: list[int], now: float) -> None:
        for i in done:
            for m in self.channel_tasks.pop(i):
                self._executed(m, now)

    def _schedule(self, now: float) -> None:
        self.network.version += 1
        t = self.network.next_end(now)
        if t < float("inf"):
            self._push(t, _CHANNEL, self.network.version)

    def _executed(self, i: int, now: float) -> None:
        """Task ``i``'s own work is done; it ends once the tasks it holds on have."""
        self.executed[i] = True
        if self.holds_left[i] == 0:
            self._ended(i, now)

    def _ended(self, i: int, now: float) -> None:
        self.end[i] = now
        for s in self.succ[i]:
            self.pending[s] -= 1
            if self.pending[s] == 0:
                self._arrive(s, now)
        for h in self.holders[i]:
            self.holds_left[h] -= 1
            if self.holds_left[h] == 0 and self.executed[h]:
                self._ended(h, now)
