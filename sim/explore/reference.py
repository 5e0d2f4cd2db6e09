"""The oracle the fast evaluator is tested against: the builder's own TaskGraph, priced as
:func:`sim.simulate.price` prices it, timed by a longest-path pass instead of SimPy.

Slow (it builds every Task object) but independent of :mod:`sim.explore.step_graph`: equal
results mean the compact task list is the builder's graph, and equality with
:func:`sim.simulate.simulate` where no transfers contend means the pass is the engine.
"""

from __future__ import annotations

import numpy as np

from schedules.actions import PipelineSchedule
from schedules.builder import BuildOptions, build_task_graph
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from schedules.taskgraph import TaskGraph
from sim.explore.fast_eval import FastStep, TaskArrays, step_of
from sim.explore.levels import topological_levels
from sim.explore.longest_path import earliest_times
from sim.explore.pricing import kernel_time_s, plan_placement, rank_function
from sim.explore.step_graph import LANE_NAMES
from sim.pricing import TaskCoster, cost_graph
from topo import ClusterSpec, CollectiveModel


def reference_step(model: ModelSpec, plan: ParallelPlan, schedule: PipelineSchedule, cluster: ClusterSpec) -> FastStep:
    """Step metrics of ``plan`` from the builder's folded graph and a longest-path pass."""
    graph = build_task_graph(model, plan, schedule, rank_function(plan), BuildOptions(folded=True, steps=1))
    coster = TaskCoster(CollectiveModel(cluster), plan_placement(plan), dtype=plan.dtype,
                        gpus_per_node=cluster.gpus_per_node)
    costs = cost_graph(graph, coster)
    dur = np.asarray([c.duration_s for c in costs], float)
    start, end = earliest_times(topological_levels(stream_preds(graph)), dur[:, None])
    rank_pp = graph.meta["rank_pp"]
    tasks = graph.tasks
    arrays = TaskArrays(
        pp=plan.pp, lane=np.asarray([LANE_NAMES.index(t.lane) for t in tasks], np.int8),
        rank_pp=np.asarray([rank_pp[t.rank] for t in tasks], np.int64),
        peer_pp=np.asarray([rank_pp[t.peer] if t.peer >= 0 else -1 for t in tasks], np.int64),
        rank=np.asarray([t.rank for t in tasks], np.int64), start=start[:, 0], end=end[:, 0], dur=dur,
        kernel=np.asarray([kernel_time_s(c) for c in costs], float),
        crosses=np.asarray([c.crosses_nodes for c in costs], bool))
    return step_of(arrays, cluster.gpus_per_node)


def stream_preds(graph: TaskGraph) -> list[list[int]]:
    """Each task's dependencies plus the previous ordered task of its (rank, lane) stream."""
    last: dict[tuple[int, str], int] = {}
    preds = []
    for i, t in enumerate(graph.tasks):
        p = list(graph.deps[i])
        if t.ordered:
            prev = last.get((t.rank, t.lane))
            if prev is not None:
                p.append(prev)
            last[(t.rank, t.lane)] = i
        preds.append(p)
    return preds
