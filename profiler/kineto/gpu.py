"""Spans of a GPU rank: kernels, memcpy and memset on the rank's CUDA streams.

- ``pid`` is the device index and ``tid`` the stream (never hard-code a NCCL stream).
- NCCL kernels (``^nccl.*Kernel``) are communication; the lane is ``comm.<dim>`` when the group
  is known and mapped (see groups.py), else ``comm``. Memcpy/memset go to lane ``memcpy``, kind
  "offload" for FSDP2 CPU-offload copies (see offload.py), else "other".
  Every other kernel is compute, its kind fwd/bwd/optimizer from the enclosing CPU ranges of its
  launch, else "other". ``gpu_user_annotation`` and ``cuda_sync`` never get here (columns.py).
- Each GPU event is linked to its CPU launch (``cuda_runtime``/``cuda_driver``) by
  ``args.correlation``; the launch gives the step and the labels.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profiler.kineto.collectives import CommRanges, nccl_comm_info
from profiler.kineto.columns import (
    CUDA_DRIVER,
    CUDA_RUNTIME,
    GPU_CATEGORIES,
    GPU_MEMCPY,
    GPU_MEMSET,
    KERNEL,
    TraceColumns,
)
from profiler.kineto.groups import GroupMap
from profiler.kineto.labels import LabelIndex
from profiler.kineto.names import is_memory_kernel, is_nccl_kernel
from profiler.kineto.offload import OFFLOAD, offload_copies, offload_ranges
from profiler.kineto.spans import SpanCols, make_spans, number_collectives
from profiler.kineto.steps import RankSteps

_SOURCE = {KERNEL: "kernel", GPU_MEMCPY: "gpu_memcpy", GPU_MEMSET: "gpu_memset"}


def link_launches(tc: TraceColumns, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Row of the CPU launch call with the same correlation id as each GPU row, -1 if none."""
    launch = np.flatnonzero(((tc.cat == CUDA_RUNTIME) | (tc.cat == CUDA_DRIVER)) & (tc.corr >= 0))
    out = np.full(rows.size, -1, dtype=np.int64)
    if launch.size == 0 or rows.size == 0:
        return out
    launch = launch[np.argsort(tc.corr[launch], kind="stable")]
    keys = tc.corr[launch]
    want = tc.corr[rows]
    pos = np.clip(np.searchsorted(keys, want), 0, keys.size - 1)
    hit = (keys[pos] == want) & (want >= 0)
    out[hit] = launch[pos[hit]]
    return out


def _name_flags(tc: TraceColumns) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    nccl = np.fromiter((is_nccl_kernel(n) for n in tc.names), bool, len(tc.names))
    mem = np.fromiter((is_memory_kernel(n) for n in tc.names), bool, len(tc.names))
    return nccl, mem


def gpu_spans(tc: TraceColumns, steps: RankSteps, labels: LabelIndex, groups: GroupMap) -> SpanCols:
    """All GPU spans of one rank (times in file µs, ``pstep`` from the launch)."""
    rows = np.flatnonzero(np.isin(tc.cat, GPU_CATEGORIES))
    nccl_name, mem_name = _name_flags(tc)
    cat, code = tc.cat[rows], tc.name[rows]
    comm = (cat == KERNEL) & nccl_name[code]
    memcpy = (cat != KERNEL) | mem_name[code]
    launch = link_launches(tc, rows)
    linked = launch >= 0
    lts = np.where(linked, tc.ts[np.maximum(launch, 0)], np.nan)
    ltid = np.where(linked, tc.tid[np.maximum(launch, 0)], -1)
    pstep = np.full(rows.size, -1, dtype=np.int64)
    pstep[linked] = steps.step_of(lts[linked])
    lab = labels.lookup(ltid[linked], lts[linked])
    kind = np.full(rows.size, "other", dtype=object)
    kind[linked] = lab.phase
    kind[memcpy] = "other"
    kind[memcpy & offload_copies(tc, offload_ranges(tc), rows, gpu=True, at_tid=ltid, at_t=lts,
                                 main_tid=labels.main_tid)] = OFFLOAD
    lane = np.where(comm, "comm", np.where(memcpy, "memcpy", "compute")).astype(object)
    spans = make_spans(
        rows.size, lane=lane, kind=kind, name=np.asarray(tc.names, dtype=object)[code],
        start_us=tc.ts[rows], end_us=tc.ts[rows] + tc.dur[rows], pstep=pstep,
        bytes=tc.nbytes_moved[rows], device=tc.pid[rows], stream=tc.tid[rows],
        correlation=tc.corr[rows], launch_us=lts, launch_tid=ltid, row=rows,
        source=np.vectorize(_SOURCE.get, otypes=[object])(cat) if rows.size else "")
    for field, values in (("stage", lab.stage), ("chunk", lab.chunk),
                          ("microbatch", lab.microbatch), ("layer", lab.layer)):
        spans[field][linked] = values
    _fill_comm(tc, rows, comm, spans, groups)
    return spans


def _fill_comm(tc: TraceColumns, rows: npt.NDArray[np.int64], comm: npt.NDArray[np.bool_],
               spans: SpanCols, groups: GroupMap) -> None:
    """Kind, bytes, group, lane and per-group sequence number of the NCCL kernels."""
    ranges = CommRanges(tc)
    for i in np.flatnonzero(comm):
        info = nccl_comm_info(tc, ranges, int(rows[i]), int(spans["launch_tid"][i]),
                              float(spans["launch_us"][i]))
        spans["kind"][i] = info.kind
        spans["bytes"][i] = info.nbytes
        spans["pg"][i] = info.pg
        spans["pg_ranks"][i] = str(list(info.pg_ranks)) if info.pg_ranks else ""
        spans["lane"][i] = groups.lane(info.pg, info.pg_ranks)
        spans["source"][i] = "nccl_kernel"
    order = np.where(np.isnan(spans["launch_us"]), spans["start_us"], spans["launch_us"])
    number_collectives(spans, order)
