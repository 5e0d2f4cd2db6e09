"""The replay model: every item's work, host delay, reaction lag and rendezvous, from the trace.

Each item starts at ``max(end of its stream predecessor + host_s, latest dependency + lag_s)``
and then runs ``dur_s``. The gap before an item is attributed to whichever constraint was met
last in the measured run (the *binding* one): after the stream predecessor it is host time
(Python, launch overhead, anything the trace does not show), after a dependency it is the
reaction lag (wake-up, launch latency). So an unchanged replay starts every item exactly when it
started in the trace, and a what-if moves an item only through the constraints it had.

Kinds of item:
- ``plain``: fixed duration (a kernel, a CPU op, a call);
- ``wait``: a blocking call, or an op with a known wait point inside (FSDP2's waits); it starts
  when its thread reaches it, does ``pre_s`` of work (up to the wait point), and ends ``dur_s``
  after the later of that and its dependencies (the part in between is waiting);
- ``collective``: a member arrives (its measured start), waits at a barrier for the last member,
  then transfers for its own remaining time (``end - last arrival``, the transfer the issue
  asks for: on the last member to arrive, the whole measured duration);
- ``p2p``: an asynchronous gloo send or receive. Each is posted by its call (the item's start);
  the receive completes ``dur_s`` after the later of the two posts, the send ``dur_s`` after its
  own post (gloo buffers sends: a send can complete before its receive is posted). ``dur_s`` is
  the receive's time after both posted, capped by the median of receives of that size whose
  thread sat idle through the transfer (otherwise the measured end also holds the time until the
  receiving thread called ``wait()``); a send's is the same, capped by its measured range;
- ``marker``: a zero-length step boundary on the main thread.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler.replay.deps import edges_by_item, infer_edges, stream_predecessors
from profiler.replay.matching import Matching

EPS_S = 1e-9


@dataclass
class ReplayModel:
    """Items (ordered per stream) and their replay parameters, all arrays indexed by item.

    Times are seconds, relative to ``origin_s`` on the measured Timeline clock (so the replay's
    time 0 is ``origin_s``).
    """

    items: pd.DataFrame
    pred: np.ndarray
    deps: list[list[tuple[int, str]]]
    end_deps: list[list[tuple[int, str]]]
    kind: np.ndarray
    host_s: np.ndarray
    lag_s: np.ndarray
    dur_s: np.ndarray
    pre_s: np.ndarray
    barrier: np.ndarray
    start_anchor: np.ndarray
    origin_s: float
    matching: Matching
    rule_counts: dict[str, int]
    main_tid: dict[int, int]
    world_size: int
    notes: list[str] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)


def _kinds(items: pd.DataFrame, m: Matching) -> tuple[np.ndarray, np.ndarray, list[list[tuple[int, str]]]]:
    """Item kind, barrier key and the dependencies that hold back only the item's end."""
    n = len(items)
    kind = np.where(items["wait"].to_numpy(bool), "wait", "plain").astype(object)
    kind[items["role"].to_numpy() == "marker"] = "marker"
    barrier = np.full(n, "", dtype=object)
    for key, ids in m.collectives.items():
        kind[ids] = "collective"
        barrier[ids] = key
    ordered = items["ordered"].to_numpy(bool)
    end_deps: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    for s, r in m.p2p:
        if ordered[s] and ordered[r]:  # NCCL Send/Recv kernels: a two-member rendezvous
            kind[[s, r]] = "collective"
            barrier[[s, r]] = f"p2p:{s}->{r}"
        else:
            kind[[s, r]] = "p2p"
            end_deps[r].append((s, "start"))
    return kind, barrier, end_deps


def _model_ends(items: pd.DataFrame, kind: np.ndarray, barrier: np.ndarray, m: Matching,
                recv_idle: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """(model end, duration) of every item; see the module docstring for each kind."""
    t, e = items["start_s"].to_numpy(float), items["end_s"].to_numpy(float)
    end, dur = e.copy(), e - t
    last: dict[str, float] = defaultdict(lambda: -np.inf)
    for i in np.flatnonzero(kind == "collective"):
        last[barrier[i]] = max(last[barrier[i]], t[i])
    for i in np.flatnonzero(kind == "collective"):
        dur[i] = max(0.0, e[i] - last[barrier[i]])
        end[i] = last[barrier[i]] + dur[i]
    for (s, r), transfer in _p2p_transfers(items, m, recv_idle).items():
        dur[r], end[r] = transfer, max(t[s], t[r]) + transfer
        dur[s] = min(transfer, e[s] - t[s])
        end[s] = t[s] + dur[s]
    return end, dur


def _p2p_transfers(items: pd.DataFrame, m: Matching, recv_idle: set[int]) -> dict[tuple[int, int], float]:
    t, e = items["start_s"].to_numpy(float), items["end_s"].to_numpy(float)
    ordered = items["ordered"].to_numpy(bool)
    pairs = [(s, r) for s, r in m.p2p if not (ordered[s] and ordered[r])]
    bound = {(s, r): max(0.0, e[r] - max(t[s], t[r])) for s, r in pairs}
    size_key = {(s, r): (str(items.at[r, "pg"]), float(items.at[r, "bytes"])) for s, r in pairs}
    idle: dict[tuple[str, float], list[float]] = defaultdict(list)
    every: dict[tuple[str, float], list[float]] = defaultdict(list)
    for pair in pairs:
        every[size_key[pair]].append(bound[pair])
        if pair[1] in recv_idle:
            idle[size_key[pair]].append(bound[pair])
    typical = {k: float(np.median(idle[k])) if idle[k] else float(min(v)) for k, v in every.items()}
    return {pair: min(bound[pair], typical[size_key[pair]]) for pair in pairs}


def _recv_idle(items: pd.DataFrame, pred: np.ndarray, deps: list[list[tuple[int, str]]],
               m: Matching) -> set[int]:
    """Receives whose waiting thread was idle from both posts to the receive's end."""
    t, e = items["start_s"].to_numpy(float), items["end_s"].to_numpy(float)
    waiter: dict[int, int] = {}
    for i, lst in enumerate(deps):
        for j, _ in lst:
            waiter.setdefault(j, i)
    out = set()
    for s, r in m.p2p:
        k = waiter.get(r)
        if k is not None and pred[k] >= 0 and e[pred[k]] <= max(t[s], t[r]):
            out.add(r)
    return out


def _binding(t: float, p: float, d: float) -> tuple[float, float]:
    """(host_s, lag_s): the gap goes to the constraint met last (stream if tied)."""
    if d > p:
        return 0.0, max(0.0, t - d)
    return max(0.0, t - p), 0.0


def _consistent(deps: list[tuple[int, str]], limit: float, t: np.ndarray, end: np.ndarray,
                kept: list[tuple[int, str]], counts: dict[str, int]) -> float:
    """Keep the dependencies met by ``limit`` (append to ``kept``); their latest time."""
    d = -np.inf
    for j, anchor in deps:
        at = t[j] if anchor == "start" else end[j]
        if at <= limit + EPS_S:
            kept.append((j, anchor))
            d = max(d, at)
        else:
            counts["dropped_deps"] += 1
    return d


def _parameters(items: pd.DataFrame, pred: np.ndarray, deps: list[list[tuple[int, str]]],
                end_deps: list[list[tuple[int, str]]], kind: np.ndarray, end: np.ndarray, dur: np.ndarray,
                pre: np.ndarray) -> tuple[list[list[tuple[int, str]]], list[list[tuple[int, str]]], np.ndarray,
                                          np.ndarray, np.ndarray, dict[str, int]]:
    t, e = items["start_s"].to_numpy(float), items["end_s"].to_numpy(float)
    n = len(items)
    host, lag = np.zeros(n), np.zeros(n)
    kept: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    kept_end: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    counts = {"dropped_deps": 0, "stream_overlaps": 0}
    for i in range(n):
        d = _consistent(deps[i], e[i] if kind[i] == "wait" else t[i], t, end, kept[i], counts)
        _consistent(end_deps[i], end[i], t, end, kept_end[i], counts)
        p = end[pred[i]] if pred[i] >= 0 else 0.0
        counts["stream_overlaps"] += int(p > t[i] + 1e-7)
        if kind[i] == "wait":
            host[i] = max(0.0, t[i] - p)
            dur[i] = max(0.0, e[i] - max(t[i] + pre[i], d))
        else:
            host[i], lag[i] = _binding(t[i], p, d)
    return kept, kept_end, host, lag, dur, counts


def _wait_points(items: pd.DataFrame, kind: np.ndarray, points: list[tuple[int, int, float]]
                 ) -> tuple[dict[str, list[tuple[int, int, str]]], np.ndarray]:
    """Known wait points (item, transfer, time) -> their edges and each waiting item's pre time;
    the items become ``wait`` items."""
    t, e = items["start_s"].to_numpy(float), items["end_s"].to_numpy(float)
    pre = np.zeros(len(items))
    edges = []
    for i, x, at in points:
        if kind[i] not in ("plain", "wait"):
            continue
        kind[i] = "wait"
        pre[i] = max(pre[i], min(max(0.0, at - t[i]), e[i] - t[i]))
        edges.append((i, x, "end"))
    return {"fsdp_wait": edges}, pre


def build_model(items: pd.DataFrame, m: Matching, gpu_run: bool, main_tid: dict[int, int],
                world_size: int, wait_points: list[tuple[int, int, float]] | None = None) -> ReplayModel:
    """The replay model of ordered items (see :func:`profiler.replay.items.order_items`);
    ``wait_points``: (item, transfer it waits for, time of the wait) known from the trace."""
    origin = min(0.0, float(items["start_s"].min())) if len(items) else 0.0
    items = items.assign(start_s=items["start_s"] - origin, end_s=items["end_s"] - origin,
                         launch_s=items["launch_s"] - origin)
    pred = stream_predecessors(items)
    kind, barrier, end_deps = _kinds(items, m)
    extra, pre = _wait_points(items, kind, [(i, x, at - origin) for i, x, at in wait_points or []])
    edges, rule_counts = infer_edges(items, m, gpu_run, extra)
    deps = edges_by_item(edges, len(items))
    end, dur = _model_ends(items, kind, barrier, m, _recv_idle(items, pred, deps, m))
    kept, kept_end, host, lag, dur, counts = _parameters(items, pred, deps, end_deps, kind, end, dur, pre)
    anchors = np.zeros(len(items), dtype=bool)
    for lst in kept + kept_end:
        for j, a in lst:
            anchors[j] |= a == "start"
    notes = []
    if counts["dropped_deps"]:
        notes.append(f"{counts['dropped_deps']} inferred dependencies contradicted the measured order "
                     "(the dependency ended after the item started) and were dropped")
    if counts["stream_overlaps"]:
        notes.append(f"{counts['stream_overlaps']} items overlap their stream predecessor in the trace; "
                     "replay runs them back to back")
    return ReplayModel(items=items, pred=pred, deps=kept, end_deps=kept_end, kind=kind, host_s=host, lag_s=lag,
                       dur_s=dur, pre_s=pre,
                       barrier=barrier, start_anchor=anchors, origin_s=origin, matching=m,
                       rule_counts={**rule_counts, **counts}, main_tid=main_tid,
                       world_size=world_size, notes=notes)
