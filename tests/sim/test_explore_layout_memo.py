"""Explore's task-layout memo (:meth:`sim.explore.pricing.SharedPriceCoster.layout`): the
layout TaskCoster computes, kept across plans by the task's ops, rank, peer and lane, bounded."""

from __future__ import annotations

import dataclasses

import sim.explore.pricing as explore_pricing
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from sim.explore.pricing import plan_prices
from sim.job import Job
from sim.pricing import TaskCoster
from sim.simulate import build_priced
from topo import get_cluster


def _job() -> Job:
    plan = ParallelPlan(tp=2, pp=2, dp=2, global_batch=16)
    return Job(model=get_model("small"), cluster=get_cluster("dgx-h100"), plan=plan)


def test_memoised_layout_is_taskcosters_and_reused() -> None:
    job = _job()
    coster = plan_prices(job.model, job.plan, False, job.cluster).context.coster
    tasks = [t for t in build_priced(job).graph.tasks if len(t.ops) > 1][:20]
    assert tasks
    for task in tasks:
        first = coster.layout(task)
        assert first == TaskCoster.layout(coster, task)  # the unmemoised price
        assert coster.layout(dataclasses.replace(task)) is first  # equal ops, rank, peer, lane: kept
    other_rank = dataclasses.replace(tasks[0], rank=tasks[0].rank + 1)
    assert coster.layout(other_rank) == TaskCoster.layout(coster, other_rank)


def test_memo_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(explore_pricing, "COST_MEMO_ENTRIES", 3)
    job = _job()
    coster = plan_prices(job.model, job.plan, False, job.cluster).context.coster
    tasks = [t for t in build_priced(job).graph.tasks if len(t.ops) > 1]
    distinct = list({(t.ops, t.rank, t.peer, t.lane): t for t in tasks}.values())[:7]
    for task in distinct:
        coster.layout(task)
        assert len(coster._layouts) <= 3
