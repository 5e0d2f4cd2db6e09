"""Turn simulated task times into Timeline spans, vectorized over tasks that share a layout.

``detail="op"`` writes one span per op (each matmul, each TP collective); ``detail="task"``
writes one span per lane a task touches (its compute, then its in-task communication), which
keeps million-task runs small while every union-based metric stays the same when ops do not
overlap. A send is also written on its receiving rank as a ``recv`` span, unless the graph has
an explicit receive task for it (a send that meets its receive, ``group`` set).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from schedules.taskgraph import TaskGraph
from sim.costing import CostedTask
from sim.timeline import COLUMNS, Timeline

DETAILS = ("op", "task")


class _Vocab:
    """String -> small-int codes, for building categorical columns."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        return self.codes.setdefault(value, len(self.codes))

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=list(self.codes))


@dataclass(frozen=True)
class _Layout:
    """The spans one costed task produces, relative to its start (arrays of equal length)."""

    offset: np.ndarray
    duration: np.ndarray
    lane: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    layer: np.ndarray  # -1: take the task's layer
    nbytes: np.ndarray
    flops: np.ndarray


class _Writer:
    def __init__(self, graph: TaskGraph, detail: str) -> None:
        self.graph, self.detail = graph, detail
        self.lane, self.kind, self.name, self.group = _Vocab(), _Vocab(), _Vocab(), _Vocab()
        tasks = graph.tasks
        self.t_rank = np.fromiter((t.rank for t in tasks), np.int64, len(tasks))
        self.t_step = np.fromiter((t.step for t in tasks), np.int64, len(tasks))
        self.t_stage = np.fromiter((t.stage for t in tasks), np.int64, len(tasks))
        self.t_chunk = np.fromiter((t.chunk for t in tasks), np.int64, len(tasks))
        self.t_mb = np.fromiter((t.microbatch for t in tasks), np.int64, len(tasks))
        self.t_layer = np.fromiter((t.layer for t in tasks), np.int64, len(tasks))
        self.t_group = np.fromiter((self.group(t.group) for t in tasks), np.int64, len(tasks))
        self.parts: list[dict[str, np.ndarray]] = []

    def layout(self, cost: CostedTask, task_kind: str, task_name: str) -> _Layout:
        segs = [s for s in cost.segments if s.duration_s > 0]
        if self.detail == "op":
            rows = [(s.offset_s, s.duration_s, s.op.lane, s.op.kind, s.op.name, s.op.layer, s.op.bytes, s.op.flops)
                    for s in segs]
        else:
            rows = self._lane_rows(segs, task_kind, task_name)
        cols = list(zip(*rows, strict=True)) if rows else [()] * 8
        return _Layout(
            offset=np.asarray(cols[0], float), duration=np.asarray(cols[1], float),
            lane=np.asarray([self.lane(x) for x in cols[2]], np.int64),
            kind=np.asarray([self.kind(x) for x in cols[3]], np.int64),
            name=np.asarray([self.name(x) for x in cols[4]], np.int64),
            layer=np.asarray(cols[5], np.int64), nbytes=np.asarray(cols[6], float), flops=np.asarray(cols[7], float))

    @staticmethod
    def _lane_rows(segs: list, task_kind: str, task_name: str) -> list[tuple]:  # type: ignore[type-arg]
        per_lane: dict[tuple[str, str], list[float]] = {}
        for s in segs:
            kind = task_kind if s.op.lane == "compute" else s.op.kind
            acc = per_lane.setdefault((s.op.lane, kind), [0.0, 0.0, 0.0])
            acc[0] += s.duration_s
            acc[1] += s.op.bytes
            acc[2] += s.op.flops
        rows, cursor = [], 0.0
        for (lane, kind), (dur, nbytes, flops) in sorted(per_lane.items(), key=lambda kv: kv[0][0] != "compute"):
            rows.append((cursor, dur, lane, kind, task_name, -1, nbytes, flops))
            cursor += dur
        return rows

    def emit(self, ids: np.ndarray, lay: _Layout, start: np.ndarray, end: np.ndarray, total_s: float) -> None:
        if lay.offset.size == 0:
            return
        s0, e0 = start[ids], end[ids]
        stretch = np.where(total_s > 0, (e0 - s0) / (total_s or 1.0), 1.0)[:, None]
        a = s0[:, None] + lay.offset[None, :] * stretch
        b = np.minimum(a + lay.duration[None, :] * stretch, e0[:, None])
        k, n = ids.size, lay.offset.size
        per_task = {c: np.repeat(arr[ids], n) for c, arr in (
            ("rank", self.t_rank), ("step", self.t_step), ("stage", self.t_stage), ("chunk", self.t_chunk),
            ("microbatch", self.t_mb), ("group", self.t_group))}
        layer = np.where(lay.layer[None, :] >= 0, lay.layer[None, :], self.t_layer[ids][:, None])
        self.parts.append({**per_task, "lane": np.tile(lay.lane, k), "kind": np.tile(lay.kind, k),
                           "name": np.tile(lay.name, k), "start_s": a.ravel(), "end_s": b.ravel(),
                           "layer": layer.ravel(), "bytes": np.tile(lay.nbytes, k), "flops": np.tile(lay.flops, k)})

    def emit_recvs(self, start: np.ndarray, end: np.ndarray) -> None:
        sends = [(i, t.peer, t.name, sum(op.bytes for op in t.ops)) for i, t in enumerate(self.graph.tasks)
                 if t.peer >= 0 and t.kind == "send" and not t.group]  # grouped sends have their own recv task
        if not sends:
            return
        ids = np.asarray([s[0] for s in sends], np.int64)
        k = ids.size
        self.parts.append({
            "rank": np.asarray([s[1] for s in sends], np.int64), "step": self.t_step[ids], "stage": self.t_stage[ids],
            "chunk": self.t_chunk[ids], "microbatch": self.t_mb[ids], "group": self.t_group[ids],
            "lane": np.full(k, self.lane("comm.pp")), "kind": np.full(k, self.kind("recv")),
            "name": np.asarray([self.name(s[2]) for s in sends], np.int64), "start_s": start[ids], "end_s": end[ids],
            "layer": self.t_layer[ids], "bytes": np.asarray([s[3] for s in sends], float), "flops": np.zeros(k)})

    def frame(self) -> pd.DataFrame:
        cols = {c: np.concatenate([p[c] for p in self.parts]) if self.parts else np.zeros(0, np.int64)
                for c in COLUMNS}
        data: dict[str, Any] = {c: cols[c] for c in COLUMNS}
        for c, vocab in (("lane", self.lane), ("kind", self.kind), ("name", self.name), ("group", self.group)):
            data[c] = vocab.categorical(cols[c].astype(np.int64))
        df = pd.DataFrame(data, columns=list(COLUMNS))
        return df.sort_values(["rank", "start_s", "end_s"], kind="stable").reset_index(drop=True)


def write_timeline(graph: TaskGraph, costs: list[CostedTask], start: np.ndarray, end: np.ndarray,
                   detail: str, meta: dict[str, Any] | None) -> Timeline:
    """The Timeline of a finished simulation."""
    if detail not in DETAILS:
        raise ValueError(f"detail={detail!r} is invalid: expected one of {', '.join(DETAILS)}")
    w = _Writer(graph, detail)
    by_cost: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    for i, (t, c) in enumerate(zip(graph.tasks, costs, strict=True)):
        by_cost[(id(c), t.kind, t.name if detail == "task" else "")].append(i)
    for (_, kind, name), ids in by_cost.items():
        cost = costs[ids[0]]
        w.emit(np.asarray(ids, np.int64), w.layout(cost, kind, name or graph.tasks[ids[0]].name), start, end, cost.duration_s)
    w.emit_recvs(start, end)
    return Timeline(w.frame(), {"source": "simulated", "detail": detail, **graph.meta, **(meta or {})})
