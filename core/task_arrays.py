"""The task graph as numpy columns: one entry per task, dependencies as CSR arrays.

What the engines, the pricing and the Timeline writer read of a :class:`core.taskgraph.TaskGraph`
is a few integers per task (rank, lane, labels, its collective group, its peer) and the task's
ops, which repeat: a step of thousands of tasks has a few hundred distinct op tuples. Here each
label is a column, the ops are a *work class* (an index into :attr:`TaskArrays.works`), strings
(names, groups, streams) are codes into tables, and edges are CSR arrays (:mod:`core.task_columns`), so a million tasks
cost a few numpy arrays instead of a million Python objects.

The object graph stays where a feature reads single tasks (reports, Chrome traces, replay):
:meth:`TaskArrays.to_graph` makes it, :func:`arrays_of` goes the other way. Both keep task ids,
the order of every task's dependencies and holds, and every label.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.task_columns import LANES, NO_GROUP, Csr
from core.taskgraph import Op, Task, TaskGraph
from core.timeline_meta import TimelineMeta
from core.vocab import KINDS, Lane

__all__ = ["TaskArrays", "arrays_of"]


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


def arrays_of(graph: TaskGraph) -> TaskArrays:
    """The columns of ``graph`` (ops tuples that are one object share a work class)."""
    c = graph.columns
    return TaskArrays(
        rank=c.rank, step=c.step, stage=c.stage, chunk=c.chunk, microbatch=c.microbatch, layer=c.layer,
        peer=c.peer, ordered=c.ordered, lane=c.lane, kind=c.kind, name=c.name, group=c.group, stream=c.stream,
        work=c.work, names=c.names, groups=c.groups, streams=c.streams, works=c.works, deps=c.deps,
        hold_task=c.hold_task, hold_until=c.hold_until, meta=graph.meta)
