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
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedules.taskgraph import TaskGraph
from sim.costing import CostedTask
from sim.engine import EngineResult
from sim.fluid import EPS, time_resolution_s
from sim.timeline_writer import write_timeline

_END, _TRANSFER = 0, 1  # event kinds: a task's execution ends / a transfer may end


class _Transfer:
    """A transfer in progress: ``left`` seconds of work (as long alone) at ``rate`` since ``last``."""

    __slots__ = ("channels", "last", "left", "rate", "stream", "task", "version")

    def __init__(self, task: int, left: float, channels: tuple[int, ...], stream: str, now: float) -> None:
        self.task, self.left, self.channels, self.stream = task, left, channels, stream
        self.rate, self.last, self.version = 1.0, now, 0


class _Network:
    """The nodes' network channels: each transfer progresses at 1/k, k the most distinct streams
    on any of its channels (processor sharing, as :class:`sim.channels.SharedChannels`). A start
    or an end changes the rates of the transfers sharing its channels only, so only those are
    advanced and re-timed."""

    def __init__(self) -> None:
        self.transfers: dict[int, _Transfer] = {}
        self.on_channel: dict[int, set[int]] = {}
        self.streams: dict[int, Counter[str]] = {}

    def start(self, i: int, work_s: float, channels: tuple[int, ...], stream: str, now: float) -> list[_Transfer]:
        """Add transfer ``i``; returns the transfers whose rate may have changed (advanced to now)."""
        touched = self._advance_sharing(channels, now)
        t = self.transfers[i] = _Transfer(i, work_s, channels, stream, now)
        for ch in channels:
            self.on_channel.setdefault(ch, set()).add(i)
            self.streams.setdefault(ch, Counter())[stream] += 1
        return [*touched, t]

    def finish(self, i: int, now: float) -> list[_Transfer]:
        """Remove transfer ``i``; returns the transfers whose rate may have changed (advanced to now)."""
        t = self.transfers.pop(i)
        for ch in t.channels:
            self.on_channel[ch].discard(i)
            counts = self.streams[ch]
            counts[t.stream] -= 1
            if counts[t.stream] == 0:
                del counts[t.stream]
        return self._advance_sharing(t.channels, now)

    def _advance_sharing(self, channels: tuple[int, ...], now: float) -> list[_Transfer]:
        ids = {j for ch in channels for j in self.on_channel.get(ch, ())}
        out = []
        for j in sorted(ids):
            t = self.transfers[j]
            t.left -= (now - t.last) * t.rate
            t.last = now
            out.append(t)
        return out

    def retime(self, t: _Transfer) -> float:
        """Recompute ``t``'s rate; the time it would end at that rate."""
        t.rate = 1.0 / max(len(self.streams[ch]) for ch in t.channels)
        t.version += 1
        return t.last + max(t.left, 0.0) / t.rate


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
        return run_times(compile_graph(self.graph), [c.duration_s for c in self.costs],
                         [c.crosses_nodes for c in self.costs], self.gpus_per_node)


@dataclass(frozen=True)
class CompiledGraph:
    """What a pass needs of a TaskGraph, independent of its prices (reusable across prices):
    per task its successors (dependants and the next ordered task of its stream), how many
    predecessors it waits for, the tasks holding on it and how many it holds on, its collective
    group, rank and lane."""

    graph: TaskGraph
    succ: list[list[int]]
    pending: list[int]
    holders: list[list[int]]
    holds: list[int]
    group: list[str]
    group_sizes: dict[str, int]
    rank: list[int]
    lane: list[str]


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
    group = [t.group for t in tasks]
    return CompiledGraph(graph, succ, pending, holders, holds, group, dict(Counter(g for g in group if g)),
                         [t.rank for t in tasks], [t.lane for t in tasks])


def run_times(compiled: CompiledGraph, durations: list[float], crosses: list[bool],
              gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds) of every task of a compiled graph with these per-task durations
    and fabric flags (:class:`sim.costing.CostedTask`'s ``duration_s``, ``crosses_nodes``)."""
    return _Run(compiled, durations, crosses, gpus_per_node).go()


class _Run:
    """The state of one pass."""

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
            else:
                xfer = self.network.transfers.get(a)
                if xfer is not None and xfer.version == b:
                    self._transfer_done(a, now)
        end = np.asarray(self.end, float)
        stuck = np.isnan(end)
        if stuck.any():
            t = self.g.graph.tasks[int(np.flatnonzero(stuck)[0])]
            raise RuntimeError(f"deadlock: {int(stuck.sum())} tasks never ran, e.g. rank {t.rank} "
                               f"{t.lane} {t.name} (step {t.step}, stage {t.stage}, mb {t.microbatch})")
        return np.asarray(self.start, float), end

    def _push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, a, b))

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
                self._push(end, _END, m)
            return
        channels = tuple(sorted({self.g.rank[m] // self.gpn for m in members}))
        self.channel_tasks[i] = members
        self._retime(self.network.start(i, self.dur[i], channels, self.g.lane[i], now), now)

    def _transfer_done(self, i: int, now: float) -> None:
        self._retime(self.network.finish(i, now), now)
        for m in self.channel_tasks.pop(i):
            self._executed(m, now)

    def _retime(self, transfers: list[_Transfer], now: float) -> None:
        """Push the new end of every transfer whose rate may have changed; one with no time
        left at its rate (within the resolution) ends now."""
        tol = time_resolution_s(now)
        for t in transfers:
            end = self.network.retime(t)
            if t.left <= EPS or t.left <= tol * t.rate:
                end = now
            self._push(end, _TRANSFER, t.task, t.version)

    def _executed(self, i: int, now: float) -> None:
        """Task ``i``'s own work is done; it ends once the tasks it holds on have."""
        self.executed[i] = True
        if self.holds_left[i] == 0:
            self._ended(i, now)

    def _ended(self, i: int, now: float) -> None:
        self.end[i] = now
        for s in self.g.succ[i]:
            self.pending[s] -= 1
            if self.pending[s] == 0:
                self._arrive(s, now)
        for h in self.g.holders[i]:
            self.holds_left[h] -= 1
            if self.holds_left[h] == 0 and self.executed[h]:
                self._ended(h, now)
