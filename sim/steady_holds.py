"""Tasks that end with a later wait, not with their own work, in the steady state's checks and copies.

An asynchronous send that the program waits for only at the end of the step is held open until
the task it holds on ends (``TaskGraph.holds``): torch.distributed.pipelining's runtime schedules
(interleaved 1F1B, zero-bubble, ZB-V, DualPipeV) wait every send there, GPipe its backward sends
(:mod:`schedules.passes.p2p_torch`); the task held on is the rank's last compute of the step.
Such a send starts with its micro-batch but ends with that last compute, so in a shorter step
its end does not move with its micro-batch, and no period would show. :mod:`sim.steady_state`
therefore reads such a task's start where its checks compare ends (its own work, the transfer,
is compared through the receive it meets), and an extension moves its end with the task it
holds on: behind every inserted copy.

A hold counts as late when the task's end is the held-on task's (within the period check's
tolerance) and that task belongs to no micro-batch or to the last 2 pp of the shorter step (the
cool-down of every schedule family); an extension then also checks that every such task lies
after the repeated window (:func:`holds_after`), so that it moves by every inserted copy.
"""

from __future__ import annotations

import numpy as np

from core.taskgraph import TaskGraph


def late_holds(graph: TaskGraph, end: np.ndarray, simulated: int, pp: int, tol: float) -> np.ndarray:
    """Per task of a step of ``simulated`` micro-batches: the task its end waits for when that
    is a late hold (module doc), else -1 (``end`` in seconds, ``tol`` the period check's)."""
    target = np.full(len(graph.tasks), -1, np.int64)
    if not graph.holds:
        return target
    held = np.fromiter(graph.holds.keys(), np.int64, len(graph.holds))
    last = np.fromiter((h[0] if len(h) == 1 else max(h, key=end.__getitem__) for h in graph.holds.values()),
                       np.int64, held.size)
    tasks = graph.tasks
    microbatch = np.fromiter((tasks[j].microbatch for j in last.tolist()), np.int64, last.size)
    late = (end[held] - end[last] <= tol) & ((microbatch < 0) | (microbatch >= simulated - 2 * pp))
    target[held[late]] = last[late]
    return target


def period_ends(start: np.ndarray, end: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The ends the period checks compare: a late-held task's start stands for its end."""
    return np.where(target >= 0, start, end)


def holds_after(target: np.ndarray, after: np.ndarray) -> bool:
    """Does every late hold wait for a task that moves behind the inserted copies (``after``:
    per task, is it shifted by all of them)?"""
    return bool(after[target[target >= 0]].all())
