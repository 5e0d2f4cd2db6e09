"""Time only the plans that can matter to the top of each design: evaluate in order of a
step-time lower bound, and stop where the bound passes the ``keep``-th fastest step timed.

Within one (design, GPU count) every plan costs the same per second (GPU count x price), so its
cost to train is its time times one constant: a plan slower than that group's ``keep``-th
fastest is not among its ``keep`` best by time, nor by cost, nor on the time-vs-cost Pareto
front (the group's fastest plan is faster *and* cheaper). A plan's step takes at least its
lower bound (:mod:`sim.explore.bound`), so once ``keep`` plans of a group have been timed, a plan
whose bound is above the ``keep``-th fastest of them (by more than the rows' rounding,
:data:`MARGIN`) is not timed: it would not change the best plans, the Pareto front, or the
fastest and cheapest plan per design.

Plans are timed in waves, each group's candidates in order of their bound (smallest first,
then plan id): the first wave ``keep`` per group, then ``width`` plans spread over the groups
(the backend's parallelism: 1 in this process, one per worker), each wave after dropping what
the waves so far exclude. ``tests/sim/test_explore_bound.py``
checks that a sweep pruned this way ranks exactly as the full one.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from schedules.model import ModelSpec
from sim.explore.enumerate import Candidate
from sim.explore.evaluate import Evaluator
from sim.explore.rank import fitting
from topo import ClusterSpec

MARGIN = 1e-6  # relative: rows are rounded to 9 significant digits; a bound must clear the threshold by more
Member = tuple[Candidate, ClusterSpec]
Rows = list[dict[str, Any]]


def group_key(design: str, gpus: int) -> str:
    """The ``design/gpus`` key of a (design, GPU count), as the sweep's pruning counts name it."""
    return f"{design}/{gpus}"


def threshold_s(times: Sequence[float], keep: int) -> float:
    """The ``keep``-th smallest step time (seconds), inflated by :data:`MARGIN`; inf with fewer."""
    if len(times) < keep:
        return float("inf")
    return sorted(times)[keep - 1] * (1 + MARGIN)


def bound_prune(model: ModelSpec, todo: Sequence[Member], rows: Sequence[dict[str, Any]], keep: int,
                evaluate: Callable[[list[Member]], Rows], width: int = 1,
                bounder: Evaluator | None = None) -> Counter[str]:
    """Evaluate (with ``evaluate``, which times a wave and returns its rows) what of ``todo`` can
    be among the ``keep`` fastest plans of its (design, GPU count), given the ``rows`` already
    timed; returns how many plans of each group were not timed. ``bounder``: the evaluator whose
    caches the bounds use (the one timing plans in this process, if any)."""
    if keep < 1:
        raise ValueError(f"keep={keep} is invalid: expected an integer >= 1")
    bounder = bounder or Evaluator()
    pending: dict[str, list[tuple[float, str, Member]]] = {}
    for c, cluster in todo:
        pending.setdefault(group_key(c.design, c.gpus), []).append(
            (bounder.bound(model, c, cluster), c.plan_id, (c, cluster)))
    queues = {k: deque(sorted(v, key=lambda e: (e[0], e[1]))) for k, v in pending.items()}
    times: dict[str, list[float]] = {k: [] for k in queues}
    for r in fitting(rows):
        times.setdefault(group_key(r["design"], r["gpus"]), []).append(r["step_time_s"])
    skipped: Counter[str] = Counter()
    first = True
    while True:
        wave: list[Member] = []
        per_group = keep if first else -(-max(1, width) // max(1, sum(1 for q in queues.values() if q)))
        first = False
        for key, queue in queues.items():
            limit = threshold_s(times[key], keep)
            room = per_group
            while queue and room and queue[0][0] <= limit:
                wave.append(queue.popleft()[2])
                room -= 1
            if queue and queue[0][0] > limit:  # the bound only grows along the queue; the limit only falls
                skipped[key] += len(queue)
                queue.clear()
        if not wave:
            return skipped
        for r in fitting(evaluate(wave)):
            times[group_key(r["design"], r["gpus"])].append(r["step_time_s"])
