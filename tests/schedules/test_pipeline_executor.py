"""The idealized executor: dependency semantics, deadlock detection, and the closed-form bubbles.

Closed forms (unit costs F=1, B=2 per chunk, free communication; bubble = idle share of the
makespan averaged over ranks):

- GPipe and 1F1B: makespan 3(m+p-1), bubble (p-1)/(m+p-1) (Huang et al. 2019; Narayanan et al.
  2021 eq. 1 as a share of the step).
- Interleaved 1F1B with v chunks and m >= p: makespan 3(vm+p-1), bubble (p-1)/(vm+p-1) (Narayanan
  et al. 2021 sec. 2.2: the bubble shrinks by v). With m < p (rounds smaller than the pipeline)
  each chunk boundary waits for micro-batch 0 to cross all p ranks, so the step is a plain
  pipeline over v*p stages: makespan 3(vp+m-1).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from schedules.actions import Action, PipelineSchedule
from schedules.pipeline import build_schedule, execute_unit_costs
from schedules.pipeline.executor import Execution


def _check_dependencies_and_eagerness(schedule: PipelineSchedule, run: Execution,
                                      cost: dict[str, int]) -> None:
    """Independent re-check: order per rank, dependencies, and 'start as soon as possible'."""
    ends = {(a.stage, a.phase, a.microbatch): run.end[r][i]
            for r, order in enumerate(schedule.orders) for i, a in enumerate(order)}
    last = schedule.num_stages - 1
    for r, order in enumerate(schedule.orders):
        for i, a in enumerate(order):
            deps = {"F": [(a.stage - 1, "F")] if a.stage else [],
                    "B": [(a.stage, "F")] + ([(a.stage + 1, "B")] if a.stage < last else []),
                    "W": [(a.stage, "B")]}[a.phase]
            ready = max([run.end[r][i - 1] if i else 0] + [ends[s, p, a.microbatch] for s, p in deps])
            assert run.start[r][i] == ready, (r, str(a))
            assert run.end[r][i] == run.start[r][i] + cost[a.phase]


@pytest.mark.parametrize("name, vpp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 3),
                                       ("zb-h1", 1), ("interleaved-zb", 2), ("zbv", 2),
                                       ("dualpipev", 2)])
def test_executor_respects_dependencies_and_starts_eagerly(name: str, vpp: int) -> None:
    for pp, m in [(1, 3), (3, 6), (4, 8), (5, 11)]:
        if name.startswith("interleaved") and m % max(1, m // pp):
            continue
        schedule = build_schedule(name, pp, m, vpp)
        cost = {"F": 1, "B": 3, "W": 2}
        run = execute_unit_costs(schedule, f=1, b=3, w=2)
        _check_dependencies_and_eagerness(schedule, run, cost)
        assert run.makespan == max(max(e) for e in run.end)
        assert run.busy == tuple(sum(cost[a.phase] for a in o) for o in schedule.orders)


def test_executor_reports_a_deadlock() -> None:
    # Rank 1 wants B0 (which needs its own F0) before running F0.
    orders = ((Action(0, "F", 0), Action(0, "B", 0)), (Action(1, "B", 0), Action(1, "F", 0)))
    schedule = PipelineSchedule(name="stuck", pp=2, microbatches=1, vpp=1, orders=orders)
    with pytest.raises(ValueError, match=r"schedule='stuck' is invalid: deadlocks.*1B0"):
        execute_unit_costs(schedule)


def test_executor_reports_a_cross_rank_cycle() -> None:
    f0, b0, f1, b1 = (Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1))
    g0, c0, g1, c1 = (Action(1, "F", 0), Action(1, "B", 0), Action(1, "F", 1), Action(1, "B", 1))
    fine = ((f0, f1, b0, b1), (g0, c0, g1, c1))
    assert execute_unit_costs(PipelineSchedule(name="ok", pp=2, microbatches=2, vpp=1,
                                               orders=fine)).makespan == 9
    # Rank 0 waits for B(0,0) <- B(1,0) before F(0,1); rank 1 wants F(1,1) <- F(0,1) before B(1,0).
    cycle = ((f0, b0, f1, b1), (g0, g1, c0, c1))
    with pytest.raises(ValueError, match=r"deadlocks.*\['0B0', '1F1'\]"):
        execute_unit_costs(PipelineSchedule(name="cycle", pp=2, microbatches=2, vpp=1,
                                            orders=cycle))


def test_fractional_costs_are_exact() -> None:
    run = execute_unit_costs(build_schedule("1f1b", 4, 8), f=Fraction(1, 3), b=Fraction(2, 3))
    assert run.makespan == Fraction(8 + 4 - 1)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_closed_form(name: str) -> None:
    for pp in range(1, 17):
        for m in [*range(1, 10), 15, 16, 17, 31, 32, 33, 48, 63, 64]:
            run = execute_unit_costs(build_schedule(name, pp, m), f=1, b=2)
            assert run.makespan == 3 * (m + pp - 1), (pp, m)
            assert run.bubble_fraction() == pytest.approx((pp - 1) / (m + pp - 1), abs=1e-12)


@pytest.mark.slow
def test_interleaved_bubble_closed_form_when_m_is_a_multiple_of_p() -> None:
    for vpp in (2, 3, 4):
        for pp in range(1, 17):
            for m in sorted({k * pp for k in (1, 2, 3, 5, 64 // pp) if k * pp <= 64}):
                run = execute_unit_costs(build_schedule("interleaved", pp, m, vpp), f=1, b=2)
                assert run.makespan == 3 * (vpp * m + pp - 1), (pp, m, vpp)
                expected = (pp - 1) / (vpp * m + pp - 1)
                assert run.bubble_fraction() == pytest.approx(expected, abs=1e-12)


def test_interleaved_bubble_for_torch_relaxed_microbatch_counts() -> None:
    """torch's rounds of g = m // max(1, m // p) micro-batches: same closed form for m > p;
    m < p degenerates to a plain pipeline over v*p stages."""
    for vpp in (2, 4):
        for pp in range(2, 11):
            for m in range(1, 31):
                if m % pp == 0 or m % max(1, m // pp):
                    continue
                run = execute_unit_costs(build_schedule("interleaved", pp, m, vpp), f=1, b=2)
                expected = 3 * (vpp * m + pp - 1) if m > pp else 3 * (vpp * pp + m - 1)
                assert run.makespan == expected, (pp, m, vpp)


def test_interleaving_beats_1f1b_on_the_same_work() -> None:
    for pp, m in [(4, 8), (8, 16), (16, 64)]:
        plain = execute_unit_costs(build_schedule("1f1b", pp, m), f=2, b=4)   # a whole stage
        chunked = execute_unit_costs(build_schedule("interleaved", pp, m, 2), f=1, b=2)
        assert chunked.makespan < plain.makespan
        assert chunked.busy == plain.busy


def test_negative_cost_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^w=-1 is invalid: expected a cost >= 0$"):
        execute_unit_costs(build_schedule("zb-h1", 2, 2), f=1, b=1, w=-1)
