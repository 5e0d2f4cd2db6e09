"""Evaluate work units: batches of candidates, grouped so that they share priced ops.

A :class:`WorkUnit` is self-contained (model, clusters, plans; all picklable), so it can run in
this process, a local worker process, or on a Dask/Ray worker on another machine. An
:class:`Evaluator` keeps what is worth reusing between units in one process: collective models
(each builds its cluster's routing once), op prices shared by plans with the same placement on
the same cluster, and schedules. Units group such plans together.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from schedules.actions import PipelineSchedule
from schedules.model import ModelSpec
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.stages import StageInfo, plan_stages
from schedules.work import ModelWork
from sim.explore.bound import PassCache, step_lower_bound_s
from sim.explore.enumerate import Candidate
from sim.explore.fast_eval import evaluate_plan
from sim.explore.pricing import PlanPrices, PriceContext, plan_placement, work_key
from sim.explore.rows import result_row
from sim.explore.template import TemplateCache
from sim.gc_pause import freeze_survivors, gc_paused
from sim.list_passes import prefer_kernel
from topo import ClusterSpec, CollectiveModel

KERNEL_AFTER_PLANS = 8  # plans timed before a sweep loads the list kernel (sim.list_passes: ~0.35 s once)
UNIT_PLANS = 32  # plans per work unit at most (the granularity of progress and of resuming)


@dataclass(frozen=True)
class WorkUnit:
    """Candidates to evaluate, each with its sized and priced cluster."""

    model: ModelSpec
    tokens: float
    members: tuple[tuple[Candidate, ClusterSpec], ...]

    @property
    def ids(self) -> tuple[str, ...]:
        """Plan ids of the members."""
        return tuple(c.plan_id for c, _ in self.members)


def make_units(model: ModelSpec, tokens: float, members: Iterable[tuple[Candidate, ClusterSpec]],
               max_plans: int = UNIT_PLANS) -> list[WorkUnit]:
    """Batches of at most ``max_plans`` candidates, each batch from one (design, placement)."""
    groups: dict[tuple[object, ...], list[tuple[Candidate, ClusterSpec]]] = {}
    for c, cluster in members:
        p = c.plan
        groups.setdefault((c.design, p.tp, p.cp, p.dp, p.pp), []).append((c, cluster))
    return [WorkUnit(model, tokens, tuple(group[i:i + max_plans]))
            for group in groups.values() for i in range(0, len(group), max_plans)]


class Evaluator:
    """Evaluates work units, reusing collective models, op prices and schedules between them."""

    def __init__(self) -> None:
        self._collectives: dict[ClusterSpec, CollectiveModel] = {}
        self._contexts: dict[tuple[object, ...], PriceContext] = {}
        self._works: dict[tuple[object, ...], ModelWork] = {}
        self._stages: dict[tuple[object, ...], list[StageInfo]] = {}
        self._schedules: dict[tuple[str, int, int, int], PipelineSchedule] = {}
        self._templates = TemplateCache()
        self._passes: PassCache = {}
        self._splits: dict[tuple[str, int, int, int], bool] = {}
        self.plans = 0  # plans evaluated

    def evaluate(self, unit: WorkUnit) -> list[dict[str, Any]]:
        """One result row per member of ``unit``."""
        return [self.evaluate_one(unit.model, unit.tokens, c, cluster) for c, cluster in unit.members]

    def evaluate_one(self, model: ModelSpec, tokens: float, c: Candidate, cluster: ClusterSpec) -> dict[str, Any]:
        """The result row of one candidate."""
        self.plans += 1
        if self.plans == KERNEL_AFTER_PLANS:  # a sweep: worth loading the compiled list kernel (~0.35 s, once)
            prefer_kernel()
        with gc_paused():  # a plan's graph is ~10^5 acyclic objects: the collector's passes were ~25% of a sweep
            p = c.plan
            split = self._split(p.schedule, p.pp, p.num_microbatches, p.vpp)
            step = evaluate_plan(model, p, lambda m: self._schedule(p.schedule, p.pp, m, p.vpp),
                                 self.prices(model, p, split, cluster), cluster.gpus_per_node, self._templates)
            row = result_row(c, cluster, model, tokens, step)
            freeze_survivors()  # the sweep's caches: out of the collector's later passes (trainsim's own processes)
        return row

    def bound(self, model: ModelSpec, c: Candidate, cluster: ClusterSpec) -> float:
        """A lower bound on the candidate's step time, seconds (:mod:`sim.explore.bound`)."""
        p = c.plan
        schedule = self._schedule(p.schedule, p.pp, p.num_microbatches, p.vpp)
        split = self._split(p.schedule, p.pp, p.num_microbatches, p.vpp)
        return step_lower_bound_s(model, p, schedule, self.prices(model, p, split, cluster), self._passes, split)

    def _schedule(self, name: str, pp: int, microbatches: int, vpp: int) -> PipelineSchedule:
        key = (name, pp, microbatches, vpp)
        if key not in self._schedules:
            self._schedules[key] = build_schedule(*key)
        return self._schedules[key]

    def _split(self, name: str, pp: int, microbatches: int, vpp: int) -> bool:
        """The schedule's ``split_backward`` (memoized: the property walks every action)."""
        key = (name, pp, microbatches, vpp)
        if key not in self._splits:
            self._splits[key] = self._schedule(*key).split_backward
        return self._splits[key]

    def prices(self, model: ModelSpec, plan: ParallelPlan, split_backward: bool, cluster: ClusterSpec) -> PlanPrices:
        """The plan's prices, sharing work, stage layouts and priced tasks with earlier plans."""
        wkey = work_key(model, plan, split_backward)
        if wkey not in self._works:
            self._works[wkey] = ModelWork(model, plan, split_backward)
        skey = (model, plan.tp, plan.pp, plan.vpp, plan.uneven_stages, plan.ep, plan.etp)
        if skey not in self._stages:
            self._stages[skey] = plan_stages(model, plan)
        placement = plan_placement(plan)
        ckey = (cluster, placement, plan.compute_dtype)
        if ckey not in self._contexts:
            self._contexts[ckey] = PriceContext(cluster, self._collective_model(cluster), placement, plan.compute_dtype)
        return PlanPrices(self._works[wkey], self._stages[skey], self._contexts[ckey])

    def _collective_model(self, cluster: ClusterSpec) -> CollectiveModel:
        if cluster not in self._collectives:
            self._collectives[cluster] = CollectiveModel(cluster)
        return self._collectives[cluster]
_LOCAL = threading.local()  # this thread's evaluator for batches (worker processes and threads)
PROCESS_PLANS = 5000  # plans a thread's evaluator serves before it starts afresh (bounds its caches)


def evaluate_units(units: Iterable[WorkUnit]) -> list[list[dict[str, Any]]]:
    """Evaluate units in order (what a worker runs for a batch) with this thread's
    :class:`Evaluator`, whose caches serve its later batches too (renewed every
    :data:`PROCESS_PLANS` plans)."""
    evaluator: Evaluator | None = getattr(_LOCAL, "evaluator", None)
    if evaluator is None or evaluator.plans >= PROCESS_PLANS:
        evaluator = _LOCAL.evaluator = Evaluator()
    return [evaluator.evaluate(u) for u in units]
