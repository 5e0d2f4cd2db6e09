"""The task graph as numpy columns: one entry per task, dependencies as CSR arrays.

What the engines, the pricing and the Timeline writer read of a :class:`core.taskgraph.TaskGraph`
is a few integers per task (rank, lane, labels, its collective group, its peer) and the task's
ops, which repeat: a step of thousands of tasks has a few hundred distinct op tuples. Here each
label is a column, the ops are a *work class* (an index into :attr:`TaskArrays.works`), strings
(names, groups, streams) are codes into tables, and edges are CSR arrays, so a million tasks
cost a few numpy arrays instead of a million Python objects.

The object graph stays where a feature reads single tasks (reports, Chrome traces, replay):
:meth:`TaskArrays.to_graph` makes it, :func:`arrays_of` goes the other way. Both keep task ids,
the order of every task's dependencies and holds, and every label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from core.taskgraph import Op, Task, TaskGraph
from core.timeline_meta import TimelineMeta
from core.vocab import KINDS, Kind, Lane

__all__ = ["LANES", "NO_GROUP", "Csr", "TaskArrays", "arrays_of", "csr_of"]

LANES = tuple(Lane)
NO_GROUP = -1  # a task's group code when it meets no other task
_LANE_CODE = {lane: i for i, lane in enumerate(LANES)}
_KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}
_LABELS = attrgetter("rank", "step", "stage", "chunk", "microbatch", "layer", "peer", "ordered")


@dataclass(frozen=True)
class Csr:
    """Lists of task ids as compressed rows: row i is ``index[ptr[i]:ptr[i + 1]]``."""

    ptr: np.ndarray  # int64, rows + 1
    index: np.ndarray  # int64

    def row(self, i: int) -> np.ndarray:
        return self.index[self.ptr[i]:self.ptr[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.ptr)

    def rows(self) -> np.ndarray:
        """The row of every entry of ``index``."""
        return np.repeat(np.arange(self.ptr.size - 1), self.lengths)


def csr_of(rows: Sequence[Sequence[int]]) -> Csr:
    """The CSR form of a list of id lists."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    index = np.fromiter((d for r in rows for d in r), np.int64, int(ptr[-1]))
    return Csr(ptr, index)


@dataclass(frozen=True, kw_only=True)
class TaskArrays:
    """A task graph as columns (task i is entry i of every column).

    Attributes:
        rank, step, stage, chunk, microbatch, layer, peer: int64 labels, as :class:`Task`'s.
        lane, kind: codes into :data:`LANES` and :data:`core.vocab.KINDS`.
        ordered: bool, as :attr:`Task.ordered`.
        name, group, stream: codes into ``names``, ``groups`` and ``streams``
            (group :data:`NO_GROUP`: none; stream 0 is ``""``, the task's lane).
        work: the task's ops, a code into ``works`` (tasks with equal ops may share one).
        deps: per task, the tasks it waits for (CSR, in the graph's order).
        hold_task, hold_until: task ``hold_task[j]`` may not end before ``hold_until[j]``; the
            pairs of :attr:`TaskGraph.holds` in its order (a task's pairs together).
        meta: as :attr:`TaskGraph.meta`.
    """

    rank: np.ndarray
    lane: np.ndarray
    kind: np.ndarray
    step: np.ndarray
    stage: np.ndarray
    chunk: np.ndarray
    microbatch: np.ndarray
    layer: np.ndarray
    peer: np.ndarray
    ordered: np.ndarray
    name: np.ndarray
    group: np.ndarray
    stream: np.ndarray
    work: np.ndarray
    names: tuple[str, ...]
    groups: tuple[str, ...]
    streams: tuple[str, ...]
    works: tuple[tuple[Op, ...], ...]
    deps: Csr
    hold_task: np.ndarray
    hold_until: np.ndarray
    meta: TimelineMeta = field(default_factory=TimelineMeta)

    def __len__(self) -> int:
        return int(self.rank.size)

    def lane_of(self, i: int) -> Lane:
        return LANES[int(self.lane[i])]

    def task(self, i: int) -> Task:
        """Task ``i`` as an object."""
        stream = self.streams[int(self.stream[i])]
        group = int(self.group[i])
        return Task(rank=int(self.rank[i]), lane=LANES[int(self.lane[i])], kind=KINDS[int(self.kind[i])],
                    name=self.names[int(self.name[i])], ops=self.works[int(self.work[i])], step=int(self.step[i]),
                    stage=int(self.stage[i]), chunk=int(self.chunk[i]), microbatch=int(self.microbatch[i]),
                    layer=int(self.layer[i]), group=self.groups[group] if group != NO_GROUP else "",
                    peer=int(self.peer[i]), ordered=bool(self.ordered[i]), stream=stream)

    def to_graph(self) -> TaskGraph:
        """The object graph (same ids, edges, holds and meta)."""
        cols = [c.tolist() for c in (self.rank, self.lane, self.kind, self.name, self.work, self.step, self.stage,
                                      self.chunk, self.microbatch, self.layer, self.group, self.peer, self.ordered,
                                      self.stream)]
        names, works, groups, streams = self.names, self.works, (*self.groups, ""), self.streams
        tasks = [Task(rank=r, lane=LANES[ln], kind=KINDS[k], name=names[nm], ops=works[w], step=s, stage=st, chunk=c,
                      microbatch=mb, layer=ly, group=groups[g], peer=p, ordered=o, stream=streams[sm])
                 for r, ln, k, nm, w, s, st, c, mb, ly, g, p, o, sm in zip(*cols, strict=True)]
        ptr, index = self.deps.ptr.tolist(), self.deps.index.tolist()
        deps = [tuple(index[ptr[i]:ptr[i + 1]]) for i in range(len(tasks))]
        holds: dict[int, list[int]] = {}
        for i, u in zip(self.hold_task.tolist(), self.hold_until.tolist(), strict=True):
            holds.setdefault(i, []).append(u)
        return TaskGraph(tuple(tasks), tuple(deps), self.meta, {i: tuple(u) for i, u in holds.items()})


class _Codes:
    """Values -> codes in order of first appearance (a table column's codes)."""

    def __init__(self, first: Sequence[object] = ()) -> None:
        self.codes: dict[object, int] = {v: i for i, v in enumerate(first)}

    def __call__(self, values: Sequence[object]) -> np.ndarray:
        codes = self.codes
        return np.fromiter((codes.setdefault(v, len(codes)) for v in values), np.int64, len(values))

    @property
    def table(self) -> tuple[object, ...]:
        return tuple(self.codes)


def arrays_of(graph: TaskGraph) -> TaskArrays:
    """The columns of ``graph`` (ops tuples that are one object share a work class)."""
    tasks = graph.tasks
    n = len(tasks)
    labels = np.array([_LABELS(t) for t in tasks], np.int64).reshape(n, 8).T
    names, groups, streams = _Codes(), _Codes([""]), _Codes([""])
    works: dict[int, int] = {}
    unique: list[tuple[Op, ...]] = []
    for t in tasks:
        if id(t.ops) not in works:
            works[id(t.ops)] = len(unique)
            unique.append(t.ops)
    group = groups([t.group for t in tasks]) - 1  # "" -> NO_GROUP
    pairs = [(i, u) for i, hs in graph.holds.items() for u in hs]
    return TaskArrays(
        rank=labels[0], step=labels[1], stage=labels[2], chunk=labels[3], microbatch=labels[4], layer=labels[5],
        peer=labels[6], ordered=labels[7].astype(bool),
        lane=np.fromiter((_LANE_CODE[t.lane] for t in tasks), np.int64, n),
        kind=np.fromiter((_KIND_CODE[t.kind] for t in tasks), np.int64, n),
        name=names([t.name for t in tasks]), group=group, stream=streams([t.stream for t in tasks]),
        work=np.fromiter((works[id(t.ops)] for t in tasks), np.int64, n),
        names=tuple(map(str, names.table)), groups=tuple(map(str, groups.table[1:])),
        streams=tuple(map(str, streams.table)), works=tuple(unique), deps=csr_of(graph.deps),
        hold_task=np.fromiter((i for i, _ in pairs), np.int64, len(pairs)),
        hold_until=np.fromiter((u for _, u in pairs), np.int64, len(pairs)), meta=graph.meta)


KIND_CODES = _KIND_CODE
LANE_CODES = _LANE_CODE
SEND_CODE = _KIND_CODE[Kind.SEND]
