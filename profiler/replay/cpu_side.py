"""The CPU side of a GPU run: runtime calls and CPU op time on each thread, as replay items.

The measured Timeline of a GPU run holds only device activity; what the CPU did comes from the
trace files again (:func:`profiler.kineto.parse_file.read_columns`). Per CPU thread of the
rank's process:

- every CUDA runtime/driver call is an item (``cpu_call``): kernel launches (the device work
  they launch cannot start before them), blocking calls (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, synchronous copies...: ``wait`` items, their end waits for device
  work), ``cudaStreamWaitEvent`` (a cross-stream dependency on the device);
- CPU op time outside runtime calls (top-level ``cpu_op`` ranges minus the calls inside them)
  is a ``cpu_piece`` item (lane "host");
- what lies between items (Python, idle) becomes host delay in the replay model.

Only events inside the rank's kept profiler steps are used (all of them when the parser kept
every event). Times are put on the Timeline clock exactly as the parser does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler.kineto.columns import CPU_OP, CUDA_DRIVER, CUDA_RUNTIME, TraceColumns
from profiler.kineto.parse_file import read_columns
from profiler.kineto.parsed import ParsedRun
from profiler.kineto.steps import find_steps
from profiler.replay.items import extra_items, make_extra
from sim import intervals

SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyPeer", "cudaMemset", "cuStreamSynchronize", "cuCtxSynchronize",
    "cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2",
})
COPY_CALLS = frozenset({"cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemsetAsync"})
STREAM_WAIT_CALL = "cudaStreamWaitEvent"


@dataclass(frozen=True)
class CpuSide:
    """CPU items of all ranks and each rank's main thread id."""

    items: pd.DataFrame
    main_tid: dict[int, int]


def _clock(run: ParsedRun, tc: TraceColumns) -> float:
    """Offset (µs) to subtract from this file's ts to get Timeline seconds x 1e6."""
    return float(run.timeline.meta.t0_unix_us or 0.0) - tc.base_ns / 1000.0


def _windows(run: ParsedRun, rank: int) -> list[tuple[float, float]]:
    """Kept ProfilerStep windows of a rank (s), or one infinite window when all was kept."""
    meta = run.timeline.meta
    if len(meta.profiler_steps_kept or ()) <= 1 and not meta.profiler_steps_dropped:
        return [(-np.inf, np.inf)]
    s = run.steps[(run.steps["rank"] == rank) & run.steps["kept"]]
    return list(zip(s["start_s"].to_numpy(float), s["end_s"].to_numpy(float), strict=True))


def _step_at(run: ParsedRun, rank: int, t: np.ndarray) -> np.ndarray:
    s = run.steps[run.steps["rank"] == rank]
    out = np.full(t.size, -1, dtype=np.int64)
    for label, a, b in zip(s["step"], s["start_s"], s["end_s"], strict=True):
        out[(t >= a) & (t <= b)] = int(label)
    return out


def _inside(t: np.ndarray, windows: list[tuple[float, float]]) -> np.ndarray:
    keep = np.zeros(t.size, dtype=bool)
    for a, b in windows:
        keep |= (t >= a) & (t <= b)
    return keep


def _pieces(start: np.ndarray, end: np.ndarray, call_s: np.ndarray, call_e: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parts of the op ranges around the calls inside them, zero-length calls included:
    (op index, start, end). Calls of one thread do not overlap each other."""
    order = np.argsort(call_s, kind="stable")
    cs, ce = call_s[order], call_e[order]
    idx, ps, pe = [], [], []
    for i, (a, b) in enumerate(zip(start, end, strict=True)):
        cur = a
        for k in range(int(np.searchsorted(cs, a)), int(np.searchsorted(cs, b, side="right"))):
            if cs[k] > cur:
                idx.append(i)
                ps.append(cur)
                pe.append(float(cs[k]))
            cur = max(cur, float(ce[k]))
        if b > cur:
            idx.append(i)
            ps.append(cur)
            pe.append(b)
    return np.asarray(idx, dtype=np.int64), np.asarray(ps, float), np.asarray(pe, float)


def _thread_rows(run: ParsedRun, rank: int, tc: TraceColumns, pid: int, tid: int,
                 windows: list[tuple[float, float]]) -> list[dict[str, object]]:
    off = _clock(run, tc)
    on = (tc.pid == pid) & (tc.tid == tid)
    calls = np.flatnonzero(on & ((tc.cat == CUDA_RUNTIME) | (tc.cat == CUDA_DRIVER)))
    ops = np.flatnonzero(on & (tc.cat == CPU_OP))
    cs, ce = (tc.ts[calls] - off) * 1e-6, (tc.ts[calls] + tc.dur[calls] - off) * 1e-6
    keep = _inside(cs, windows)
    calls, cs, ce = calls[keep], cs[keep], ce[keep]
    os_, oe = (tc.ts[ops] - off) * 1e-6, (tc.ts[ops] + tc.dur[ops] - off) * 1e-6
    top = intervals.top_level_mask(os_, oe) & _inside(os_, windows)
    parent, ps, pe = _pieces(os_[top], oe[top], cs, ce)
    stream = f"cpu:{tid}"
    rows = []
    steps = _step_at(run, rank, cs)
    for k, row in enumerate(calls):
        name = tc.name_of(int(row))
        rows.append(make_extra(rank, stream, float(cs[k]), float(ce[k]), "call", "cpu_call", name,
                               int(steps[k]), wait=name in SYNC_CALLS, correlation=int(tc.corr[row])))
    names = [tc.name_of(int(r)) for r in ops[top]]
    psteps = _step_at(run, rank, ps)
    for k in range(ps.size):
        if pe[k] > ps[k]:
            rows.append(make_extra(rank, stream, float(ps[k]), float(pe[k]), "host", "cpu_piece",
                                   names[int(parent[k])], int(psteps[k])))
    return rows


def _threads(tc: TraceColumns, pid: int) -> list[int]:
    cpu = (tc.pid == pid) & np.isin(tc.cat, (CPU_OP, CUDA_RUNTIME, CUDA_DRIVER))
    return sorted(int(t) for t in np.unique(tc.tid[cpu]))


def _mark_blocking_copies(items: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    """A copy call whose own device copy ends inside the call blocked on it: a wait item."""
    copies = items[(items["name"].isin(COPY_CALLS)) & (items["correlation"] >= 0)]
    if copies.empty:
        return items
    dev = gpu[gpu["correlation"] >= 0].set_index(["rank", "correlation"])["end_s"]
    dev = dev[~dev.index.duplicated()]
    keys = pd.MultiIndex.from_arrays([copies["rank"], copies["correlation"]])
    ends = dev.reindex(keys).to_numpy(float)
    blocking = (ends > copies["start_s"].to_numpy()) & (ends <= copies["end_s"].to_numpy())
    wait = items["wait"].to_numpy().copy()
    wait[copies.index[blocking]] = True
    return items.assign(wait=wait)


def cpu_side_items(run: ParsedRun, gpu_items: pd.DataFrame) -> CpuSide:
    """CPU items of every rank of a GPU run (re-reading the trace files)."""
    rows: list[dict[str, object]] = []
    main: dict[int, int] = {}
    for rank, path in sorted(run.files.items()):
        tc = read_columns(path)
        steps = find_steps(tc)
        main[rank] = steps.main_tid
        windows = _windows(run, rank)
        for tid in _threads(tc, steps.main_pid):
            rows.extend(_thread_rows(run, rank, tc, steps.main_pid, tid, windows))
    items = extra_items(rows)
    return CpuSide(items=_mark_blocking_copies(items, gpu_items), main_tid=main)
