"""Turn a replay model into the simulator's TaskGraph (fixed durations) and back into times.

Per item, on its stream and in its order, up to four tasks:

- ``H``: the host delay after the stream predecessor (``host_s``), no dependencies, plus a wait
  item's work before its wait point (``pre_s``);
- ``L``: the reaction lag (``lag_s``), an unordered task after the item's dependencies;
- ``S``: a zero-length start point, when another item depends on this one's start (a launch
  call: its kernel may start before the call returns; a gloo send's post, which its receive
  needs) or a rendezvous ``B`` when the item is a collective member (tasks sharing a ``group``
  start together in the engine);
- ``M``: the work itself (``dur_s``), or the transfer ``X`` after the barrier;
- ``P``: added latency (``post_s``, what-if only): an unordered task after ``M``; whatever
  depends on the item waits for it, the item's stream does not.

The engine starts a task at the latest of its stream predecessor's end and its dependencies' ends,
so item start = max(predecessor end + host_s, dependencies' end + lag_s), as the model says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.taskgraph import Op, Task, TaskGraph, TaskGraphBuilder
from core.timeline_meta import Source, TimelineMeta
from core.vocab import KINDS, Kind, Lane, OpClass
from profiler.replay.model import ReplayModel


@dataclass(frozen=True)
class Params:
    """Effective replay parameters (after what-if knobs), arrays indexed by item."""

    host_s: np.ndarray
    lag_s: np.ndarray
    dur_s: np.ndarray
    barrier: np.ndarray
    post_s: np.ndarray
    pre_s: np.ndarray


@dataclass
class Realized:
    """The TaskGraph and, per item, the ids of its tasks (-1 when absent)."""

    graph: TaskGraph
    host_task: np.ndarray
    lag_task: np.ndarray
    entry_task: np.ndarray
    main_task: np.ndarray
    post_task: np.ndarray

    @property
    def done_task(self) -> np.ndarray:
        """Per item, the task whose end is the item's completion as others see it."""
        return np.where(self.post_task >= 0, self.post_task, self.main_task)


def _task(rank: int, stream: str, kind: Kind, name: str, lane: Lane, duration: float,
          op_class: OpClass, ordered: bool, group: str = "") -> Task:
    """A fixed-duration task on ``stream`` (a measured CUDA stream or CPU thread), drawn on ``lane``."""
    op = Op(lane=lane, kind=kind, name=name, op_class=op_class, duration_s=float(duration))
    return Task(rank=rank, lane=lane, kind=kind, name=name, ops=(op,), group=group, ordered=ordered, stream=stream)


class _Builder:
    def __init__(self, model: ReplayModel, p: Params) -> None:
        self.model, self.p = model, p
        n = len(model)
        self.graph = TaskGraphBuilder()
        self.deps = self.graph.deps
        self.ids = {k: np.full(n, -1, dtype=np.int64) for k in ("host", "lag", "entry", "main", "post")}
        items = model.items
        self.rank = items["rank"].to_numpy()
        self.stream = items["stream"].to_numpy()
        self.ordered = items["ordered"].to_numpy(bool)
        self.lane = np.asarray([Lane(lane) for lane in items["lane"]], dtype=object)
        self.name = items["name"].to_numpy()
        self.kind = np.asarray([Kind(k) if k in KINDS else Kind.OTHER for k in items["kind"]], dtype=object)

    def add(self, task: Task) -> int:
        return self.graph.add(task)

    def item(self, i: int) -> None:
        m, p = self.model, self.p
        r, lane, ordered = int(self.rank[i]), str(self.stream[i]), bool(self.ordered[i])
        chain = -1  # for unordered items, the explicit predecessor inside the item
        if p.host_s[i] + p.pre_s[i] > 0:
            chain = self.ids["host"][i] = self.add(_task(r, lane, Kind.OTHER, "host", Lane.HOST,
                                                         p.host_s[i] + p.pre_s[i], OpClass.FIXED, ordered))
        if p.lag_s[i] > 0 and m.deps[i]:
            self.ids["lag"][i] = self.add(_task(r, lane + "~lag", Kind.OTHER, "lag", Lane.HOST, p.lag_s[i], OpClass.FIXED,
                                                False))
        needs_entry = bool(p.barrier[i]) or bool(m.start_anchor[i]) or m.kind[i] == "p2p"
        if needs_entry:
            self.ids["entry"][i] = self.add(_task(r, lane, self.kind[i], "start", self.lane[i], 0.0,
                                                  OpClass.FIXED, ordered, group=str(p.barrier[i])))
            if not ordered and chain >= 0:
                self.deps[self.ids["entry"][i]].append(chain)
            chain = self.ids["entry"][i]
        op_class = OpClass.FIXED if m.kind[i] != "collective" else OpClass.TRANSFER
        main = self.add(_task(r, lane, self.kind[i], str(self.name[i]), self.lane[i], p.dur_s[i], op_class, ordered))
        self.ids["main"][i] = main
        if not ordered and chain >= 0:
            self.deps[main].append(chain)
        if p.post_s[i] > 0:
            post = self.ids["post"][i] = self.add(_task(r, lane + "~post", self.kind[i], "latency", self.lane[i],
                                                        p.post_s[i], OpClass.FIXED, False))
            self.deps[post].append(main)

    def _targets(self, deps: list[tuple[int, str]]) -> list[int]:
        ids = self.ids
        done = np.where(ids["post"] >= 0, ids["post"], ids["main"])
        return [int(ids["entry"][j] if anchor == "start" and ids["entry"][j] >= 0 else done[j])
                for j, anchor in deps]

    def wire(self, i: int) -> None:
        """Dependencies of item i onto the tasks of the items it depends on."""
        ids = self.ids
        self.deps[ids["main"][i]].extend(self._targets(self.model.end_deps[i]))
        targets = self._targets(self.model.deps[i])
        if not targets:
            return
        # a wait item's start is not held back by what it waits for; only its end is
        holds_start = ids["entry"][i] >= 0 and self.model.kind[i] != "wait"
        waiting = ids["entry"][i] if holds_start else ids["main"][i]
        if ids["lag"][i] >= 0:
            self.deps[ids["lag"][i]].extend(targets)
            self.deps[waiting].append(int(ids["lag"][i]))
        else:
            self.deps[waiting].extend(targets)


def realize(model: ReplayModel, p: Params) -> Realized:
    """The TaskGraph of the model under parameters ``p``."""
    b = _Builder(model, p)
    for i in range(len(model)):
        b.item(i)
    for i in range(len(model)):
        b.wire(i)
    graph = b.graph.build(TimelineMeta(source=Source.REPLAYED, world_size=model.world_size))
    return Realized(graph=graph, host_task=b.ids["host"], lag_task=b.ids["lag"],
                    entry_task=b.ids["entry"], main_task=b.ids["main"], post_task=b.ids["post"])


def item_times(model: ReplayModel, real: Realized, params: Params, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item: (reach, display start, end) in replay seconds.

    ``reach`` is when the item's stream got to it (after the predecessor and host delay);
    a collective or p2p item is drawn from its arrival (reach and dependencies done), a wait
    item from its reach, anything else from its start.
    """
    n = len(model)
    reach = np.zeros(n)
    shown = np.zeros(n)
    fin = end[real.done_task]
    own_end = end[real.main_task]
    deps = real.graph.deps
    for i in range(n):
        if real.host_task[i] >= 0:
            reach[i] = end[real.host_task[i]] - params.pre_s[i]
        elif model.pred[i] >= 0:
            reach[i] = own_end[model.pred[i]]
        first = real.entry_task[i] if real.entry_task[i] >= 0 else real.main_task[i]
        if model.kind[i] == "collective":
            ready = [end[d] for d in deps[first]]
            shown[i] = max([reach[i], *ready])
        elif model.kind[i] == "p2p":
            shown[i] = end[first]
        elif model.kind[i] == "wait":
            shown[i] = reach[i]
        else:
            shown[i] = start[first]
    return reach, shown, fin
