"""Dependency levels of a DAG: tasks grouped so that every task's predecessors sit in earlier groups.

A level's tasks can then be timed together with a few numpy calls (:mod:`sim.explore.longest_path`).
"""

from __future__ import annotations

import numpy as np

Level = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(task ids, their predecessors concatenated, offset of each task's run in that array)."""


def topological_levels(preds: list[list[int]]) -> tuple[Level, ...]:
    """Group tasks ``0..n-1`` by longest distance from a source (Kahn's algorithm).

    Every task gets the sentinel predecessor ``n`` (a row of zeros when timing) in addition to
    its own, so no task has an empty predecessor list. Raises ``ValueError`` on a cycle.
    """
    n = len(preds)
    level = _levels(preds)
    order = np.argsort(level, kind="stable")
    counts = np.bincount(level, minlength=int(level.max()) + 1 if n else 0)
    flat: list[int] = []
    starts = np.empty(n + 1, np.int64)
    for pos, i in enumerate(order.tolist()):
        starts[pos] = len(flat)
        flat.extend(preds[i])
        flat.append(n)
    starts[n] = len(flat)
    flat_arr = np.asarray(flat, np.int64)
    out = []
    a = 0
    for c in counts.tolist():
        b = a + c
        out.append((order[a:b], flat_arr[starts[a]:starts[b]], starts[a:b] - starts[a]))
        a = b
    return tuple(out)


def _levels(preds: list[list[int]]) -> np.ndarray:
    """Longest-path depth of every task (sources are 0)."""
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, ps in enumerate(preds):
        indeg[i] = len(ps)
        for p in ps:
            succ[p].append(i)
    level = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        li = level[i] + 1
        for s in succ[i]:
            if level[s] < li:
                level[s] = li
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if done != n:
        raise ValueError(f"task graph has a dependency cycle: {n - done} tasks never become ready")
    return np.asarray(level, np.int64)
