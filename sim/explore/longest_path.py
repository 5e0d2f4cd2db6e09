"""Earliest-start times of a task graph (the engine's schedule without bandwidth sharing), by levels.

The SimPy engine (:mod:`sim.engine`) runs each (rank, lane) stream's ordered tasks in program
order, each once its dependencies are done, and unordered tasks as soon as theirs are. Without
shared channels every task then starts at

    start(i) = max(end(j) for j in deps(i) ∪ {previous ordered task of i's stream}),  end = start + d(i)

which is a longest-path pass over the DAG in topological order. Here the pass runs level by level
(:mod:`sim.explore.levels`) and for many plans at once: ``durations`` has one column per plan.
"""

from __future__ import annotations

import numpy as np

from sim.explore.levels import Level


def earliest_times(levels: tuple[Level, ...], durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times (seconds) of every task for every column of ``durations`` ([tasks, plans])."""
    n, plans = durations.shape
    end = np.zeros((n + 1, plans))  # row n: the "no predecessor" sentinel, time 0
    start = np.zeros((n, plans))
    for ids, flat, offsets in levels:
        s = np.maximum.reduceat(end[flat], offsets, axis=0)
        start[ids] = s
        end[ids] = s + durations[ids]
    return start, end[:n]
