"""Turn simulated task times into Timeline spans.

``detail="op"`` writes one span per op (each matmul, each TP collective); ``detail="task"``
writes one span per lane a task touches (its compute, then its in-task communication), which
keeps million-task runs small while every union-based metric stays the same when ops do not
overlap. A send is also written on its receiving rank as a ``recv`` span.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedules.taskgraph import Task, TaskGraph
from sim.costing import CostedTask
from sim.timeline import Timeline, TimelineBuilder

DETAILS = ("op", "task")


def write_timeline(graph: TaskGraph, costs: list[CostedTask], start: np.ndarray, end: np.ndarray,
                   detail: str, meta: dict[str, Any] | None) -> Timeline:
    """The Timeline of a finished simulation."""
    if detail not in DETAILS:
        raise ValueError(f"detail={detail!r} is invalid: expected one of {', '.join(DETAILS)}")
    out = TimelineBuilder()
    emit = _emit_ops if detail == "op" else _emit_lanes
    for i, task in enumerate(graph.tasks):
        s, e = float(start[i]), float(end[i])
        emit(out, task, costs[i], s, e)
        if task.peer >= 0:
            _span(out, task, task.peer, "comm.pp", "recv", task.name, s, e, task.layer,
                  sum(op.bytes for op in task.ops), 0.0)
    return out.build({"source": "simulated", "detail": detail, **graph.meta, **(meta or {})})


def _emit_ops(out: TimelineBuilder, task: Task, cost: CostedTask, s: float, e: float) -> None:
    stretch = (e - s) / cost.duration_s if cost.duration_s > 0 else 1.0
    for seg in cost.segments:
        if seg.duration_s <= 0:
            continue
        op = seg.op
        a = s + seg.offset_s * stretch
        layer = op.layer if op.layer >= 0 else task.layer
        _span(out, task, task.rank, op.lane, op.kind, op.name, a, a + seg.duration_s * stretch,
              layer, op.bytes, op.flops)


def _emit_lanes(out: TimelineBuilder, task: Task, cost: CostedTask, s: float, e: float) -> None:
    per_lane: dict[tuple[str, str], list[float]] = {}
    for seg in cost.segments:
        acc = per_lane.setdefault((seg.op.lane, seg.op.kind if seg.op.lane != "compute" else task.kind),
                                  [0.0, 0.0, 0.0])
        acc[0] += seg.duration_s
        acc[1] += seg.op.bytes
        acc[2] += seg.op.flops
    cursor = s
    for (lane, kind), (dur, nbytes, flops) in sorted(per_lane.items(), key=lambda kv: kv[0][0] != "compute"):
        if dur <= 0:
            continue
        stop = min(e, cursor + dur)
        _span(out, task, task.rank, lane, kind, task.name, cursor, stop, task.layer, nbytes, flops)
        cursor = stop


def _span(out: TimelineBuilder, task: Task, rank: int, lane: str, kind: str, name: str,
          a: float, b: float, layer: int, nbytes: float, flops: float) -> None:
    out.add(rank=rank, lane=lane, kind=kind, name=name, start_s=a, end_s=b, step=task.step,
            stage=task.stage, chunk=task.chunk, microbatch=task.microbatch, layer=layer,
            bytes=nbytes, flops=flops, group=task.group)
