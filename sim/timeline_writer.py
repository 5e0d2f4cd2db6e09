"""Turn simulated task times into Timeline spans, vectorized over all tasks.

``detail="op"`` writes one span per op (each matmul, each TP collective); ``detail="task"``
writes one span per lane a task touches (its compute, then its in-task communication), which
keeps million-task runs small while every union-based metric stays the same when ops do not
overlap. A send is also written on its receiving rank as a ``recv`` span, unless the graph has
an explicit receive task for it (a send that meets its receive, ``group`` set).

Each distinct costed task's layout (its spans relative to its start) is made once; every task's
spans are then gathered from the layouts with numpy, and stretched to the task's span when the
engine made it last longer than its cost (shared bandwidth, holds).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.arrays import sorted_unique
from core.task_columns import NO_GROUP, SEND_CODE, TaskColumns
from core.taskgraph import Task, TaskGraph
from core.timeline_meta import Source, TimelineMeta
from core.vocab import KINDS, Kind, Lane
from sim.costing import CostedTask
from sim.span_arrays import SpanVocab
from sim.steady_state import Replication, has_label, relabel
from sim.timeline import Timeline

DETAILS = ("op", "task")
TASK_LABEL = -1  # a layout's kind/name/layer code meaning "take the task's"


@dataclass(frozen=True)
class _Layouts:
    """Every distinct layout's spans, concatenated: layout u owns rows start[u]:start[u]+count[u]."""

    start: np.ndarray
    count: np.ndarray
    offset: np.ndarray
    duration: np.ndarray
    lane: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    layer: np.ndarray
    nbytes: np.ndarray
    flops: np.ndarray
    total: np.ndarray  # per layout: the costed task's duration


class _Writer:
    """Writes the spans of ``graph``'s tasks, or of the copies of them ``replication`` lists.

    Columns are gathered once, after sorting: a span is a (written task, layout row) pair, a
    mirrored receive a (written task, the receive row appended to the layouts) pair, and every
    column is one gather through those indices (large runs write millions of spans; each
    intermediate column would be another allocation of that size)."""

    def __init__(self, graph: TaskGraph, detail: str) -> None:
        self.graph, self.detail = graph, detail
        self.lane, self.kind, self.name, self.group = SpanVocab(), SpanVocab(), SpanVocab(), SpanVocab()
        c = graph.columns
        # per simulated task (read-only columns of the graph; label codes in order of first appearance)
        self.s_rank, self.s_step, self.s_stage, self.s_chunk, self.s_mb, self.s_layer = (
            c.rank, c.step, c.stage, c.chunk, c.microbatch, c.layer)
        self.s_group = self.group.recode(c.group, lambda g: c.groups[g] if g != NO_GROUP else "")
        self.s_kind = self.kind.recode(c.kind, lambda k: KINDS[k])
        self.s_name = self.name.recode(c.name, lambda k: c.names[k])
        # sends mirrored as a receive span on their peer: which, the peer and the bytes received
        self.mirrored = mirrored(c)
        self.peer = np.where(self.mirrored, c.peer, 0)
        work_bytes = np.fromiter((sum(op.bytes for op in ops) for ops in c.works), float, len(c.works))
        self.recv_bytes = np.where(self.mirrored, work_bytes[c.work], 0.0)
        self.replicated(None)

    def replicated(self, replication: Replication | None) -> _Writer:
        """Write the copies of the tasks ``replication`` lists (None: each task once): per
        written task, the simulated task it copies, its shift and micro-batch shift."""
        n = len(self.graph.tasks)
        self.base = np.arange(n) if replication is None else replication.task
        self.shift_s = np.zeros(n) if replication is None else replication.shift_s
        self.end_shift_s = self.shift_s if replication is None else replication.end_shift
        self.mb_shift = np.zeros(n, np.int64) if replication is None else replication.microbatch_shift
        return self

    def fork(self) -> _Writer:
        """A writer that shares this one's task columns and starts from copies of its vocabularies
        (a Timeline's writing adds names to them: each Timeline gets the codes it would alone)."""
        out = copy.copy(self)
        for v in ("lane", "kind", "name", "group"):
            fresh = SpanVocab()
            fresh.codes = dict(getattr(self, v).codes)
            setattr(out, v, fresh)
        return out

    def layouts(self, costs: list[CostedTask]) -> tuple[np.ndarray, _Layouts]:
        """Per task the index of its layout, and the layouts (one per distinct costed task)."""
        index: dict[object, int] = {}
        if self.detail == "task":
            keys = map(self._same_layout, costs)
        else:
            keys = map(_op_layout, costs, self.graph.tasks)
        of_task = np.fromiter((index.setdefault(k, len(index)) for k in keys), np.int64, len(costs))
        unique: list[CostedTask] = [None] * len(index)  # type: ignore[list-item]
        labelled = [type(k) is tuple for k in index]  # the layout's one span takes the task's name and layer
        for c, u in zip(costs, of_task.tolist(), strict=True):
            unique[u] = c
        if self.detail == "op":
            count, cols = self._op_columns(unique, labelled)
        else:
            rows: list[tuple[float, float, int, int, int, int, float, float]] = []
            count = np.zeros(len(unique), np.int64)
            for u, cost in enumerate(unique):
                spans = self._lane_rows(cost)
                rows += spans
                count[u] = len(spans)
            cols = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(8)]
        for col, value in zip(cols, (0.0, 0.0, 0, 0, TASK_LABEL, TASK_LABEL, 0.0, 0.0), strict=True):
            col.append(value)  # a mirrored receive's row (see sort_keys)
        start = np.zeros(len(unique), np.int64)
        np.cumsum(count[:-1], out=start[1:])
        return of_task, _Layouts(
            start=start, count=count, offset=np.asarray(cols[0], float), duration=np.asarray(cols[1], float),
            lane=np.asarray(cols[2], np.int64), kind=np.asarray(cols[3], np.int64),
            name=np.asarray(cols[4], np.int64), layer=np.asarray(cols[5], np.int64),
            nbytes=np.asarray(cols[6], float), flops=np.asarray(cols[7], float),
            total=np.asarray([c.duration_s for c in unique], float))

    def _op_columns(self, unique: list[CostedTask], labelled: list[bool]) -> tuple[np.ndarray, list[list[Any]]]:
        """Per layout its span count, and the columns (offset, duration, lane, kind, name, layer,
        bytes, flops) of one span per op that takes time, layouts in order (``labelled[u]``: the
        task's name and layer are layout u's one op's). Each label column is coded in one pass,
        in the order of the spans, as coding them span by span would."""
        segments = [[s for s in cost.segments if s.duration_s > 0] for cost in unique]
        count = np.fromiter(map(len, segments), np.int64, len(segments))
        flat = [s for segs in segments for s in segs]
        ops = [s.op for s in flat]
        named = np.repeat(~np.asarray(labelled, bool), count).tolist() if flat else []
        names = iter(self.name.codes_of([op.name for op, n in zip(ops, named, strict=True) if n]))
        return count, [[s.offset_s for s in flat], [s.duration_s for s in flat],
                       self.lane.codes_of([op.lane for op in ops]), self.kind.codes_of([op.kind for op in ops]),
                       [next(names) if n else TASK_LABEL for n in named],
                       [op.layer if n else TASK_LABEL for op, n in zip(ops, named, strict=True)],
                       [op.bytes for op in ops], [op.flops for op in ops]]

    @staticmethod
    def _same_layout(cost: CostedTask) -> object:
        """What names a task's layout at ``detail="task"``: a one-op task's (its spans show
        neither the op's name nor its layer), else the costed task itself."""
        if len(cost.segments) != 1:
            return id(cost)
        s = cost.segments[0]
        return (s.op.lane, s.op.kind, s.duration_s, s.op.bytes, s.op.flops, cost.duration_s)

    def _lane_rows(self, cost: CostedTask) -> list[tuple[float, float, int, int, int, int, float, float]]:
        """One span per (lane, kind) the task's ops use, compute first; on the compute lane the
        kind (and everywhere the name) is the task's."""
        per_lane: dict[tuple[str, str], list[float]] = {}
        for s in cost.segments:
            if s.duration_s <= 0:
                continue
            kind = "" if s.op.lane == Lane.COMPUTE else str(s.op.kind)
            acc = per_lane.setdefault((str(s.op.lane), kind), [0.0, 0.0, 0.0])
            acc[0] += s.duration_s
            acc[1] += s.op.bytes
            acc[2] += s.op.flops
        rows, cursor = [], 0.0
        for (lane, kind), (dur, nbytes, flops) in sorted(per_lane.items(), key=lambda kv: kv[0][0] != Lane.COMPUTE):
            rows.append((cursor, dur, self.lane(lane), self.kind(kind) if kind else TASK_LABEL, TASK_LABEL,
                         TASK_LABEL, nbytes, flops))
            cursor += dur
        return rows

    def sort_keys(self, of_task: np.ndarray, lay: _Layouts, start: np.ndarray, end: np.ndarray) -> _Spans:
        """Every written task's spans, placed at its start and stretched to its end, then a
        ``recv`` span on the receiving rank of every send that has no receive task (its layout
        row is the last one, whose lane and kind are set here). ``of_task``, ``start`` and
        ``end`` are per written task. Each array is made once, at its full length."""
        recv = np.flatnonzero(self.mirrored[self.base])
        if recv.size:
            lay.lane[-1], lay.kind[-1] = self.lane(Lane.PP), self.kind(Kind.RECV)
        n, sentinel = of_task.size, lay.lane.size - 1
        counts = lay.count[of_task]
        ends = np.cumsum(counts)
        s = int(ends[-1]) if n else 0
        # one unit per written task (its spans) and per receive (one span)
        unit_count = np.concatenate([counts, np.ones(recv.size, np.int64)])
        task = np.repeat(np.concatenate([np.arange(n), recv]), unit_count)
        row = np.arange(task.size)
        row += np.repeat(np.concatenate([lay.start[of_task] - ends + counts,
                                         sentinel - s - np.arange(recv.size)]), unit_count)
        del unit_count
        spans, received = task[:s], task[s:]
        total = lay.total[of_task]
        stretch = np.where(total > 0, (end - start) / np.where(total > 0, total, 1.0), 1.0)[spans]
        a = np.empty(task.size)
        np.take(start, spans, out=a[:s])
        shift = lay.offset[row[:s]]
        shift *= stretch
        a[:s] += shift
        del shift
        b = np.empty(task.size)
        np.take(lay.duration, row[:s], out=b[:s])
        b[:s] *= stretch
        del stretch
        b[:s] += a[:s]
        np.minimum(b[:s], end[spans], out=b[:s])
        a[s:], b[s:] = start[received], end[received]
        rank = np.empty(task.size, np.int64)
        np.take(self.s_rank[self.base], spans, out=rank[:s])
        if recv.size:
            rank[s:] = self.peer[self.base[received]]
        return _Spans(task=task, row=row, rank=rank, start_s=a, end_s=b)

    def frame(self, sp: _Spans, lay: _Layouts) -> dict[str, Any]:
        """The spans sorted by rank, start and end, as the Timeline's columns (``sp`` is consumed:
        each sort key is dropped once gathered, so that the columns reuse its memory). ``name``,
        ``group``, ``chunk`` and ``flops``, which the step's metrics and memory do not read, are
        functions that make them when a feature reads them (a report, a trace)."""
        order = _span_order(sp.rank, sp.start_s, sp.end_s)
        data: dict[str, Any] = {}
        for c in ("rank", "start_s", "end_s"):
            data[c] = getattr(sp, c)[order]
            setattr(sp, c, None)
        task, row = sp.task[order], sp.row[order]
        sp.task = sp.row = None
        del order
        recv = row == lay.lane.size - 1
        base = self.base[task]
        mb = self.s_mb[base]
        mb += self.mb_shift[task]
        nbytes = lay.nbytes[row]
        if recv.any():
            nbytes[recv] = self.recv_bytes[base[recv]]
        data["lane"] = self.lane.categorical(lay.lane[row])
        data["kind"] = self.kind.categorical(_or_task(lay.kind[row], self.s_kind, base))
        data.update(step=self.s_step[base], stage=self.s_stage[base], microbatch=mb,
                    layer=_or_task(lay.layer[row], self.s_layer, base), bytes=nbytes)
        del base, recv
        written, shifts = self.base, self.mb_shift
        names, groups = self.name, self.group
        s_name, s_group, s_chunk = self.s_name, self.s_group, self.s_chunk
        data["name"] = lambda: names.categorical(_relabel(names, _or_task(lay.name[row], s_name, written[task]),
                                                          shifts[task], mb, row == lay.lane.size - 1))
        data["group"] = lambda: groups.categorical(s_group[written[task]])
        data["chunk"] = lambda: s_chunk[written[task]]
        data["flops"] = lambda: lay.flops[row]
        return data


def _relabel(vocab: SpanVocab, name: np.ndarray, mb_shift: np.ndarray, mb: np.ndarray, recv: np.ndarray) -> np.ndarray:
    """Rename (in place) the spans of copies made for other micro-batches (``F3`` -> ``F7``).
    New names enter ``vocab`` in the order of the keys (name, old, new micro-batch) of the
    tasks' spans, then of the mirrored receives."""
    names = list(vocab.codes)
    labelled = np.fromiter((has_label(n) for n in names), bool, len(names))
    shifted = np.flatnonzero((mb_shift != 0) & labelled[name])
    if shifted.size == 0:
        return name
    new_mb = mb[shifted]
    old_mb = new_mb - mb_shift[shifted]
    keys = (name[shifted] << 42) | (old_mb << 21) | new_mb  # micro-batches < 2**21
    unique, inverse = np.unique(keys, return_inverse=True)
    mask = (1 << 21) - 1
    codes: dict[int, int] = {}
    for part in (~recv[shifted], recv[shifted]):
        for k in sorted_unique(keys[part]).tolist():
            if k not in codes:
                codes[k] = vocab(relabel(names[k >> 42], (k >> 21) & mask, k & mask))
    name[shifted] = np.fromiter((codes[k] for k in unique.tolist()), np.int64, unique.size)[inverse]
    return name


@dataclass
class _Spans:
    """Spans as (written task, layout row) pairs, with the columns the sort needs (dropped,
    set to None, as :meth:`_Writer.frame` gathers them)."""

    task: Any
    row: Any
    rank: Any
    start_s: Any
    end_s: Any


def _span_order(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((end, start, rank))``, faster on spans: a stable sort by start (nearly sorted
    already), a stable (radix) sort by rank, then runs of equal (rank, start) ordered by end."""
    order = np.argsort(start, kind="stable")
    by_rank = rank[order]
    if by_rank.size and by_rank.min() >= 0 and by_rank.max() < 1 << 15:
        by_rank = by_rank.astype(np.int16)  # radix sort
    order = order[np.argsort(by_rank, kind="stable")]
    rs, ss = rank[order], start[order]
    same = (rs[1:] == rs[:-1]) & (ss[1:] == ss[:-1])
    tie = np.flatnonzero(same)
    if tie.size:
        members = sorted_unique(np.concatenate([tie, tie + 1]))  # positions in runs of equal (rank, start)
        first = np.ones(members.size, bool)
        first[1:] = ~same[members[1:] - 1]
        sub = order[members]
        order[members] = sub[np.lexsort((sub, end[sub], np.cumsum(first)))]
    return order


def _op_layout(cost: CostedTask, task: Task) -> object:
    """What names a task's layout at ``detail="op"``: the costed task, or, for a one-op task
    whose op has the task's name and layer (a pipeline message: thousands per step, each its own
    name), the span's place, kind and size, its labels then taken from the task (a tuple)."""
    if len(cost.segments) != 1:
        return id(cost)
    s = cost.segments[0]
    op = s.op
    if op.name != task.name or op.layer != task.layer:
        return id(cost)
    return (op.lane, op.kind, s.offset_s, s.duration_s, op.bytes, op.flops, cost.duration_s)


def mirrored(c: TaskColumns) -> np.ndarray:
    """Per task of a graph's columns: is it a send written again as a ``recv`` span on its peer?
    (A grouped send meets a receive task of its own there.)"""
    return (c.peer >= 0) & (c.kind == SEND_CODE) & (c.group == NO_GROUP)


def _or_task(codes: np.ndarray, task_codes: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``codes``, with the task's code (``task_codes[base]``) where a layout row says TASK_LABEL."""
    take = np.flatnonzero(codes == TASK_LABEL)
    codes[take] = task_codes[base[take]]
    return codes


def write_timeline(graph: TaskGraph, costs: list[CostedTask], start: np.ndarray, end: np.ndarray,
                   detail: str, meta: TimelineMeta | None, replication: Replication | None = None) -> Timeline:
    """The Timeline of a finished simulation (``meta``: its meta, else the graph's; the source
    "simulated" and ``detail`` unless it says otherwise; ``replication``: of the extended step
    whose tasks are copies of the simulated ones, :mod:`sim.steady_state`)."""
    return TimelineSource(graph, costs, detail).write(start, end, meta, replication)


class TimelineSource:
    """A finished simulation's tasks and their layouts (each distinct costed task's spans),
    made once for every Timeline written of it: the step, or extensions of it by different
    numbers of copies (:mod:`sim.window_step`)."""

    def __init__(self, graph: TaskGraph, costs: list[CostedTask], detail: str) -> None:
        if detail not in DETAILS:
            raise ValueError(f"detail={detail!r} is invalid: expected one of {', '.join(DETAILS)}")
        self.graph = graph
        self._writer = _Writer(graph, detail)
        self._of_task, self._layouts = self._writer.layouts(costs)

    def write(self, start: np.ndarray, end: np.ndarray, meta: TimelineMeta | None,
              replication: Replication | None = None) -> Timeline:
        """The Timeline of the tasks timed ``start``/``end`` (see :func:`write_timeline`)."""
        w = self._writer.fork().replicated(replication)
        lay = self._layouts
        start = np.asarray(start, float)[w.base] + w.shift_s
        end = np.asarray(end, float)[w.base] + w.end_shift_s
        spans = w.sort_keys(self._of_task[w.base], lay, start, end)
        del start, end
        meta = meta or self.graph.meta
        meta = dataclasses.replace(meta, source=meta.source or Source.SIMULATED, detail=meta.detail or w.detail)
        return Timeline(meta=meta, columns=w.frame(spans, lay))
