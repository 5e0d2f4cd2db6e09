"""Steady state per group of ranks (``sim.steady_groups``): a ``--full`` step whose data-parallel
replicas repeat at different periods extends from a shorter one and equals ``--exact`` (times to
1e-9 of the step, the same spans)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from sim.job import resolve_job
from sim.simulate import build_priced, make_placement, simulate, task_coster, timed
from sim.steady_groups import find_group_extension, rank_groups
from sim.steady_state import NoPeriod, find_extension, rates_differ
from tests.sim.test_steady_state import assert_same_step

# 6 replicas of 4 stages, one GPU a node, on 24 nodes of a SuperPOD (leaves of 20 nodes): the
# pipelines of replicas 2-5 cross from leaf 0 to leaf 1 between their last two stages, 0-1 do not
REPLICAS: dict[str, Any] = {"model": "gpt3-1.7b", "cluster": "dgx-a100", "nodes": 24, "gpus_per_node": 1, "tp": 1,
                            "pp": 4, "dp": 6, "microbatch_size": 1, "global_batch": 6 * 32, "full": True,
                            "sequence_parallel": True}
CASES: list[dict[str, Any]] = [
    {},
    {"global_batch": 6 * 64, "schedule": "interleaved", "vpp": 2},
    {"global_batch": 6 * 64, "zero": 1},
    {"global_batch": 6 * 64, "schedule": "zb-h1"},
    {"gpus_per_node": 2, "tp": 2},  # 2 GPUs a node: TP collectives on the node, PP across it
    {"global_batch": 6 * 64, "framework": "torch"},  # sends held until a wait 3 micro-batches later
]
FAST_CASES = 2


def _short_step(case: dict[str, Any], microbatches: int) -> tuple[TaskGraph, np.ndarray, np.ndarray]:
    job = resolve_job(dict(REPLICAS, **case))
    small = dataclasses.replace(job, plan=dataclasses.replace(job.plan, global_batch=microbatches * job.plan.dp))
    priced = build_priced(small, task_coster(small, make_placement(small)))
    return (priced.graph, *timed(small, priced, "list"))


def test_the_replicas_repeat_at_two_periods() -> None:
    """What the groups are for: one period does not show, several do (one per replica)."""
    graph, start, end = _short_step({}, 17)
    assert find_extension(graph, start, end, 17, 32, 4) is None
    assert rates_differ(graph, start, end, 17, 4)
    found = find_group_extension(graph, start, end, 17, 32, 4, gpus_per_node=1)
    assert found is not None and found.period_s.size == 6
    assert len({round(p, 12) for p in found.period_s.tolist()}) == 2  # in-leaf and cross-leaf pipelines
    assert found.extension.period_s == found.period_s.max()


@pytest.mark.parametrize("case", [c if c < FAST_CASES else pytest.param(c, marks=pytest.mark.slow)
                                  for c in range(len(CASES))])
def test_per_group_extension_equals_the_full_simulation(case: int) -> None:
    job = resolve_job(dict(REPLICAS, **CASES[case]))
    fast, full = simulate(job), simulate(dataclasses.replace(job, exact=True))
    assert fast.steady_state is not None, fast.steady_fallback
    assert fast.steady_state.simulated_microbatches < job.plan.num_microbatches
    assert_same_step(fast, full)


def _task(rank: int, mb: int, group: str = "") -> Task:
    op = Op(Lane.COMPUTE, Kind.FWD, "F", OpClass.FIXED, duration_s=1.0)
    return Task(rank, Lane.COMPUTE, Kind.FWD, f"F{mb}", (op,), microbatch=mb, group=group)


def test_ranks_are_grouped_by_what_joins_them_before_the_cool_down() -> None:
    """Ranks 0 and 1 exchange a micro-batch, 2 and 3 share a node, 4 is alone until a collective
    of the last micro-batch joins everyone (not counted: it is timed again)."""
    tasks = [_task(0, 0), _task(1, 0), _task(2, 0), _task(3, 0), _task(4, 0),
             *(_task(r, 3, group="grad") for r in range(5))]
    deps: list[list[int]] = [[], [0], [], [], [], [], [], [], [], []]
    graph = TaskGraph.of(tasks, deps)
    group = rank_groups(graph, gpus_per_node=2, before=3)
    assert group[:5].tolist() == [0, 0, 1, 1, 2]
    assert rank_groups(graph, gpus_per_node=2, before=4)[:5].tolist() == [0, 0, 0, 0, 0]


def test_json_says_how_many_micro_batches_were_simulated() -> None:
    """A step extended per group reports its shorter step in ``simulation.steady_state``."""
    from sim.summary import steady_state_summary

    s = steady_state_summary(simulate(resolve_job(REPLICAS)))
    assert s == {"microbatches": 32, "simulated_microbatches": 17, "period_microbatches": 1, "copies": 15,
                 "fallback": None}


def test_a_fall_back_says_the_groups_were_looked_at_too() -> None:
    found = NoPeriod((17, 36), per_group=True)
    assert found.reason == "no period repeats in the shorter steps tried, nor one per group of ranks (17, 36 micro-batches)"
    assert NoPeriod((17,), rates_differ=True).reason.startswith("no period repeats in the shorter steps tried (17 ")


def _walked_groups(graph: TaskGraph, gpus_per_node: int, before: int) -> list[int]:
    """rank_groups as the task-by-task union-find walk defines it (the reference)."""
    parent: dict[int, int] = {}

    def find(r: int) -> int:
        while parent.setdefault(r, r) != r:
            r = parent[r]
        return r

    def union(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    first_member: dict[str, int] = {}
    for i, t in enumerate(graph.tasks):
        union(t.rank, t.rank // gpus_per_node * gpus_per_node)
        if not 0 <= t.microbatch < before:
            continue
        for d in graph.deps[i]:
            dep = graph.tasks[d]
            if 0 <= dep.microbatch < before and dep.rank != t.rank:
                union(t.rank, dep.rank)
        if t.group:
            union(t.rank, first_member.setdefault(t.group, t.rank))
    codes = {root: n for n, root in enumerate(sorted({find(r) for r in parent}))}
    return [codes[find(t.rank)] for t in graph.tasks]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_rank_groups_are_the_task_by_task_walks(case: int) -> None:
    # the groups and their numbering (by union-find root) come from the pairs' first appearances alone
    graph, _, _ = _short_step(CASES[case], 16)
    for before in (0, 4, 12, 16):
        assert rank_groups(graph, 2, before).tolist() == _walked_groups(graph, 2, before)
    assert max(rank_groups(graph, 1, 12)) >= 1  # the replicas are groups of their own
