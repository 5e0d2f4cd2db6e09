"""Put the passes' records together into one TaskGraph.

Each rank's records of a step are ordered by point (then by the pass that made them, then as the
pass made them): that order is the program order of every stream of the rank. Tasks get ids in
that order, rank after rank and step after step; keys, aliases and the ``PREV_COMPUTE`` marker
(the rank's latest compute task before the record) resolve to ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.taskgraph import Task, TaskGraph
from core.timeline_meta import TimelineMeta
from core.vocab import Lane
from schedules.passes.program import Alias, Dep, Edge, Emit, Hold, Key, PrevCompute, Record

Resolved = int | Key  # a task id, or a key to look up once every rank is placed


class Assembler:
    """Collects ranks' ordered records, then builds the graph."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.deps: list[list[Resolved]] = []
        self.keys: dict[Key, int] = {}
        self.aliases: dict[Key, Key] = {}
        self.edges: list[tuple[Key, Resolved]] = []
        self.holds: list[tuple[Key, Resolved]] = []
        self.last_compute: dict[int, int] = {}

    def add_rank_step(self, rank: int, passes: Sequence[Iterable[Record]]) -> None:
        """Place one rank's step: ``passes[k]`` are the records of pass ``k`` (in priority order)."""
        ordered: list[tuple[tuple[int, int, int, int], int, int, Record]] = []
        for priority, records in enumerate(passes):
            for seq, r in enumerate(records):
                if type(r) is Alias:
                    self.aliases[r.key] = r.target
                else:
                    ordered.append((r.point, priority, seq, r))  # type: ignore[union-attr]
        ordered.sort()  # (point, priority, seq) is unique: records are never compared
        edges, holds = self.edges, self.holds
        for _, _, _, r in ordered:
            if type(r) is Emit:
                self._emit(rank, r)
            elif type(r) is Edge:
                edges.append((r.target, self._now(rank, r.source)))
            elif type(r) is Hold:
                holds.append((r.target, self._now(rank, r.until)))

    def _now(self, rank: int, dep: Dep) -> Resolved:
        """``dep`` with PREV_COMPUTE replaced by the rank's latest compute task (-1: none)."""
        if isinstance(dep, PrevCompute):
            return self.last_compute.get(rank, -1)
        return dep

    def _emit(self, rank: int, e: Emit) -> None:
        i = len(self.tasks)
        self.tasks.append(e.task)
        self.deps.append([self._now(rank, d) for d in e.deps] if e.deps else [])
        if e.key is not None:
            if e.key in self.keys:
                raise RuntimeError(f"task key {e.key!r} emitted twice")
            self.keys[e.key] = i
        if e.task.lane == Lane.COMPUTE:
            self.last_compute[rank] = i

    def _id(self, ref: Resolved) -> int:
        """The task id ``ref`` names (an id, a key, or an alias chain ending at a key)."""
        if isinstance(ref, int):
            return ref
        seen = 0
        while ref not in self.keys:
            if ref not in self.aliases or seen > len(self.aliases):
                raise RuntimeError(f"no task is named {ref!r}")
            ref, seen = self.aliases[ref], seen + 1
        return self.keys[ref]

    def graph(self, meta: TimelineMeta) -> TaskGraph:
        """The assembled TaskGraph (dependencies on nothing, id -1, are dropped)."""
        keys, resolve = self.keys, self._id

        def ids(refs: list[Resolved]) -> list[int]:
            out = []
            for r in refs:
                d = r if type(r) is int else keys.get(r)
                if d is None:
                    d = resolve(r)
                if d >= 0:
                    out.append(d)
            return out

        deps = [ids(refs) if refs else [] for refs in self.deps]
        for target, source in self.edges:
            d = self._id(source)
            if d >= 0:
                deps[self._id(target)].append(d)
        holds: dict[int, list[int]] = {}
        for target, until in self.holds:
            u = self._id(until)
            if u >= 0:
                holds.setdefault(self._id(target), []).append(u)
        return TaskGraph.of(self.tasks, deps, meta, holds)
