"""Run one job: schedule -> task graph -> prices -> engine -> Timeline -> metrics and memory."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from core.errors import invalid
from core.taskgraph import TaskGraph
from core.timeline_meta import SteadyState, TimelineMeta
from core.vocab import COLLECTIVE_OPS, Offload, Runtime
from schedules.actions import PipelineSchedule
from schedules.builder import BuildOptions, build_task_graph
from schedules.layer_kinds import layer_kind, model_flops_per_step
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from schedules.plan.layout import INTERLEAVED_SCHEDULES, TORCH_INTERLEAVED_SCHEDULES
from schedules.work import model_work
from sim.costing import CostedTask
from sim.gc_pause import gc_paused
from sim.host_pricing import HostOpPricer
from sim.interference import slowed_costs
from sim.job import Job
from sim.list_engine import ListEngine
from sim.memory import MemoryBreakdown, MemoryCurve, MemoryModel
from sim.memory_timeline import memory_timelines
from sim.metrics import step_metrics
from sim.pricing import TaskCoster, cost_graph
from sim.simulation_result import SimulationResult
from sim.size_guard import span_detail
from sim.steady_groups import per_group_extension
from sim.steady_phases import phased_extension
from sim.steady_state import MIN_COPIES, Extension, SteadyRun, reduced_microbatches, steady_run
from sim.timeline import Timeline
from sim.timeline_writer import TimelineSource, write_timeline
from sim.window_step import window_figures
from topo.cluster import ClusterSpec
from topo.collective_fit import CollectiveFits
from topo.collectives import CollectiveModel
from topo.placement import Placement

if TYPE_CHECKING:  # the SimPy engine and the flow network are imported by the jobs that run them
    import simpy

    from sim.engine import Engine
    from sim.flow.transport import FlowTransport

log = logging.getLogger(__name__)
ENGINES = ("auto", "simpy", "list")


def make_placement(job: Job) -> Placement:
    """Ranks -> devices for the job's plan (innermost dimension first)."""
    p = job.plan
    return Placement(sizes={"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}, order=p.placement)


def simulate(job: Job, engine: str = "auto", *, slow_pace: float = 1.0) -> SimulationResult:
    """Simulate ``job.steps`` training steps of ``job`` (``engine``: see :func:`engine_name`).
    ``slow_pace`` multiplies the compute pace of the job's slowest device (a degraded GPU pacing
    every rank, :mod:`sim.run.slow_ranks`); 1 = as the job says."""
    with gc_paused():
        return _simulate(job, engine, slow_pace)


def _simulate(job: Job, engine: str, slow_pace: float = 1.0) -> SimulationResult:
    t0 = time.perf_counter()
    plan = job.plan
    name = engine_name(job, engine)
    coster = job_coster(job, slow_pace)  # one pricer for every graph of the run
    fallback = steady_state_off(job, name)
    steady, fallback = _steady_run(job, coster) if not fallback else (None, fallback)
    if steady is not None:
        schedule, costs = cast(tuple[PipelineSchedule, list[CostedTask], object], steady.payload)[:2]
        meta = dataclasses.replace(full_step_meta(job, steady.graph.meta, steady.extension),
                                   ideal_network=job.ideal_network, engine=name)
        mm = MemoryModel(job.model, plan, schedule)

        source = TimelineSource(steady.graph, costs, span_detail(job))

        def extended() -> Timeline:
            return source.write(steady.start, steady.end, meta, steady.replication)

        window = window_figures(steady, source, meta, mm)
        if window is not None:
            return SimulationResult(job, schedule, window.metrics, window.memory, time.perf_counter() - t0, mm,
                                    extended, window.host_activation_peak, steady.extension, fallback, window)
        timeline = extended()
    else:
        priced = build_priced(job, coster)
        schedule, graph = priced.schedule, priced.graph
        start, end = timed(job, priced, name)
        timeline = write_timeline(graph, priced.costs, start, end, span_detail(job),
                                  dataclasses.replace(graph.meta, ideal_network=job.ideal_network, engine=name))
        mm = MemoryModel(job.model, plan, schedule)
    metrics = step_metrics(timeline)
    memory, curves = _memory(mm, timeline)
    result = SimulationResult(job, schedule, metrics, memory, time.perf_counter() - t0, mm, lambda: timeline,
                              mm.offloaded_activation_peak(timeline),
                              steady.extension if steady is not None else None, fallback)
    return result.keeping(timeline=timeline, curves=curves, memory_timelines=memory_timelines(mm, timeline, curves))


def timed(job: Job, p: Priced, engine: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every task on ``engine``, with compute slowed where it ran beside
    communication kernels (``job.interference``, :mod:`sim.interference`: a second timing)."""
    start, end, _ = timed_costs(job, p, engine)
    return start, end


def timed_costs(job: Job, p: Priced, engine: str) -> tuple[np.ndarray, np.ndarray, list[CostedTask]]:
    """:func:`timed`, with the prices of the pass that gave the times."""
    first = run_engine(job, p.graph, p.costs, p.coster, engine)
    start, end = first.times()
    slowed = slowed_costs(p.graph, p.costs, start, end, p.coster) if job.interference else None
    if slowed is None:
        return start, end, p.costs
    if isinstance(first, ListEngine):
        return (*first.with_costs(slowed).times(), slowed)
    return (*run_engine(job, p.graph, slowed, p.coster, engine).times(), slowed)


def steady_state_off(job: Job, engine: str) -> str:
    """Why ``job`` on ``engine`` simulates every micro-batch without trying a shorter step ("": it tries)."""
    if job.exact:
        return "exact: every micro-batch simulated (--exact)"
    if engine != "list":
        return "the simpy engine (shared CPU cores, flows or stragglers) simulates every micro-batch"
    if job.steps != 1:
        return f"{job.steps} steps are simulated whole"
    return ""


def _steady_run(job: Job, coster: TaskCoster) -> tuple[SteadyRun | None, str]:
    """The job's step from a shorter one whose steady state repeats (:mod:`sim.steady_state`),
    priced by ``coster`` (the shorter steps have the job's placement); else None and why not."""
    plan = job.plan

    def run(microbatches: int) -> tuple[TaskGraph, np.ndarray, np.ndarray, object]:
        small = dataclasses.replace(job, plan=dataclasses.replace(
            plan, global_batch=microbatches * plan.dp * plan.microbatch_size))
        priced = build_priced(small, coster, work_plan=plan)  # each micro-batch does the full step's work
        start, end, final = timed_costs(small, priced, "list")
        return priced.graph, start, end, (priced.schedule, priced.costs, final)

    if plan.schedule in TORCH_INTERLEAVED_SCHEDULES and plan.num_microbatches % plan.pp:
        # rounds of m // rounds micro-batches: a shorter step would group them differently
        return None, "torch's interleaved rounds: micro-batches not a multiple of pp"
    multiple = plan.pp if plan.schedule in INTERLEAVED_SCHEDULES else 1
    short = _short_cool_down(job)
    tried = reduced_microbatches(plan.num_microbatches, plan.pp, plan.vpp, multiple, short)
    if not tried:
        return None, f"too few micro-batches: no shorter step saves {MIN_COPIES} periods"
    found = steady_run(run, plan.num_microbatches, plan.pp, plan.vpp, multiple, short_cool_down=short,
                       per_group=None if job.folded else per_group_extension(
                           plan.num_microbatches, plan.pp, job.cluster.gpus_per_node),
                       by_phase=phased_extension(plan.num_microbatches, plan.pp))
    return (found, "") if isinstance(found, SteadyRun) else (None, found.reason)


def _short_cool_down(job: Job) -> bool:
    """Does the step's periodic run go on to its last few micro-batches? Megatron-LM's 1F1B
    without offload (what else runs differently after the last micro-batch, torch's FSDP and
    host copies, makes the cool-down ~pp long), folded: a hint for
    :func:`sim.steady_state.steady_run`, which verifies the period either way. Not for full
    graphs: their receives can drift by ~1e-9 s per micro-batch inside the period check's
    tolerance (GPT-3 175B on 1024 A100s), and a shorter run is extended by more copies."""
    plan = job.plan
    return (job.folded and plan.schedule == "1f1b" and plan.framework == Runtime.MEGATRON and plan.offload == Offload.NONE
            and not plan.offload_activations)


def full_step_meta(job: Job, meta: TimelineMeta, ext: Extension) -> TimelineMeta:
    """Timeline meta of the full step: the simulated graph's ``meta`` describes the shorter one."""
    plan = job.plan
    steady = SteadyState(simulated_microbatches=ext.simulated_microbatches, period_microbatches=ext.period_microbatches,
                         period_s=ext.period_s, copies=ext.copies, window_start=ext.window_start)
    return dataclasses.replace(meta, num_microbatches=plan.num_microbatches,
                               model_flops_per_step=model_flops_per_step(job.model, plan.global_batch),
                               tokens_per_step=plan.global_batch * job.model.seq_len, steady_state=steady)


def engine_name(job: Job, engine: str = "auto") -> str:
    """The engine that runs ``job``: "simpy" (:class:`sim.engine.Engine`) when it models shared
    CPU cores (CPU hosts), flow-level networks or stragglers, else "list"
    (:class:`sim.list_engine.ListEngine`, the same schedule without SimPy); ``engine`` forces one."""
    if engine not in ENGINES:
        raise invalid("engine", engine, "expected one of " + ", ".join(ENGINES))
    needs_simpy = job.fidelity != "analytic" or job.cluster.intra_node == "host" or job.jitter_cv > 0
    if engine == "list" and needs_simpy:
        raise ValueError("engine='list' is invalid for this job: it models shared CPU cores, flows or "
                         "stragglers, which only the simpy engine runs")
    return engine if engine != "auto" else ("simpy" if needs_simpy else "list")


def run_engine(job: Job, graph: TaskGraph, costs: list[CostedTask], coster: TaskCoster,
               engine: str = "auto") -> Engine | ListEngine:
    """The engine (not yet run) for ``job``'s ``graph`` priced by ``coster``."""
    if engine_name(job, engine) == "list":
        return ListEngine(graph, costs, gpus_per_node=job.cluster.gpus_per_node)
    from sim.engine import Engine

    return Engine(graph, costs, gpus_per_node=job.cluster.gpus_per_node, flows=flow_network(job, coster),
                  jitter_cv=job.jitter_cv, sync_sizes=sync_sizes(job, graph, coster), **host_cores(job))


@dataclass(frozen=True)
class Priced:
    """A job's schedule, placement, task graph and the priced durations of its tasks, with the
    pricer that made them (its caches are valid while this graph lives)."""

    schedule: PipelineSchedule
    placement: Placement
    graph: TaskGraph
    costs: list[CostedTask]
    coster: TaskCoster


def build_priced(job: Job, coster: TaskCoster | None = None, work_plan: ParallelPlan | None = None) -> Priced:
    """Everything :func:`simulate` runs the engine on (``job.folded``, ``job.steps``), priced by
    ``coster`` (a pricer of the job's placement; None: a new one). ``work_plan``: the plan whose
    micro-batches' work the blocks do (default the job's; a shorter step standing for a longer one
    does the longer step's: a weight cast cached for the step is 1/m of it in each of its m)."""
    plan = job.plan
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    coster = coster or task_coster(job, make_placement(job))
    placement = coster.placement
    work = model_work(job.model, work_plan, schedule.split_backward) if work_plan is not None else None
    graph = build_task_graph(job.model, plan, schedule, placement.grid_rank_function(),
                             BuildOptions(folded=job.folded, steps=job.steps,
                                          gloo_host=job.cluster.intra_node == "host",
                                          single_queue=plan.single_device_queue(job.cluster.device.compute_capability)),
                             work=work)
    log.info("task graph: %d tasks", len(graph))
    return Priced(schedule, placement, graph, cost_graph(graph, coster), coster)


def build_and_price(job: Job) -> tuple[PipelineSchedule, Placement, TaskGraph, list[CostedTask]]:
    """The pipeline schedule, placement, task graph and the priced durations of its tasks."""
    p = build_priced(job)
    return p.schedule, p.placement, p.graph, p.costs


def sync_sizes(job: Job, graph: TaskGraph, coster: TaskCoster) -> dict[int, int]:
    """For the straggler model: task id -> how many ranks it synchronises, for every collective
    task (a communication task whose op is a collective of a parallel dimension; a folded graph
    holds one rank of each group of identical ranks, so the count comes from the placement).
    Empty when the model is off."""
    if job.jitter_cv <= 0:
        return {}
    sizes = {}
    for i, task in enumerate(graph.tasks):
        dims = [op.dim for op in task.ops if op.dim is not None and op.op_class in COLLECTIVE_OPS]
        if task.lane.startswith("comm.") and dims:
            sizes[i] = len(coster.group(dims[0], task.rank))
    return sizes


def task_coster(job: Job, placement: Placement) -> TaskCoster:
    """The prices of ``job``'s ops on ``job.cluster``: the profile's collective fits, the host's
    offload pricer, DTensor and scheduling overheads."""
    return TaskCoster(collective_model(job.cluster, job.ideal_network), placement, dtype=job.plan.compute_dtype,
                      gpus_per_node=job.cluster.gpus_per_node, ideal_network=job.ideal_network,
                      fits=CollectiveFits(job.collective_fits), dtensor_params=dtensor_params(job),
                      comm_delay_s=comm_delay_s(job), host_ops=HostOpPricer(job.cluster).op_time_s,
                      local_op=layer_kind(job.model).local_tensor_ops(job.plan))


@lru_cache(maxsize=4)
def job_coster(job: Job, slow_pace: float = 1.0) -> TaskCoster:
    """The pricer of ``job`` with its slowest device's compute pace times ``slow_pace``
    (:func:`simulate`), kept for the next simulation of the same job in the process: its op and
    task prices are pure functions of the two (a third of a small simulation)."""
    coster = task_coster(job, make_placement(job))
    coster.compute_pace *= slow_pace
    return coster


@lru_cache(maxsize=8)
def collective_model(cluster: ClusterSpec, ideal: bool) -> CollectiveModel:
    """The collective model of ``cluster`` (``ideal``: every communication free), one per process:
    its routes, NCCL candidates and group structures are pure functions of the cluster, so
    simulations of jobs on one cluster share them (a few ms of every small simulation)."""
    return CollectiveModel(cluster, ideal=ideal)


def flow_network(job: Job, coster: TaskCoster) -> Callable[[simpy.Environment], FlowTransport] | None:
    """The Engine's flow network for ``job.fidelity == "flow"`` (None: analytic durations).
    ``coster`` gives each communication op its uncontended time (the profile's fit or the
    analytic model) and prices what is not network traffic (see :mod:`sim.flow.decompose`)."""
    if job.fidelity == "analytic":
        return None
    from sim.flow.transport import flow_factory

    return flow_factory(job.fidelity, coster, folded=job.folded)


def dtensor_params(job: Job) -> bool:
    """The trainer (framework="torch") holds DTensor parameters under TP or its DP wrappers."""
    plan = job.plan
    return plan.framework == Runtime.TORCH and (plan.tp > 1 or plan.dp * plan.cp > 1)


def comm_delay_s(job: Job) -> float:
    """Scheduling delay per communication call on an oversubscribed CPU host: host.sched_delay_s
    x (ranks per node / cores - 1): processes waiting for a core, 0 when every rank has a core
    or devices are GPUs. (The cores' measured throughput, ``host.compute_capacity``, shares the
    compute; the waiting depends on how many processes contend for how many cores.)"""
    cluster = job.cluster
    if cluster.intra_node != "host":
        return 0.0
    return cluster.host.sched_delay_s * max(0.0, cluster.gpus_per_node / cluster.host.cpu_cores - 1.0)


def host_cores(job: Job) -> dict[str, Any]:
    """Engine settings for CPU hosts whose devices are processes (intra_node="host"): the node's
    cores are shared by its ranks' compute, its DRAM bandwidth (host.dram_GBps, in units of one
    process's, the device's hbm_GBps x hbm_efficiency) by their memory streaming; a folded rank
    weighs as the ranks it stands for."""
    cluster, plan = job.cluster, job.plan
    if cluster.intra_node != "host":
        return {}
    weight = float(plan.tp * plan.cp * plan.dp) if job.folded else 1.0
    device = cluster.device
    streams = cluster.host.dram_GBps / (device.hbm_GBps * device.hbm_efficiency)
    cores = cluster.host.compute_capacity or float(cluster.host.cpu_cores)
    return {"cores_per_node": cores, "memory_streams_per_node": streams,
            "rank_weight": {r: weight for r in range(plan.world_size)}}


def _memory(model: MemoryModel, timeline: Timeline) -> tuple[dict[int, MemoryBreakdown], dict[int, MemoryCurve]]:
    rank_pp = timeline.meta.rank_pp
    curves = model.activation_curves(timeline)
    memory = {rank: model.breakdown(rank_pp[rank], curve.peak) for rank, curve in curves.items()}
    return memory, curves
