"""Put the passes' records together into one TaskGraph.

Each rank's records of a step are ordered by point (then by the pass that made them, then as the
pass made them): that order is the program order of every stream of the rank. Tasks get ids in
that order, rank after rank and step after step; keys, aliases and the ``PREV_COMPUTE`` marker
(the rank's latest compute task before the record) resolve to ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

from core.taskgraph import Task, TaskGraph
from core.timeline_meta import TimelineMeta
from core.vocab import Lane
from schedules.passes.program import Alias, Edge, Emit, Hold, Key, PrevCompute, Record

_POINT = attrgetter("point")
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
        ordered: list[Emit | Edge | Hold] = []
        aliases = self.aliases
        for records in passes:
            for r in records:
                if type(r) is Alias:
                    aliases[r.key] = r.target
                else:
                    ordered.append(r)  # type: ignore[arg-type]
        ordered.sort(key=_POINT)  # stable: records at one point stay in (pass, the pass's own) order
        tasks, deps, keys, edges, holds = self.tasks, self.deps, self.keys, self.edges, self.holds
        last = self.last_compute.get(rank, -1)  # PREV_COMPUTE here: the rank's latest compute task
        for r in ordered:
            if type(r) is Emit:
                i = len(tasks)
                tasks.append(r.task)
                deps.append([last if type(d) is PrevCompute else d for d in r.deps])
                key = r.key
                if key is not None:
                    if key in keys:
                        raise RuntimeError(f"task key {key!r} emitted twice")
                    keys[key] = i
                if r.task.lane == Lane.COMPUTE:
                    last = i
            elif type(r) is Edge:
                edges.append((r.target, last if type(r.source) is PrevCompute else r.source))
            elif type(r) is Hold:
                holds.append((r.target, last if type(r.until) is PrevCompute else r.until))
        self.last_compute[rank] = last

    def _id(self, ref: Resolved) -> int:
        """The task id ``ref`` names (an id, a key, or an alias chain ending at a key)."""
        if isinstance(ref, int):
            return ref
        found = self.keys.get(ref)
        if found is not None:
            return found
        seen = 0
        while ref not in self.keys:
            if ref not in self.aliases or seen > len(self.aliases):
                raise RuntimeError(f"no task is named {ref!r}")
            ref, seen = self.aliases[ref], seen + 1
        return self.keys[ref]

    def graph(self, meta: TimelineMeta) -> TaskGraph:
        """The assembled TaskGraph (dependencies on nothing, id -1, are dropped)."""
        keys, resolve = self.keys, self._id
        deps: list[list[int]] = []
        for refs in self.deps:
            row: list[int] = []
            if not refs:  # most tasks: their records name no dependency
                deps.append(row)
                continue
            for r in refs:
                d = r if type(r) is int else keys.get(r)  # an id, a key (None: an alias)
                if d is None:
                    d = resolve(r)
                if d >= 0:
                    row.append(d)
            deps.append(row)
        for target, source in self.edges:
            d = source if type(source) is int else keys.get(source)
            if d is None:
                d = resolve(source)
            if d >= 0:
                t = keys.get(target)
                deps[resolve(target) if t is None else t].append(d)
        holds: dict[int, list[int]] = {}
        for target, until in self.holds:
            u = resolve(until)
            if u >= 0:
                holds.setdefault(resolve(target), []).append(u)
        return TaskGraph.of(self.tasks, deps, meta, holds)
