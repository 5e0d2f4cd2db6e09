"""Time a StepGraph: the engine's schedule without bandwidth sharing, in one pass over the tasks.

The SimPy engine (:mod:`sim.engine`) runs each (rank, lane) stream's ordered tasks in program
order, each once its dependencies are done, and unordered tasks (sends) as soon as theirs are.
Without shared channels every task therefore starts at

    start(i) = max(end(j) for j in deps(i) ∪ {the previous ordered task of i's stream})
    end(i)   = start(i) + duration(i)

Each pipeline rank's tasks are walked in program order (so the previous task of each stream is
known); a rank waits (the walk moves to the next rank) when a task needs a task of another rank
that has not been timed yet. Simulated time never depends on this order.
"""

from __future__ import annotations

from sim.explore.step_graph import SEND, StepGraph


def time_step(g: StepGraph) -> tuple[list[float], list[float]]:
    """Start and end (seconds) of every task of ``g``; raises RuntimeError on a deadlock."""
    n = len(g.price_of)
    dur = [price.duration_s for _, price, _ in g.prices]
    lane = [ln for ln, _, _ in g.prices]
    task_dur = [dur[p] for p in g.price_of]
    task_lane = [lane[p] for p in g.price_of]
    start = [0.0] * n
    end = [-1.0] * n
    cursor = [0] * g.pp
    stream_end = [[0.0, 0.0, 0.0] for _ in range(g.pp)]
    remaining = n
    while remaining:
        progressed = 0
        for r in range(g.pp):
            done = _advance(g.order[r], cursor[r], g.deps, task_dur, task_lane, stream_end[r], start, end)
            progressed += done - cursor[r]
            cursor[r] = done
        if not progressed:
            raise RuntimeError(f"deadlock: {remaining} tasks never became ready")
        remaining -= progressed
    return start, end


def _advance(order: list[int], pos: int, deps: list[tuple[int, ...]], dur: list[float], lane: list[int],
             stream_end: list[float], start: list[float], end: list[float]) -> int:
    """Time one rank's tasks from ``pos`` until one waits on an untimed task; returns the new
    position. ``stream_end[lane]``: end of the rank's last timed ordered task on each lane."""
    for k in range(pos, len(order)):
        i = order[k]
        ln = lane[i]
        t = 0.0 if ln == SEND else stream_end[ln]
        for d in deps[i]:
            e = end[d]
            if e < 0.0:
                return k
            if e > t:
                t = e
        start[i] = t
        end[i] = e = t + dur[i]
        if ln != SEND:
            stream_end[ln] = e
    return len(order)
