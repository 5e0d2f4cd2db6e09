"""Spans of a CPU rank (gloo): the "device" is the main thread plus its collective worker threads.

- Compute: top-level ``cpu_op`` ranges (not nested in another op, so children are never
  counted twice) on the rank's CPU threads, minus the time the same thread spends inside a
  collective call (DDP's all_reduce runs inside an autograd AccumulateGrad op, for example).
  ``gloo:*`` ranges do not block their thread: isend/irecv open one on the main thread and
  it stays open while the thread computes, so they are transfers, not thread time.
- Communication, two kinds of spans, both in the comm lane:
  * the call on the issuing thread (``c10d::allreduce_`` ... : enqueue, or the whole
    transfer for inline ops), ``source="gloo_call"``, bytes 0;
  * the transfer itself, a ``gloo:<coll>`` range on a ``pt_gloo_runloop`` worker thread (or
    on the main thread for send/recv), ``source="gloo_work"``, with the message bytes.
  Each transfer is matched to its call (FIFO among calls of a compatible kind that started
  before it, same element count when both are known) and takes the call's kind, step, labels
  and sequence number. gloo has no reduce-scatter: it runs an all_reduce, which is reported
  as the reduce_scatter the user called (with a warning saying so).
- FSDP2 CPU-offload calls (top-level ``aten::to`` in FSDP gather/reduce ranges) keep the compute
  lane with kind "offload" (see offload.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.vocab import Collective, Kind
from profiler.kineto.collectives import bytes_from_input, elements
from profiler.kineto.columns import CPU_OP, USER_ANNOTATION, TraceColumns
from profiler.kineto.labels import LabelIndex
from profiler.kineto.names import call_kind, is_comm_range_name
from profiler.kineto.offload import OFFLOAD, offload_copies, offload_ranges
from profiler.kineto.spans import SpanCols, concat_spans, make_spans, number_collectives
from profiler.kineto.steps import RankSteps
from sim.intervals import top_level_mask, union

_EMULATED = {(Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)}


@dataclass(frozen=True)
class CpuThreads:
    """Which threads of the rank compute and which are gloo workers."""

    compute: tuple[int, ...]
    workers: tuple[int, ...]


class _Rank:
    """Per-rank lookups shared by the functions below."""

    def __init__(self, tc: TraceColumns, steps: RankSteps, labels: LabelIndex) -> None:
        self.tc, self.steps, self.labels = tc, steps, labels
        self.end = tc.ts + tc.dur
        self.names = np.asarray(tc.names, dtype=object)
        self.cpu = (tc.cat == CPU_OP) | (tc.cat == USER_ANNOTATION)
        comm_codes = [c for c, n in enumerate(tc.names) if is_comm_range_name(n)]
        gloo_codes = [c for c, n in enumerate(tc.names) if n.startswith("gloo:")]
        self.comm = self.cpu & np.isin(tc.name, comm_codes)
        self.gloo = (tc.cat == USER_ANNOTATION) & np.isin(tc.name, gloo_codes)
        self.offload = offload_ranges(tc)

    def spans(self, rows: npt.NDArray[np.int64], at_tid: npt.NDArray[np.int64],
              at_t: npt.NDArray[np.float64], **cols: object) -> SpanCols:
        """Spans for event rows, labelled and stepped at (at_tid, at_t)."""
        lab = self.labels.lookup(at_tid, at_t)
        cols.setdefault("kind", lab.phase)
        cols.setdefault("start_us", self.tc.ts[rows])
        cols.setdefault("end_us", self.end[rows])
        return make_spans(rows.size, name=self.names[self.tc.name[rows]],
                          pstep=self.steps.step_of(at_t), stage=lab.stage, chunk=lab.chunk,
                          microbatch=lab.microbatch, layer=lab.layer, stream=self.tc.tid[rows],
                          row=rows, **cols)


def classify_threads(r: _Rank) -> CpuThreads:
    """Workers: named ``*gloo*`` or, apart from the main thread, carrying gloo:* ranges."""
    tc, steps = r.tc, r.steps
    tids = {int(t) for t in np.unique(tc.tid[r.cpu & (tc.pid == steps.main_pid)])}
    gloo_tids = {int(t) for t in np.unique(tc.tid[r.gloo])}
    named = {tid for (pid, tid), name in tc.thread_names.items()
             if pid == steps.main_pid and "gloo" in name.lower()}
    workers = ((gloo_tids | named) & tids) - {steps.main_tid}
    return CpuThreads(compute=tuple(sorted(tids - workers)), workers=tuple(sorted(workers)))


def _split_around(s: npt.NDArray[np.float64], e: npt.NDArray[np.float64],
                  cs: npt.NDArray[np.float64], ce: npt.NDArray[np.float64]
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Pieces of each [s, e] outside the disjoint sorted cuts: (parent index, start, end)."""
    j0 = np.searchsorted(ce, s, side="right")
    hit = np.zeros(s.size, dtype=bool)
    if cs.size:
        hit = (j0 < cs.size) & (cs[np.minimum(j0, cs.size - 1)] < e)
    idx: list[int] = []
    ps: list[float] = []
    pe: list[float] = []
    for i in np.flatnonzero(hit):
        cur, j = float(s[i]), int(j0[i])
        while j < cs.size and cs[j] < e[i]:
            if cs[j] > cur:
                idx.append(int(i))
                ps.append(cur)
                pe.append(float(cs[j]))
            cur, j = max(cur, float(ce[j])), j + 1
        if cur < e[i]:
            idx.append(int(i))
            ps.append(cur)
            pe.append(float(e[i]))
    keep = np.flatnonzero(~hit)
    return (np.concatenate([keep, np.asarray(idx, dtype=np.int64)]),
            np.concatenate([s[keep], np.asarray(ps, dtype=np.float64)]),
            np.concatenate([e[keep], np.asarray(pe, dtype=np.float64)]))


def _thread_spans(r: _Rank, tid: int) -> SpanCols:
    """Compute pieces and collective calls of one compute thread."""
    tc, end = r.tc, r.end
    on = tc.tid == tid
    ops = np.flatnonzero((tc.cat == CPU_OP) & on)
    top = ops[top_level_mask(tc.ts[ops], end[ops])]
    # Only the calls block the thread: a gloo:* range on this thread is an async transfer
    # (isend/irecv) that stays open while the thread computes.
    comm = np.flatnonzero(r.comm & on & (tc.cat == CPU_OP))
    calls = comm[top_level_mask(tc.ts[comm], end[comm])]
    work = top[~r.comm[top]]
    parent, ps, pe = _split_around(tc.ts[work], end[work], *union(tc.ts[comm], end[comm]))
    rows = work[parent]
    compute = r.spans(rows, np.full(rows.size, tid), tc.ts[rows], lane="compute", start_us=ps,
                      end_us=pe, source="cpu_op")
    compute["kind"][offload_copies(tc, r.offload, rows, gpu=False, at_tid=np.full(rows.size, tid),
                                   at_t=tc.ts[rows], main_tid=r.labels.main_tid)] = OFFLOAD
    kinds = np.array([call_kind(tc.name_of(int(c))) or "other" for c in calls], dtype=object)
    call = r.spans(calls, tc.tid[calls], tc.ts[calls], lane="comm", kind=kinds, source="gloo_call")
    return concat_spans([compute, call])


def _call_elements(tc: TraceColumns, row: int) -> set[int]:
    dims = tc.args.get(row, {}).get("Input Dims")
    return {elements(d) for d in dims if isinstance(d, list) and d} if isinstance(dims, list) else set()


def _compatible(call: str, work: str) -> bool:
    return call == work or (call, work) in _EMULATED


def match_work(tc: TraceColumns, calls: SpanCols, work_rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """For each gloo:* row, the index into ``calls`` of its call, -1 if none.

    Transfers are taken by start time; each takes the earliest unmatched call of a compatible
    kind that started before it and, when both sizes are known, has its element count.

    Linear (amortised): the calls are queued per (kind, element count) and per kind, in start
    order, and each queue's head only moves forward past taken calls, so every call is passed
    over a bounded number of times (the quadratic scan over all calls per transfer took minutes
    on traces with 10^5 collectives).
    """
    order = np.argsort(calls["start_us"], kind="stable")
    starts = calls["start_us"]
    taken = np.zeros(order.size, dtype=bool)
    out = np.full(work_rows.size, -1, dtype=np.int64)
    rank_of = np.empty(order.size, dtype=np.int64)
    rank_of[order] = np.arange(order.size)
    by_kind: dict[str, list[int]] = {}
    by_size: dict[tuple[str, int], list[int]] = {}
    unsized: dict[str, list[int]] = {}
    for k in order.tolist():
        kind = str(calls["kind"][k])
        by_kind.setdefault(kind, []).append(k)
        sizes = _call_elements(tc, int(calls["row"][k]))
        for e in sizes:
            by_size.setdefault((kind, e), []).append(k)
        if not sizes:
            unsized.setdefault(kind, []).append(k)
    heads: dict[int, int] = {}  # id(queue) -> index of its first call not yet taken

    def head(queue: list[int] | None, t: float) -> int:
        """The queue's earliest untaken call started by ``t``, -1 if none."""
        if not queue:
            return -1
        i = heads.get(id(queue), 0)
        while i < len(queue) and taken[queue[i]]:
            i += 1
        heads[id(queue)] = i
        return queue[i] if i < len(queue) and starts[queue[i]] <= t else -1

    for w in np.argsort(tc.ts[work_rows], kind="stable").tolist():
        row = int(work_rows[w])
        wkind = call_kind(tc.name_of(row)) or "other"
        dims = tc.args.get(row, {}).get("Input Dims")
        welem = elements(dims[0]) if isinstance(dims, list) and dims else -1
        t = float(tc.ts[row])
        best = -1
        for kind in _compatible_kinds(wkind, by_kind):
            queues = [by_kind.get(kind)] if welem < 0 else [by_size.get((kind, welem)), unsized.get(kind)]
            for q in queues:
                k = head(q, t)
                if k >= 0 and (best < 0 or rank_of[k] < rank_of[best]):
                    best = k
        if best >= 0:
            taken[best], out[w] = True, best
    return out


def _compatible_kinds(work: str, kinds: dict[str, list[int]]) -> list[str]:
    """Call kinds a transfer of kind ``work`` can belong to."""
    return [c for c in kinds if _compatible(c, work)]


def _from_call(calls: SpanCols, match: npt.NDArray[np.int64], col: str,
               own: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Per transfer: its matched call's ``col``, else its ``own`` value."""
    out = np.array(own, copy=True)
    ok = match >= 0
    out[ok] = calls[col][match[ok]]
    return out


def _work_spans(r: _Rank, threads: CpuThreads, calls: SpanCols) -> SpanCols:
    """The gloo:* transfer ranges, with kind/labels/seq of their matched call."""
    tc = r.tc
    rows = np.flatnonzero(r.gloo & np.isin(tc.tid, list(threads.compute + threads.workers)))
    match = match_work(tc, calls, rows)
    ok = match >= 0
    own_kind = np.array([call_kind(tc.name_of(int(x))) or "other" for x in rows], dtype=object)
    at_t = _from_call(calls, match, "start_us", tc.ts[rows])
    at_tid = _from_call(calls, match, "stream", tc.tid[rows])
    nbytes = np.array([bytes_from_input(tc.args.get(int(x), {})) for x in rows], dtype=np.float64)
    return r.spans(rows, at_tid, at_t, lane="comm", kind=_from_call(calls, match, "kind", own_kind),
                   bytes=nbytes, seq=_from_call(calls, match, "seq", np.full(rows.size, -1)),
                   launch_us=np.where(ok, at_t, np.nan), launch_tid=np.where(ok, at_tid, -1),
                   source="gloo_work")


def cpu_spans(tc: TraceColumns, steps: RankSteps, labels: LabelIndex) -> tuple[SpanCols, list[str]]:
    """All spans of a CPU rank, and notes to report (reduce_scatter emulation)."""
    r = _Rank(tc, steps, labels)
    threads = classify_threads(r)
    base = concat_spans([_thread_spans(r, t) for t in threads.compute])
    number_collectives(base, base["start_us"])
    calls = {k: v[base["source"] == "gloo_call"] for k, v in base.items()}
    work = _work_spans(r, threads, calls)
    notes = []
    emulated = int(np.sum((work["kind"] == Kind.REDUCE_SCATTER) & (work["name"] == "gloo:all_reduce")))
    if emulated:
        notes.append(f"{emulated} reduce_scatter call(s) ran as gloo all_reduce (gloo has no "
                     "reduce_scatter); reported as reduce_scatter")
    return concat_spans([base, work]), notes
