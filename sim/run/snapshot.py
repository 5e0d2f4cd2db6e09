"""The checkpoint's device-to-host snapshot as a task on the simulated timeline.

A checkpoint copies each rank's parameters and optimizer states to host memory once the optimizer
step has updated them, and the next step may not change them before the copy is done (PyTorch
DCP's ``async_save`` stages to pinned host memory before returning; Megatron's async checkpoint
does the same). Here the job is simulated for two steps twice: as it is, and with one
``pcie_to_host`` task per rank on its copy stream (the ``memcpy`` lane offload copies use) after
the rank's step-0 optimizer update (and its step-0 copies), its first step-1 compute task waiting
for it; communication still in flight (a ZeRO parameter all-gather prefetched under the next
forward, a pipeline send) goes on beside it. The snapshot is priced
like any offload copy (:mod:`sim.host_pricing`: every GPU of a node copying at once) and, with
``fidelity = "flow"``, runs as flows on the node's PCIe and memory links (:mod:`sim.flow.host_copies`),
sharing them with offload copies and GPUDirect NIC traffic (DP collectives) in flight. The
blocking time is how much later the two steps end; the snapshot's own span (copy time with
contention) is reported beside it. Units: bytes, seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from sim.job import Job
from sim.timeline import Timeline

SNAPSHOT_NAME = "checkpoint d2h"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotTiming:
    """What the simulated timeline says of one snapshot.

    Attributes:
        blocking_s: how much later two steps end with the snapshot between them.
        copy_s: the longest snapshot span (its copy, contention included).
        two_steps_s: the two steps without a snapshot.
        timeline: the two steps with the snapshot (for the report), None when not kept.
        window_s: (first snapshot start, last snapshot end), seconds.
    """

    blocking_s: float
    copy_s: float
    two_steps_s: float
    timeline: Timeline | None = None
    window_s: tuple[float, float] = (0.0, 0.0)


def _snapshot_task(rank: int, size: float) -> Task:
    op = Op(Lane.MEMCPY, Kind.OFFLOAD, SNAPSHOT_NAME, OpClass.PCIE_TO_HOST, bytes=size)
    return Task(rank=rank, lane=Lane.MEMCPY, kind=Kind.OFFLOAD, name=SNAPSHOT_NAME, ops=(op,), step=0)


def _anchors(graph: TaskGraph) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per rank: the task the snapshot waits for (its last step-0 optimizer task, else its last
    step-0 compute task), the task it follows in program order (that one or the rank's last
    step-0 copy, whichever comes later) and the rank's first step-1 compute task."""
    wait: dict[int, int] = {}
    compute: dict[int, int] = {}
    copy: dict[int, int] = {}
    first: dict[int, int] = {}
    for i, t in enumerate(graph.tasks):
        if t.step == 0 and t.kind == Kind.OPTIMIZER:
            wait[t.rank] = i
        if t.step == 0 and t.lane == Lane.COMPUTE:
            compute[t.rank] = i
        if t.step == 0 and t.lane == Lane.MEMCPY:
            copy[t.rank] = i
        if t.step == 1 and t.lane == Lane.COMPUTE:
            first.setdefault(t.rank, i)
    wait = {r: wait.get(r, compute[r]) for r in first}
    return wait, {r: max(w, copy.get(r, -1)) for r, w in wait.items()}, first


def with_snapshots(graph: TaskGraph, rank_bytes: Mapping[int, float]) -> tuple[TaskGraph, list[int]]:
    """``graph`` (two steps) with a snapshot of ``rank_bytes[rank]`` after each rank's step-0
    optimizer update and before its first step-1 compute task (:func:`_anchors`), in program
    order on the copy stream; returns it and the snapshot ids."""
    wait, after, first = _anchors(graph)
    tasks: list[Task] = []
    new_id: list[int] = []
    snap_of: dict[int, int] = {}
    for i, t in enumerate(graph.tasks):
        new_id.append(len(tasks))
        tasks.append(t)
        for r in (r for r, j in after.items() if j == i):
            snap_of[r] = len(tasks)
            tasks.append(_snapshot_task(r, rank_bytes[r]))
    deps: list[tuple[int, ...]] = [()] * len(tasks)
    for i, ds in enumerate(graph.deps):
        rank = graph.tasks[i].rank
        extra = (snap_of[rank],) if first.get(rank) == i else ()
        deps[new_id[i]] = (*(new_id[d] for d in ds), *extra)
    for r, s in snap_of.items():
        deps[s] = (new_id[wait[r]],)
    holds = {new_id[i]: tuple(new_id[h] for h in hs) for i, hs in graph.holds.items()}
    return TaskGraph.of(tasks, deps, graph.meta, holds), sorted(snap_of.values())


def snapshot_timing(job: Job, rank_bytes: Mapping[int, float], default_bytes: float, *,
                    keep_timeline: bool = False) -> SnapshotTiming:
    """Simulate ``job`` for two steps without and with the snapshot (module docstring);
    ``rank_bytes``: per simulated rank, else ``default_bytes``; ``keep_timeline``: also write the
    Timeline of the two steps with it."""
    from sim.pricing import cost_graph
    from sim.simulate import Priced, build_priced, engine_name, timed
    from sim.size_guard import span_detail
    from sim.timeline_writer import write_timeline

    two = dataclasses.replace(job, steps=2)
    plain = build_priced(two)
    engine = engine_name(two)
    _, end = timed(two, plain, engine)
    sizes = {t.rank: rank_bytes.get(t.rank, default_bytes) for t in plain.graph.tasks}
    graph, snaps = with_snapshots(plain.graph, sizes)
    priced = Priced(plain.schedule, plain.placement, graph, cost_graph(graph, plain.coster), plain.coster)
    start_s, end_s = timed(two, priced, engine)
    copy = max((float(end_s[i] - start_s[i]) for i in snaps), default=0.0)
    base = float(np.max(end))
    timeline = write_timeline(graph, priced.costs, start_s, end_s, span_detail(two), graph.meta) if keep_timeline else None
    window = (min(float(start_s[i]) for i in snaps), max(float(end_s[i]) for i in snaps)) if snaps else (0.0, 0.0)
    return SnapshotTiming(blocking_s=max(0.0, float(np.max(end_s)) - base), copy_s=copy, two_steps_s=base,
                          timeline=timeline, window_s=window)
