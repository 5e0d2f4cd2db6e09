"""An idealized executor for schedule orders: fixed costs per action, free communication.

A test oracle for orders, not the simulator (that is :mod:`sim`'s SimPy engine). Each rank runs
its actions strictly in order; an action starts when its rank is free and its dependencies have
finished:

- ``F(s, mb)`` after ``F(s-1, mb)``;
- ``B(s, mb)`` after ``F(s, mb)`` and ``B(s+1, mb)``;
- ``W(s, mb)`` after ``B(s, mb)``.

An order that can never make progress (a dependency cycle across ranks, or an action before its
own rank's prerequisite) raises ``ValueError`` naming the stuck actions: that is the
deadlock check.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from core.errors import invalid
from core.vocab import Phase
from schedules.actions import Action, PipelineSchedule

Number = int | Fraction | float
Key = tuple[int, str, int]


@dataclass(frozen=True, kw_only=True)
class Execution:
    """Start and end times of every action, in the schedule's order, and the makespan.

    Attributes:
        start, end: ``start[r][i]`` / ``end[r][i]`` of rank r's i-th action (cost units).
        busy: per rank, the summed cost of its actions.
        makespan: the end of the last action (all ranks start at 0).
    """

    start: tuple[tuple[Number, ...], ...]
    end: tuple[tuple[Number, ...], ...]
    busy: tuple[Number, ...]
    makespan: Number

    def bubble_fraction(self) -> float:
        """Idle share of the makespan, averaged over ranks: mean_r (makespan - busy_r) / makespan."""
        idle = [(self.makespan - busy) / self.makespan for busy in self.busy]
        return float(sum(idle) / len(idle))


def execute_unit_costs(schedule: PipelineSchedule, f: Number = 1, b: Number = 2,
                       w: Number = 1) -> Execution:
    """Run ``schedule`` with cost ``f`` per F, ``b`` per B and ``w`` per W (any one time unit).

    ``b`` is the cost of a ``B`` action: the whole backward in schedules without ``W``, the
    input-gradient half in split-backward ones. Raises ``ValueError`` on a negative cost or an
    order that deadlocks.
    """
    cost = {"F": f, "B": b, "W": w}
    for field, value in zip(("f", "b", "w"), (f, b, w), strict=True):
        if not value >= 0:
            raise invalid(field, value, "expected a cost >= 0")
    last_stage = schedule.num_stages - 1
    done: dict[Key, Number] = {}
    start: list[list[Number]] = [[] for _ in schedule.orders]
    end: list[list[Number]] = [[] for _ in schedule.orders]
    clock: list[Number] = [0] * schedule.pp
    while _advance(schedule, cost, last_stage, done, clock, start, end):
        pass
    stuck = [str(order[len(end[r])]) for r, order in enumerate(schedule.orders)
             if len(end[r]) < len(order)]
    if stuck:
        raise invalid("schedule", schedule.name, f"deadlocks; next actions waiting: {stuck}")
    return Execution(start=tuple(map(tuple, start)), end=tuple(map(tuple, end)),
                     busy=tuple(sum((cost[a.phase] for a in order), start=0) for order in schedule.orders),
                     makespan=max(clock, default=0))


def _advance(schedule: PipelineSchedule, cost: dict[str, Number], last_stage: int,
             done: dict[Key, Number], clock: list[Number], start: list[list[Number]],
             end: list[list[Number]]) -> bool:
    """Run every action whose dependencies have finished; True if any ran."""
    progressed = False
    for rank, order in enumerate(schedule.orders):
        while len(end[rank]) < len(order):
            action = order[len(end[rank])]
            begin = clock[rank]
            for key in _dependencies(action, last_stage):
                finish = done.get(key)
                if finish is None:
                    break
                begin = max(begin, finish)
            else:
                clock[rank] = begin + cost[action.phase]
                start[rank].append(begin)
                end[rank].append(clock[rank])
                done[action.stage, action.phase, action.microbatch] = clock[rank]
                progressed = True
                continue
            break
    return progressed


def _dependencies(action: Action, last_stage: int) -> tuple[Key, ...]:
    s, mb = action.stage, action.microbatch
    if action.phase == Phase.F:
        return ((s - 1, "F", mb),) if s > 0 else ()
    if action.phase == Phase.B:
        return ((s, "F", mb), (s + 1, "B", mb)) if s < last_stage else ((s, "F", mb),)
    return ((s, "B", mb),)
