"""One hardware work queue per GPU (``CUDA_DEVICE_MAX_CONNECTIONS=1``): the order in which a rank's
kernels may start.

With one connection the host's launches on every stream of a device go through one queue, so
kernels start in the order the host issued them, across streams: "It enforces the order of kernel
execution on GPU as the kernel queuing order from host" (NVIDIA/Megatron-LM#533); with a data-parallel
collective on its own stream, "kernels on other streams wait for the DP communication to finish"
(alibaba/Megatron-LLaMA#26): a kernel queued behind one that cannot start yet (the next NCCL call on
a communication stream still running the previous one) waits, and so does everything issued after
it. The engines enforce it as: a task cannot start before every task issued earlier on its rank
has started (:func:`issue_pairs` gives each task's predecessor in that order).

The host's order is derived from the graph, without the builders' help:

- the compute lane's program order is the host's order;
- a task on another lane that waits for tasks of its own rank is issued right after the latest of
  them (a gradient bucket's reduce-scatter, launched by the hook of its last gradient);
- one that waits for none of them (a parameter all-gather prefetched for the forward, a posted
  receive) is issued right before the first compute task of its rank that waits for it (else
  before the next compute task in graph order);
- a stream keeps its own order, and a task is issued after everything it waits for on its rank.

Host-lane tasks (the host's own work, not kernels) are not in the queue.
"""

from __future__ import annotations

import numpy as np

from core.taskgraph import TaskGraph
from core.vocab import Lane

_AFTER, _BEFORE = 1, -1  # a task's place relative to the compute task it is anchored to


def issue_pairs(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) task ids: each device task of a rank after the one issued just before it
    on that rank (see the module doc); raises ValueError if a task depends on a later task of its rank."""
    keys = _issue_keys(graph)
    ids = np.array([i for i in sorted(keys, key=keys.__getitem__) if graph.tasks[i].lane != Lane.HOST], np.int64)
    _check_order(graph, ids)
    rank = np.fromiter((graph.tasks[i].rank for i in ids), np.int64, ids.size)
    same = rank[1:] == rank[:-1]
    return ids[:-1][same], ids[1:][same]


def _check_order(graph: TaskGraph, ids: np.ndarray) -> None:
    """Raise RuntimeError if the order puts a task before a same-rank task it waits for."""
    position = np.full(len(graph), -1, np.int64)
    position[ids] = np.arange(ids.size)
    for i, ds in enumerate(graph.deps):
        for d in ds:
            if position[i] >= 0 and position[d] > position[i] and graph.tasks[d].rank == graph.tasks[i].rank:
                raise RuntimeError(f"the derived issue order puts task {i} before task {d} it waits for")


def _issue_keys(graph: TaskGraph) -> dict[int, tuple[int, int, int, int]]:
    """Per device task its (rank, compute index, place, id) sort key: the rank's compute tasks in
    program order, each other task just before or after its anchor, ties in graph order."""
    tasks, deps = graph.tasks, graph.deps
    index = _compute_index(graph)
    first_user = _first_compute_user(graph, index)
    next_compute = _next_compute(graph, index)
    last_stream: dict[tuple[int, str], tuple[int, int, int, int]] = {}
    keys: dict[int, tuple[int, int, int, int]] = {}
    for i, t in enumerate(tasks):
        if any(d >= i and tasks[d].rank == t.rank for d in deps[i]):
            raise ValueError(f"task {i} depends on a later task of its rank: no host issue order")
        if i in index:
            key = (t.rank, index[i], 0, i)
        else:
            user = first_user.get(i)
            key = _placed(i, t.rank, [keys[d] for d in deps[i] if tasks[d].rank == t.rank],
                          index[user] if user is not None else next_compute[i])
        stream = (t.rank, t.stream or t.lane)
        if t.ordered and stream in last_stream:
            key = max(key, (*last_stream[stream][:3], i))
        if t.ordered:
            last_stream[stream] = key
        keys[i] = key
    return keys


def _placed(i: int, rank: int, dep_keys: list[tuple[int, int, int, int]], before: int) -> tuple[int, int, int, int]:
    """The key of non-compute task ``i``: right after its latest same-rank dependency, else right
    before compute task number ``before`` of its rank (its first compute user, or the next one)."""
    if dep_keys:
        latest = max(dep_keys)
        return (rank, latest[1], latest[2] or _AFTER, i)
    return (rank, before, _BEFORE, i)


def _next_compute(graph: TaskGraph, index: dict[int, int]) -> list[int]:
    """Per task, the position of the next compute task of its rank in graph order (past the last: the count)."""
    upcoming: dict[int, int] = {}
    out = [0] * len(graph)
    for i in range(len(graph) - 1, -1, -1):
        rank = graph.tasks[i].rank
        if i in index:
            upcoming[rank] = index[i]
        out[i] = upcoming.get(rank, 1 << 40)
    return out


def _compute_index(graph: TaskGraph) -> dict[int, int]:
    """Task id -> its position in its rank's compute lane (program order)."""
    count: dict[int, int] = {}
    out = {}
    for i, t in enumerate(graph.tasks):
        if t.lane == Lane.COMPUTE:
            out[i] = count.get(t.rank, 0)
            count[t.rank] = out[i] + 1
    return out


def _first_compute_user(graph: TaskGraph, index: dict[int, int]) -> dict[int, int]:
    """Task id -> the first compute task of its rank (in program order) that waits for it."""
    out: dict[int, int] = {}
    for i, ds in enumerate(graph.deps):
        if i not in index:
            continue
        for d in ds:
            if graph.tasks[d].rank == graph.tasks[i].rank and d not in out:
                out[d] = i
    return out
