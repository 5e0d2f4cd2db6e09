"""Evaluate one plan fast: its step time and where the time goes, as the engine reports them.

The plan's folded step is the task-graph builder's own graph (:func:`schedules.builder.build_task_graph`:
every rule is the simulator's), priced by the simulator's TaskCoster (op prices shared across
plans, :mod:`sim.explore.pricing`), timed by the list engine (:mod:`sim.list_engine`: the
engine's schedule, shared network channels included) and, for long steps, extended from a
shorter one by its steady state (:mod:`sim.steady_state`). What is skipped is the Timeline:
the metrics of :mod:`sim.metrics` follow from task intervals instead of spans:

- a compute task's ops are laid back to back, so its rank's compute stream is busy for exactly the
  task's duration, and the stream's busy time is the sum of its tasks' durations, less the time
  of their ops on lanes outside a layer's own work (expert all-to-alls, FP8 amax all-reduces),
  which the Timeline's bubble counts as idle;
- communication exposed on a rank = the time inside its compute tasks with no compute kernel
  and no host op running (tensor/context-parallel collectives) + the time its DP and pipeline transfers (sends,
  and their mirrored receives) run outside its compute tasks.

``tests/sim/test_explore_fast.py`` checks them against :func:`sim.simulate.simulate`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from core.task_columns import KIND_CODES, LANES, TaskColumns
from core.taskgraph import TaskGraph
from core.vocab import Kind, Lane
from schedules.actions import PipelineSchedule
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim import interference, intervals
from sim.costing import CostedTask
from sim.explore.pricing import PlanPrices, rank_function
from sim.explore.template import Template, TemplateCache
from sim.steady_phases import phased_extension
from sim.steady_state import Replication, SteadyRun, steady_run
from sim.timeline_writer import mirrored

COMPUTE, SEND, DP, OTHER = 0, 1, 2, 3
LANE_CODES: dict[str, int] = {Lane.COMPUTE: COMPUTE, Lane.PP: SEND, Lane.DP: DP}
TRY_FRACTION = 0.75
"""A sweep tries a shorter step only if it has at most this share of the plan's micro-batches:
one that shows no period costs its count on top of the whole step, one that does saves only the
rest. Measured on a seeded sample of 200 of GPT-3 18B's plans on 256 A100s (issue 29): the tries
above 3/4 (29 of 32 on pp 8, 11 of 12 ...) showed no period in about half the plans; estimated
over the sample 0.5 -> +1%, 0.75 -> -5%, 1 (every count) the sweep's CPU time."""
ScheduleOf = Callable[[int], PipelineSchedule]
"""The plan's pipeline schedule for a number of micro-batches."""


@dataclass(frozen=True, kw_only=True)
class FastStep:
    """One plan's step (fractions of the step time).

    ``compute_fraction + layer_comm_fraction + transfer_comm_fraction + idle_fraction == 1``,
    averaged over pipeline ranks; ``exposed_comm_fraction`` is layer + transfer (the metric of
    :mod:`sim.metrics`) and ``bubble_fraction`` the share of the step each compute stream is idle.
    ``contention``: a pipeline send and a DP transfer shared a node's network at some moment
    (the engine slowed both).
    """

    step_time_s: float
    bubble_fraction: float
    exposed_comm_fraction: float
    compute_fraction: float
    layer_comm_fraction: float
    transfer_comm_fraction: float
    idle_fraction: float
    contention: bool


@dataclass(frozen=True)
class TaskArrays:
    """A timed graph as numpy arrays (one entry per task)."""

    pp: int
    lane: np.ndarray
    rank_pp: np.ndarray
    peer_pp: np.ndarray
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    kernel: np.ndarray
    outside: np.ndarray  # seconds of each task's ops on lanes outside a layer's work (bubble: idle)
    host: np.ndarray  # seconds of each task's host ops (neither compute nor communication)
    crosses: np.ndarray


def evaluate_plan(model: ModelSpec, plan: ParallelPlan, schedule_of: ScheduleOf, prices: PlanPrices,
                  gpus_per_node: int, templates: TemplateCache | None = None) -> FastStep:
    """The step of ``plan`` priced by ``prices`` (``templates``: graphs shared between plans)."""
    cache = templates if templates is not None else TemplateCache(size=2)
    rank_of = rank_function(plan)
    single_queue = plan.single_device_queue(prices.context.coster.device.compute_capability)

    def run(microbatches: int) -> tuple[TaskGraph, np.ndarray, np.ndarray, object]:
        small = dataclasses.replace(plan, global_batch=microbatches * plan.dp * plan.microbatch_size)
        tmpl = cache.get(model, small, schedule_of(microbatches), rank_of, prices.work, single_queue)
        t = timed(tmpl, prices, gpus_per_node, plan.pp)
        return tmpl.graph, t.start, t.end, t

    multiple = plan.pp if plan.schedule == "interleaved-megatron" else 1
    try:
        steady = steady_run(run, plan.num_microbatches, plan.pp, plan.vpp, multiple, max_fraction=TRY_FRACTION,
                            by_phase=phased_extension(plan.num_microbatches, plan.pp))
        if not isinstance(steady, SteadyRun):
            return step_of(cast(TaskArrays, run(plan.num_microbatches)[3]), gpus_per_node)
        return step_of(replicated(cast(TaskArrays, steady.payload), steady.replication), gpus_per_node)
    finally:
        prices.context.coster.forget_tasks()  # one graph's task costs at a time


def timed(tmpl: Template, prices: PlanPrices, gpus_per_node: int, pp: int) -> TaskArrays:
    """The template's tasks priced for one plan and timed by the list engine, as arrays."""
    costs = tmpl.costs(prices.work, prices.context.coster)
    cls = tmpl.cost_class
    dur = np.fromiter((c.duration_s for c in costs), float, len(costs))[cls]
    crosses = np.fromiter((c.crosses_nodes for c in costs), bool, len(costs))[cls]
    kernel = np.fromiter(map(prices.context.coster.kernel_time_s, costs), float, len(costs))[cls]
    outside = np.fromiter(map(prices.context.coster.outside_layer_time_s, costs), float, len(costs))[cls]
    host = np.fromiter(map(prices.context.coster.host_time_s, costs), float, len(costs))[cls]
    start, end = tmpl.passes.times(dur, crosses, gpus_per_node)
    lane, rank_pp, peer_pp, rank = _static_arrays(tmpl)
    slowdown = _slowdowns(tmpl, prices, costs)
    if slowdown is not None:  # compute beside communication kernels (sim.interference), as simulate times it
        compute, comm = lane == COMPUTE, _sm_comm(tmpl)
        busy_start, busy_end = interference.busy_spans(lane == SEND, _receives(tmpl), start, end, dur)
        slowed = interference.slowed_durations(rank, compute, comm, busy_start, busy_end, dur, slowdown[cls])
        if not np.array_equal(slowed, dur):
            start, end = tmpl.passes.times(slowed, crosses, gpus_per_node)
    return TaskArrays(pp=pp, lane=lane, rank_pp=rank_pp, peer_pp=peer_pp, rank=rank, start=start, end=end,
                      dur=dur, kernel=kernel, outside=outside, host=host, crosses=crosses)


def _slowdowns(tmpl: Template, prices: PlanPrices, costs: list[CostedTask]) -> np.ndarray | None:
    """Per cost class, how much slower it runs beside its rank's heaviest communication kernel
    (None on devices without SMs, or without communication)."""
    coster = prices.context.coster
    if not interference.applies(coster.device):
        return None
    loads: dict[int, tuple[int, float]] = {}
    for task in tmpl.representative:
        if task.lane in interference.SM_LANES:
            real = tmpl.real(task, prices.work)
            ctas, busbw = coster.comm_load(real)
            hbm = interference.comm_hbm_GBps(interference.hbm_op(real.ops[-1]), busbw) if busbw > 0 else 0.0
            old = loads.get(task.rank, (0, 0.0))
            loads[task.rank] = (max(old[0], ctas), max(old[1], hbm))
    if not loads:
        return None
    slowdown = interference.memoized_task_slowdown(coster.device, coster.dtype, coster.slowdown_memo())
    return np.fromiter((slowdown(cost, *loads[task.rank]) if task.lane == Lane.COMPUTE and task.rank in loads else 1.0
                        for task, cost in zip(tmpl.representative, costs, strict=True)), float, len(costs))


def _sm_comm(tmpl: Template) -> np.ndarray:
    """Per task of the template: is it a communication kernel beside the compute stream?"""
    return _task_mask(tmpl, "sm_comm", lambda c: np.isin(c.lane, interference.SM_LANE_CODES))


def _receives(tmpl: Template) -> np.ndarray:
    """Per task of the template: is it a pipeline receive?"""
    return _task_mask(tmpl, "receives", lambda c: c.kind == KIND_CODES[Kind.RECV])


def _task_mask(tmpl: Template, name: str, test: Callable[[TaskColumns], np.ndarray]) -> np.ndarray:
    """``test`` of the template graph's columns (a mask of its tasks), made once per template (kept as ``name``)."""
    found = tmpl.derived.get(name)
    if found is None:
        found = tmpl.derived[name] = test(tmpl.graph.columns)
    return cast(np.ndarray, found)


_LANE_OF = np.array([LANE_CODES.get(lane, OTHER) for lane in LANES], np.int8)  # core.task_columns lane codes -> this module's


def _static_arrays(tmpl: Template) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per task of the template: lane code, pipeline rank, the pipeline rank its span is
    mirrored on as a receive (-1: none, :func:`sim.timeline_writer.mirrored`), rank."""
    found = tmpl.derived.get("arrays")
    if found is None:
        c, rank_pp = tmpl.graph.columns, tmpl.graph.meta.rank_pp
        pp_of = np.full(max(rank_pp, default=-1) + 2, -1, np.int64)  # by rank; the last entry: any rank beyond
        pp_of[list(rank_pp)] = list(rank_pp.values())
        peer_pp = np.where(mirrored(c), pp_of[np.minimum(c.peer, pp_of.size - 1)], -1)
        found = tmpl.derived["arrays"] = (_LANE_OF[c.lane], pp_of[c.rank], peer_pp, c.rank)
    return cast(tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], found)


def replicated(t: TaskArrays, r: Replication) -> TaskArrays:
    """The arrays of an extended step (:mod:`sim.steady_state`)."""
    i = r.task
    return TaskArrays(pp=t.pp, lane=t.lane[i], rank_pp=t.rank_pp[i], peer_pp=t.peer_pp[i], rank=t.rank[i],
                      start=t.start[i] + r.shift_s, end=t.end[i] + r.end_shift, dur=t.dur[i], kernel=t.kernel[i],
                      outside=t.outside[i], host=t.host[i], crosses=t.crosses[i])


def step_of(t: TaskArrays, gpus_per_node: int) -> FastStep:
    """Step time and the Timeline metrics of timed tasks."""
    live = t.end - t.start > 0
    lo, hi = float(t.start[live].min()), float(t.end[live].max())
    step = hi - lo
    comp = (t.lane == COMPUTE) & live
    span = t.end - t.start
    stretch = np.where(t.dur > 0, span / np.where(t.dur > 0, t.dur, 1.0), 1.0)  # a span held open past its work
    busy = np.bincount(t.rank_pp[comp], weights=span[comp], minlength=t.pp)
    kernel = np.bincount(t.rank_pp[comp], weights=(t.kernel * stretch)[comp], minlength=t.pp)
    transfer = _transfers_outside_compute(t, live, comp, stride=2 * hi + 1)
    host = np.bincount(t.rank_pp[comp], weights=(t.host * stretch)[comp], minlength=t.pp)
    layer = busy - kernel - host
    working = busy - np.bincount(t.rank_pp[comp], weights=(t.outside * stretch)[comp], minlength=t.pp)
    return FastStep(
        step_time_s=step,
        bubble_fraction=float(np.mean((step - working) / step)),
        exposed_comm_fraction=float(np.mean((layer + transfer) / step)),
        compute_fraction=float(np.mean(kernel / step)),
        layer_comm_fraction=float(np.mean(layer / step)),
        transfer_comm_fraction=float(np.mean(transfer / step)),
        idle_fraction=float(np.mean((step - kernel - layer - transfer) / step)),  # host waits included
        contention=_contention(t, live, gpus_per_node, hi),
    )


def _transfers_outside_compute(t: TaskArrays, live: np.ndarray, comp: np.ndarray, stride: float) -> np.ndarray:
    """Per pipeline rank, seconds its DP/pipeline transfers run while its compute stream is idle.

    Ranks are laid side by side on one time axis (rank r shifted by r * stride) so one interval
    subtraction serves them all.
    """
    comm = ((t.lane == SEND) | (t.lane == DP)) & live
    recv = comm & (t.peer_pp >= 0)
    ranks = np.concatenate([t.rank_pp[comm], t.peer_pp[recv]])
    s = np.concatenate([t.start[comm], t.start[recv]]) + ranks * stride
    e = np.concatenate([t.end[comm], t.end[recv]]) + ranks * stride
    shift = t.rank_pp[comp] * stride
    out_s, out_e = intervals.subtract((s, e), (t.start[comp] + shift, t.end[comp] + shift))
    owner = np.floor(out_s / stride).astype(np.int64)
    return np.bincount(owner, weights=out_e - out_s, minlength=t.pp)[: t.pp]


def _contention(t: TaskArrays, live: np.ndarray, gpus_per_node: int, hi: float) -> bool:
    """Do a pipeline send and a DP transfer ever use one node's network at the same time?"""
    fabric = live & t.crosses
    send, dp = fabric & (t.lane == SEND), fabric & (t.lane == DP)
    if not send.any() or not dp.any():
        return False
    stride = 2 * hi + 1
    node = t.rank // gpus_per_node
    a = (t.start[send] + node[send] * stride, t.end[send] + node[send] * stride)
    b = (t.start[dp] + node[dp] * stride, t.end[dp] + node[dp] * stride)
    return intervals.intersection_length(a, b) > 1e-9 * hi
