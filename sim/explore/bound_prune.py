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
the waves so far exclude. A wide wave times some plans one plan at a time would skip; only the
plans one plan at a time times are reported, so every backend writes the same rows.
``tests/sim/test_explore_bound.py`` checks that a sweep pruned this way ranks exactly as the full one.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Pruned:
    """What :func:`bound_prune` kept: the ids of the plans whose rows a sweep reports (the same
    set whichever backend timed them, :func:`_kept`) and, per (design, GPU count), how many
    plans are not reported."""

    kept: frozenset[str]
    skipped: Counter[str]


Queue = list[tuple[float, str, Member]]


def bound_prune(model: ModelSpec, members: Sequence[Member], rows: Sequence[dict[str, Any]], keep: int,
                evaluate: Callable[[list[Member]], Rows], width: int = 1,
                bounder: Evaluator | None = None) -> Pruned:
    """Time (with ``evaluate``, which times a wave and returns its rows) what of ``members`` can be
    among the ``keep`` fastest plans of its (design, GPU count), given the ``rows`` already timed
    (a resumed sweep's); return the plans to report. ``bounder``: the evaluator whose caches the
    bounds use (the one timing plans in this process, if any).

    Waves of ``width`` plans time a few plans a narrower backend would have skipped; the plans
    reported are those one plan at a time would time (:func:`_kept`), so ``results.csv`` is the
    same on every backend (a plan that walk needs and no wave timed is timed at the end)."""
    if keep < 1:
        raise ValueError(f"keep={keep} is invalid: expected an integer >= 1")
    bounder = bounder or Evaluator()
    queues: dict[str, Queue] = {}
    for c, cluster in members:
        queues.setdefault(group_key(c.design, c.gpus), []).append(
            (bounder.bound(model, c, cluster), c.plan_id, (c, cluster)))
    for queue in queues.values():
        queue.sort(key=lambda e: (e[0], e[1]))
    timed = {r["id"]: r for r in rows}
    _waves(queues, timed, keep, evaluate, width)
    while True:  # the plans one plan at a time would time; any not timed yet is timed now
        walks = {key: _kept(queue, timed, keep) for key, queue in queues.items()}
        missing = [member for _, member in walks.values() if member is not None]
        if not missing:
            break
        timed.update((r["id"], r) for r in evaluate(missing))
    kept = {key: ids for key, (ids, _) in walks.items()}
    return Pruned(kept=frozenset(i for ids in kept.values() for i in ids),
                  skipped=Counter({key: len(queues[key]) - len(ids) for key, ids in kept.items()}))


def _waves(queues: dict[str, Queue], timed: dict[str, dict[str, Any]], keep: int,
           evaluate: Callable[[list[Member]], Rows], width: int) -> None:
    """Time the plans of ``queues`` not in ``timed`` in waves: first ``keep`` per group, then
    ``width`` spread over the groups, each group in bound order while its bound is below the
    ``keep``-th fastest step timed in it so far (new rows are added to ``timed``)."""
    pending = {k: deque(e for e in q if e[1] not in timed) for k, q in queues.items()}
    times: dict[str, list[float]] = {k: [] for k in queues}
    for r in fitting(timed.values()):
        times.setdefault(group_key(r["design"], r["gpus"]), []).append(r["step_time_s"])
    first = True
    while True:
        wave: list[Member] = []
        per_group = keep if first else -(-max(1, width) // max(1, sum(1 for q in pending.values() if q)))
        first = False
        for key, queue in pending.items():
            limit = threshold_s(times[key], keep)
            room = per_group
            while queue and room and queue[0][0] <= limit:
                wave.append(queue.popleft()[2])
                room -= 1
            if queue and queue[0][0] > limit:  # the bound only grows along the queue; the limit only falls
                queue.clear()
        if not wave:
            return
        for r in evaluate(wave):
            timed[r["id"]] = r
            if fitting([r]):
                times[group_key(r["design"], r["gpus"])].append(r["step_time_s"])


def _kept(queue: Queue, timed: dict[str, dict[str, Any]], keep: int) -> tuple[list[str], Member | None]:
    """The plans of one group that timing one plan at a time, in bound order, times: each while
    its bound is at most the ``keep``-th fastest step of those before it (inf with fewer);
    and the first such plan not in ``timed`` (None: every one is)."""
    ids: list[str] = []
    times: list[float] = []
    for bound, plan_id, member in queue:
        if bound > threshold_s(times, keep):
            break
        row = timed.get(plan_id)
        if row is None:
            return ids, member
        ids.append(plan_id)
        if fitting([row]):
            times.append(row["step_time_s"])
    return ids, None
