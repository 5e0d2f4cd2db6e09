"""Overlapped communication is not free: compute slowed while an NCCL kernel runs beside it.

A collective or pipeline send is a CUDA kernel holding one SM per channel and moving its data
through HBM (:mod:`topo.interference`): a matmul that runs while it does gets fewer SMs (fewer,
or more partial, waves), memory-bound work a smaller share of the bandwidth. How much of each
compute task runs beside such a kernel is only known once the step is timed, so the simulator
times it twice:

1. time the step (the list or SimPy engine);
2. per rank, the union of its communication tasks' spans (data-parallel, pipeline, context and
   expert lanes; tensor-parallel collectives run inside compute tasks, in sequence, and copies
   use copy engines, not SMs); each compute task is lengthened by
   ``overlap x (slowdown - 1)``, ``overlap`` its time inside that union and ``slowdown`` the
   time-weighted slowdown of its ops beside the rank's heaviest communication kernel
   (most CTAs, most HBM traffic): matmuls by their shape, attention by the SMs it loses,
   memory-bound ops by the bandwidth;
3. time the step again with those durations.

One correction, not a fixed point: the second timing moves the communication a little, and
the overlaps it would give are not fed back. Devices without SMs (CPU hosts) are not slowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from core.task_columns import KIND_CODES, LANE_CODES, row_codes
from core.taskgraph import Op, TaskGraph
from core.vocab import COMPUTE_CLASSES, Kind, Lane, OpClass
from sim import intervals
from sim.costing import CostedTask
from sim.gemm_pricing import wave_shape
from sim.pricing import SlowdownMemo, TaskCoster, new_slowdown_memo
from topo.device import DeviceSpec
from topo.gemm_shape import GemmShape
from topo.interference import comm_hbm_GBps, gemm_slowdown, hbm_slowdown, sm_share_slowdown

SM_LANES = (Lane.DP, Lane.PP, Lane.CP, "comm.ep")
"""Lanes whose tasks are NCCL kernels running beside the compute stream."""
SM_LANE_CODES = np.array([LANE_CODES[Lane(lane)] for lane in SM_LANES], np.int64)  # SM_LANES as column codes
MEMORY_CLASSES = (OpClass.ELEMENTWISE, OpClass.ACTIVATION, OpClass.OPTIMIZER)


def applies(device: DeviceSpec) -> bool:
    """Compute is slowed by communication kernels on devices with SMs (GPUs)."""
    return device.sm_count > 0


def op_slowdown(device: DeviceSpec, op: Op, dtype: str, ctas: int, comm_GBps: float) -> float:
    """How much longer ``op`` runs beside a kernel of ``ctas`` CTAs moving ``comm_GBps`` of HBM
    (``dtype``: the job's compute dtype, unless the op has its own, an FP8 GEMM)."""
    if op.op_class == OpClass.GEMM and op.m > 0:  # the shape its kernels' waves fill (its TP-overlap chunks)
        shape = wave_shape(GemmShape(op.m, op.n, op.k, op.batch), op.split, op.split_streams)
        return _shaped_slowdown(device, shape.m, shape.n, shape.k, shape.batch, op.dtype or dtype, ctas, comm_GBps)
    if op.op_class in (OpClass.GEMM, OpClass.ATTENTION):
        return sm_share_slowdown(device, ctas)
    if op.op_class in MEMORY_CLASSES:
        return hbm_slowdown(device, comm_GBps)
    return 1.0


@lru_cache(maxsize=1 << 16)
def _shaped_slowdown(device: DeviceSpec, m: int, n: int, k: int, batch: int, dtype: str, ctas: int,
                     comm_GBps: float) -> float:
    """:func:`topo.interference.gemm_slowdown` of an (m, n, k, batch) GEMM (memoized: explore
    prices the same shapes for many plans)."""
    return gemm_slowdown(device, GemmShape(m, n, k, batch), dtype, ctas, comm_GBps)


def task_slowdown(device: DeviceSpec, cost: CostedTask, dtype: str, ctas: int, comm_GBps: float,
                  memo: dict[tuple[object, ...], float] | None = None) -> float:
    """Time-weighted slowdown of a compute task's ops (its communication ops are not slowed);
    ``memo``: the ops' slowdowns already found for this ``device`` and ``dtype`` (filled)."""
    if cost.duration_s <= 0 or (ctas <= 0 and comm_GBps <= 0):
        return 1.0
    memo = {} if memo is None else memo
    slowed = sum(s.duration_s * _memo_slowdown(memo, device, s.op, dtype, ctas, comm_GBps)
                 if s.op.op_class in COMPUTE_CLASSES else s.duration_s for s in cost.segments)
    total = sum(s.duration_s for s in cost.segments)
    return slowed / total if total > 0 else 1.0


def memoized_task_slowdown(device: DeviceSpec, dtype: str,
                           memo: SlowdownMemo | None = None) -> Callable[[CostedTask, int, float], float]:
    """:func:`task_slowdown` on ``device`` for ``dtype``, found once per (priced task, load): the
    returned function memoizes by the cost's identity (ranks alike share one) and by its rank's
    load (CTAs, HBM GB/s), and the ops' slowdowns across every cost it is asked for; in ``memo``
    when given (kept by a caller that prices many plans on one device and dtype with shared
    costs: explore's :class:`sim.explore.pricing.SharedPriceCoster`)."""
    of_ops, found = memo if memo is not None else new_slowdown_memo()

    def slowdown(cost: CostedTask, ctas: int, comm_GBps: float) -> float:
        return found.get(cost, lambda: task_slowdown(device, cost, dtype, ctas, comm_GBps, of_ops), ctas, comm_GBps)
    return slowdown


def _memo_slowdown(memo: dict[tuple[object, ...], float], device: DeviceSpec, op: Op, dtype: str, ctas: int,
                   comm_GBps: float) -> float:
    """:func:`op_slowdown`, memoized by what it reads of ``op`` (a layer's GEMMs repeat in every
    layer and micro-batch under other names); one ``device`` and ``dtype`` per ``memo``."""
    key = (op.op_class, op.m, op.n, op.k, op.batch, op.split, op.split_streams, op.dtype, ctas, comm_GBps)
    found = memo.get(key)
    if found is None:
        found = memo[key] = op_slowdown(device, op, dtype, ctas, comm_GBps)
    return found


def rank_loads(graph: TaskGraph, coster: TaskCoster) -> dict[int, tuple[int, float]]:
    """Per rank, the heaviest communication kernel it runs: (CTAs, HBM GB/s) (the most of each),
    priced once per (rank, peer, last op's class, bytes and group), by its first task."""
    c = graph.columns
    keys: dict[tuple[object, ...], int] = {}
    last_op = np.fromiter((keys.setdefault((ops[-1].op_class, ops[-1].bytes, ops[-1].dim), len(keys)) if ops else -1
                           for ops in c.works), np.int64, len(c.works))[c.work]  # per task; -1: no ops
    ids = np.flatnonzero(np.isin(c.lane, SM_LANE_CODES) & (last_op >= 0))
    loads: dict[int, tuple[int, float]] = {}
    if not ids.size:
        return loads
    _, first = np.unique(row_codes(c.rank[ids], c.peer[ids], last_op[ids]), return_index=True)
    for i in ids[np.sort(first)].tolist():
        t = graph.tasks[i]
        ctas, busbw = coster.comm_load(t)
        hbm = comm_hbm_GBps(hbm_op(t.ops[-1]), busbw) if busbw > 0 else 0.0
        old = loads.get(t.rank, (0, 0.0))
        loads[t.rank] = (max(old[0], ctas), max(old[1], hbm))
    return loads


def hbm_op(op: Op) -> str:
    """The collective kind whose HBM traffic ``op`` makes (a pipeline send: p2p)."""
    return "p2p" if op.op_class in (OpClass.P2P, "send", "recv") else str(op.op_class)


def slowed_durations(rank: np.ndarray, compute: np.ndarray, comm: np.ndarray, start: np.ndarray,
                     end: np.ndarray, duration: np.ndarray, slowdown: np.ndarray) -> np.ndarray:
    """Each task's duration, a compute task's lengthened by its time inside its rank's
    communication spans times (slowdown - 1) (arrays per task; ranks laid side by side on one
    time axis so one interval intersection serves them all)."""
    out = duration.copy()
    hit = compute & (slowdown > 1.0)
    if not hit.any() or not comm.any():
        return out
    stride = 2.0 * float(np.nanmax(end)) + 1.0
    shift = rank * stride
    union = intervals.union(start[comm] + shift[comm], end[comm] + shift[comm])
    ids = np.flatnonzero(hit)
    overlap = intervals.overlap_each(start[ids] + shift[ids], end[ids] + shift[ids], union)
    out[ids] = duration[ids] + overlap * (slowdown[ids] - 1.0)
    return out


def pipeline_busy(graph: TaskGraph, start: np.ndarray, end: np.ndarray,
                  duration: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`busy_spans` of ``graph``'s tasks (seconds)."""
    c = graph.columns
    return busy_spans(c.lane == LANE_CODES[Lane.PP], c.kind == KIND_CODES[Kind.RECV], start, end, duration)


def busy_spans(pp: np.ndarray, recv: np.ndarray, start: np.ndarray, end: np.ndarray,
               duration: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each task as communication beside compute: a pipeline send or receive
    (``pp``; ``recv`` tells which) moves data for its priced ``duration`` only, not for the whole
    span the schedule holds it open: ``torch.distributed.pipelining``'s runtime schedules wait
    for their sends at the end of the step (:mod:`schedules.passes.p2p_torch`), and a receive
    posted before its sender waits for the data (its transfer ends its span). A send counts from
    its start, a receive up to its end; other tasks keep their spans (arrays per task, seconds)."""
    return (np.where(pp & recv, np.maximum(start, end - duration), start),
            np.where(pp & ~recv, np.minimum(end, start + duration), end))


def slowed_costs(graph: TaskGraph, costs: Sequence[CostedTask], start: np.ndarray, end: np.ndarray,
                 coster: TaskCoster) -> list[CostedTask] | None:
    """The tasks' costs after one interference correction (None: nothing overlaps, or no SMs)."""
    device = coster.device
    if not applies(device):
        return None
    loads = rank_loads(graph, coster)
    if not loads:
        return None
    columns = graph.columns
    n = len(columns)
    rank = columns.rank
    compute = columns.lane == LANE_CODES[Lane.COMPUTE]
    comm = np.isin(columns.lane, SM_LANE_CODES)
    slowdown_of = memoized_task_slowdown(device, coster.dtype, coster.slowdown_memo())
    slowdown = np.ones(n)
    ids = np.flatnonzero(compute & np.isin(rank, list(loads)))
    if ids.size:  # one call per distinct (cost, rank): the slowdown reads nothing else
        cost_id = np.fromiter((id(costs[i]) for i in ids.tolist()), np.int64, ids.size)
        _, first, inverse = np.unique(row_codes(cost_id, rank[ids]), return_index=True, return_inverse=True)
        distinct = [slowdown_of(costs[i], *loads[int(rank[i])]) for i in ids[first].tolist()]
        slowdown[ids] = np.asarray(distinct, float)[inverse.reshape(-1)]
    duration = np.fromiter((c.duration_s for c in costs), float, n)
    busy_start, busy_end = pipeline_busy(graph, start, end, duration)
    new = slowed_durations(rank, compute, comm, busy_start, busy_end, duration, slowdown)
    if np.array_equal(new, duration):
        return None
    out: list[CostedTask] = []
    made: dict[tuple[int, float], CostedTask] = {}  # one slowed cost per (cost, duration)
    for c, d in zip(costs, new.tolist(), strict=True):
        if d != c.duration_s:
            key = (id(c), d)
            slowed = made.get(key)
            if slowed is None:
                slowed = made[key] = replace(c, duration_s=d)
            c = slowed
        out.append(c)
    return out
