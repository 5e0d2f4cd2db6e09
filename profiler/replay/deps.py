"""Dependencies between replay items: what each item had to wait for, besides its stream order.

Structural links (facts the trace states):
- a GPU kernel/copy cannot start before the CPU call that launched it starts (correlation id);
- a gloo transfer cannot start before the call that enqueued it starts (same collective key;
  the worker may pick it up before the call returns);
- a blocking copy waits for its own device copy.

Inferred links (the trace shows the effect, not the link; rules below, thresholds in seconds):
- cross-stream waits on a GPU: ``cudaStreamWaitEvent`` makes the next kernel the thread
  launches wait for the last kernel launched before it on another stream; and a kernel that
  starts later than both its stream predecessor and its launch allow (by > GPU_WAIT_MIN_S)
  waited for the latest kernel of another stream of the rank that ended in between;
- a synchronising call (``cudaStreamSynchronize`` ...) waits for the device work that ended
  inside it (the latest), else for the latest-ending work its thread launched before it;
- a CPU thread of a GPU run that resumes after an idle gap of at least CPU_WAKE_MIN_GAP_S, within
  CPU_WAKE_WINDOW_S after an item of another of the rank's threads ended, waited for it
  (the main thread blocked in ``backward()`` while the autograd thread worked);
- a CPU thread of a gloo run waits for a transfer it issued when, at the transfer's end, it was
  idle or inside a wait call (``wait_tensor``) and resumed within GLOO_WAKE_WINDOW_S (a
  point-to-point receive's range ends when ``wait()`` returns, so its thread always depends);
  FSDP2's own wait points come from its profiler ranges (:mod:`profiler.replay.fsdp_waits`).

An edge is (item, dependency, anchor): anchor "end" (the usual) or "start" (a launch).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from profiler.replay.items import GPU_SOURCES, P2P_KINDS
from profiler.replay.matching import Matching

GPU_WAIT_MIN_S = 2e-6
CPU_WAKE_MIN_GAP_S = 20e-6
CPU_WAKE_WINDOW_S = 100e-6
GLOO_WAKE_WINDOW_S = 2e-3
STREAM_WAIT_CALL = "cudaStreamWaitEvent"

Edge = tuple[int, int, str]


def stream_predecessors(items: pd.DataFrame) -> np.ndarray:
    """Index of the previous item on the same ordered stream, -1 for the first (or unordered)."""
    same = (items["rank"].to_numpy()[1:] == items["rank"].to_numpy()[:-1]) & \
           (items["stream"].to_numpy()[1:] == items["stream"].to_numpy()[:-1])
    pred = np.full(len(items), -1, dtype=np.int64)
    pred[1:] = np.where(same, np.arange(len(items) - 1), -1)
    ordered = items["ordered"].to_numpy(bool)
    pred[~ordered] = -1
    return pred


def launch_edges(items: pd.DataFrame) -> list[Edge]:
    """GPU item -> the start of its launch call (same rank and correlation id)."""
    calls = items[items["source"] == "cpu_call"]
    by_corr = {(int(r), int(c)): int(i) for i, r, c in zip(calls.index, calls["rank"], calls["correlation"], strict=True) if c >= 0}
    gpu = items[items["source"].isin(GPU_SOURCES)]
    out = []
    for i, r, c in zip(gpu.index, gpu["rank"], gpu["correlation"], strict=True):
        j = by_corr.get((int(r), int(c)))
        if j is not None:
            out.append((int(i), j, "start"))
    return out


def gloo_call_edges(items: pd.DataFrame) -> list[Edge]:
    """gloo transfer -> the start of its call (same rank and collective key)."""
    calls = items[(items["source"] == "gloo_call")]
    key: dict[tuple[int, str], int] = {}
    for i, r, g in zip(calls.index, calls["rank"], calls["key"], strict=True):
        key.setdefault((int(r), str(g)), int(i))
    work = items[items["source"] == "gloo_work"]
    out = []
    for i, r, g in zip(work.index, work["rank"], work["group"], strict=True):
        j = key.get((int(r), str(g)))
        if j is not None and g:
            out.append((int(i), j, "start"))
    return out


def blocking_copy_edges(items: pd.DataFrame) -> list[Edge]:
    """A blocking copy call -> its own device copy."""
    waits = items[items["wait"] & (items["source"] == "cpu_call") & (items["correlation"] >= 0)]
    gpu = items[items["source"].isin(GPU_SOURCES) & (items["correlation"] >= 0)]
    dev = {(int(r), int(c)): int(i) for i, r, c in zip(gpu.index, gpu["rank"], gpu["correlation"], strict=True)}
    return [(int(i), dev[(int(r), int(c))], "end") for i, r, c in
            zip(waits.index, waits["rank"], waits["correlation"], strict=True) if (int(r), int(c)) in dev]


def _gpu_by_launch(items: pd.DataFrame, rank: int) -> pd.DataFrame:
    gpu = items[(items["rank"] == rank) & items["source"].isin(GPU_SOURCES) & items["launch_s"].notna()]
    return gpu.sort_values("launch_s", kind="stable")


def stream_wait_edges(items: pd.DataFrame) -> list[Edge]:
    """``cudaStreamWaitEvent``: next launch of the thread after it -> last launch on another stream."""
    out: list[Edge] = []
    waits = items[(items["source"] == "cpu_call") & (items["name"] == STREAM_WAIT_CALL)]
    for rank, part in waits.groupby("rank"):
        gpu = _gpu_by_launch(items, int(rank))
        launch, tid, stream = gpu["launch_s"].to_numpy(), gpu["launch_tid"].to_numpy(), gpu["stream"].to_numpy()
        idx = gpu.index.to_numpy()
        for t, thread in zip(part["start_s"], part["stream"], strict=True):
            k = int(np.searchsorted(launch, t))
            own = [j for j in range(k, min(k + 64, len(idx))) if f"cpu:{tid[j]}" == thread]
            if not own:
                continue
            nxt = own[0]
            prev = [j for j in range(k - 1, max(k - 256, -1), -1) if stream[j] != stream[nxt]]
            if prev:
                out.append((int(idx[nxt]), int(idx[prev[0]]), "end"))
    return out


def _latest_other(ends: np.ndarray, keys: np.ndarray, idx: np.ndarray, lo: float, hi: float,
                  key: object) -> int:
    """Index of the latest end in [lo, hi] whose key differs from ``key``, -1 if none."""
    k = int(np.searchsorted(ends, hi, side="right")) - 1
    while k >= 0 and ends[k] >= lo:
        if keys[k] != key:
            return int(idx[k])
        k -= 1
    return -1


def _sorted_ends(part: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    part = part.sort_values("end_s", kind="stable")
    return part["end_s"].to_numpy(), part["stream"].to_numpy(), part.index.to_numpy()


def gpu_wait_edges(items: pd.DataFrame, pred: np.ndarray, launch: dict[int, int]) -> list[Edge]:
    """A kernel that started late waited for the latest other-stream kernel ending in between."""
    out: list[Edge] = []
    start, end = items["start_s"].to_numpy(), items["end_s"].to_numpy()
    for _rank, gpu in items[items["source"].isin(GPU_SOURCES)].groupby("rank"):
        ends, keys, idx = _sorted_ends(gpu)
        for i, stream in zip(gpu.index, gpu["stream"], strict=True):
            ready = max(end[pred[i]] if pred[i] >= 0 else 0.0, start[launch[i]] if i in launch else 0.0)
            if start[i] - ready > GPU_WAIT_MIN_S:
                j = _latest_other(ends, keys, idx, ready, start[i], stream)
                if j >= 0:
                    out.append((int(i), j, "end"))
    return out


def sync_edges(items: pd.DataFrame) -> list[Edge]:
    """A synchronising call -> the device work it waited for."""
    out: list[Edge] = []
    waits = items[items["wait"] & (items["source"] == "cpu_call")]
    for rank, part in waits.groupby("rank"):
        gpu = _gpu_by_launch(items, int(rank))
        launch, ends = gpu["launch_s"].to_numpy(), gpu["end_s"].to_numpy()
        tids = np.asarray([f"cpu:{t}" for t in gpu["launch_tid"]], dtype=object)
        idx = gpu.index.to_numpy()
        for i, s, e, thread in zip(part.index, part["start_s"], part["end_s"], part["stream"], strict=True):
            before = slice(0, int(np.searchsorted(launch, s)))
            cand = np.flatnonzero((ends[before] >= s) & (ends[before] <= e))
            if cand.size == 0:
                cand = np.flatnonzero((tids[before] == thread) & (ends[before] <= e))
            if cand.size:
                out.append((int(i), int(idx[before][cand[np.argmax(ends[before][cand])]]), "end"))
    return out


def cpu_wake_edges(items: pd.DataFrame, pred: np.ndarray) -> list[Edge]:
    """GPU runs: a CPU thread resuming after a gap -> another thread's item that just ended."""
    out: list[Edge] = []
    start, end = items["start_s"].to_numpy(), items["end_s"].to_numpy()
    cpu = items[items["stream"].str.startswith("cpu:")]
    for _rank, part in cpu.groupby("rank"):
        ends, keys, idx = _sorted_ends(part)
        for i, stream in zip(part.index, part["stream"], strict=True):
            p = end[pred[i]] if pred[i] >= 0 else 0.0
            if start[i] - p >= CPU_WAKE_MIN_GAP_S:
                j = _latest_other(ends, keys, idx, max(p, start[i] - CPU_WAKE_WINDOW_S), start[i], stream)
                if j >= 0:
                    out.append((int(i), j, "end"))
    return out


def gloo_wait_edges(items: pd.DataFrame, pred: np.ndarray, m: Matching) -> list[Edge]:
    """gloo runs: the issuing thread's item that waited for a transfer (see module docstring)."""
    out: list[Edge] = []
    p2p_recv = {r for _s, r in m.p2p}
    threads = _thread_index(items)
    end = items["end_s"].to_numpy()
    work = items[items["source"] == "gloo_work"]
    for i, rank, tid, x_end, kind in zip(work.index, work["rank"], work["launch_tid"], work["end_s"], work["kind"], strict=True):
        entry = threads.get((int(rank), f"cpu:{tid}"))
        if entry is None:
            continue
        starts, idx, waits = entry
        k = int(np.searchsorted(starts, x_end, side="left"))
        inside = k - 1 >= 0 and waits[k - 1] and end[idx[k - 1]] >= x_end
        if inside:
            out.append((int(idx[k - 1]), int(i), "end"))
            continue
        if k >= len(idx):
            continue
        nxt = int(idx[k])
        idle = pred[nxt] < 0 or end[pred[nxt]] <= x_end
        exact = i in p2p_recv or kind in P2P_KINDS
        if idle and (exact or starts[k] - x_end <= GLOO_WAKE_WINDOW_S):
            out.append((nxt, int(i), "end"))
    return out


def _thread_index(items: pd.DataFrame) -> dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(rank, stream) of CPU threads -> (starts, item ids, is-wait), in stream order."""
    out: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    cpu = items[items["stream"].str.startswith("cpu:")]
    for (rank, stream), part in cpu.groupby(["rank", "stream"]):
        out[(int(rank), str(stream))] = (part["start_s"].to_numpy(), part.index.to_numpy(),
                                        part["wait"].to_numpy(bool))
    return out


def infer_edges(items: pd.DataFrame, m: Matching, gpu_run: bool,
                extra: dict[str, list[Edge]] | None = None) -> tuple[list[Edge], dict[str, int]]:
    """Every dependency edge of the items (plus ``extra`` rules' edges), and how many each rule found."""
    pred = stream_predecessors(items)
    rules: dict[str, list[Edge]] = dict(extra or {})
    if gpu_run:
        rules["launch"] = launch_edges(items)
        launch = {i: j for i, j, _ in rules["launch"]}
        rules["blocking_copy"] = blocking_copy_edges(items)
        rules["stream_wait_event"] = stream_wait_edges(items)
        rules["gpu_late_start"] = gpu_wait_edges(items, pred, launch)
        rules["sync"] = sync_edges(items)
        rules["cpu_wake"] = cpu_wake_edges(items, pred)
    else:
        rules["gloo_call"] = gloo_call_edges(items)
        rules["gloo_wait"] = gloo_wait_edges(items, pred, m)
    edges: dict[tuple[int, int], str] = {}
    for rule_edges in rules.values():
        for i, j, anchor in rule_edges:
            if i != j:
                edges.setdefault((i, j), anchor)
    counts = {k: len(v) for k, v in rules.items()}
    return [(i, j, a) for (i, j), a in edges.items()], counts


def edges_by_item(edges: list[Edge], n: int) -> list[list[tuple[int, str]]]:
    """Per item, its (dependency, anchor) list."""
    out: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    grouped: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for i, j, a in edges:
        grouped[i].append((j, a))
    for i, lst in grouped.items():
        out[i] = lst
    return out
