"""CPU hosts: ranks share the node's cores (processor sharing), host time between ops is idle."""

from __future__ import annotations

import dataclasses

import pytest
import simpy

from core.taskgraph import Op, Task, TaskGraph, TaskGraphBuilder
from core.vocab import Kind, Lane, OpClass
from sim.cores import SharedCores
from sim.costing import cost_fixed
from sim.engine import Engine
from sim.job import resolve_job
from sim.metrics import step_metrics
from sim.simulate import simulate


def _finish_times(capacity: float, jobs: list[tuple[float, float, int]]) -> list[float]:
    """(start_s, work_s, node) jobs on SharedCores; returns each one's finish time."""
    env = simpy.Environment()
    cores = SharedCores(env, capacity)
    out = [0.0] * len(jobs)

    def job(i: int, start: float, work: float, node: int):  # type: ignore[no-untyped-def]
        yield env.timeout(start)
        yield cores.run(work, node)
        out[i] = env.now

    for i, (start, work, node) in enumerate(jobs):
        env.process(job(i, start, work, node))
    env.run()
    return out


def test_processor_sharing_closed_forms() -> None:
    assert _finish_times(2, [(0, 1.0, 0)]) == [pytest.approx(1.0)]
    assert _finish_times(2, [(0, 1.0, 0), (0, 1.0, 0)]) == [pytest.approx(1.0)] * 2
    # three equal jobs on two cores: each runs at 2/3 speed -> all finish at 1.5
    assert _finish_times(2, [(0, 1.0, 0)] * 3) == [pytest.approx(1.5)] * 3
    # different nodes do not share
    assert _finish_times(1, [(0, 1.0, 0), (0, 1.0, 1)]) == [pytest.approx(1.0)] * 2
    # a job joining later: 1 core; A alone for 0.5 (0.5 done), then both at 1/2: A ends at 1.5,
    # B has 0.5 left and runs alone until 2.0
    assert _finish_times(1, [(0, 1.0, 0), (0.5, 1.0, 0)]) == [pytest.approx(1.5), pytest.approx(2.0)]


def _compute_graph(ranks: int, work_s: float) -> TaskGraph:
    g = TaskGraphBuilder()
    for r in range(ranks):
        g.add(Task(rank=r, lane=Lane.COMPUTE, kind=Kind.FWD, name="F", ops=(Op(Lane.COMPUTE, Kind.FWD, "F", OpClass.FIXED,
                                                                              duration_s=work_s),)))
    return g.build()


@pytest.mark.parametrize("ranks, cores, expected", [(1, 2, 1.0), (2, 2, 1.0), (4, 2, 2.0), (8, 2, 4.0)])
def test_engine_shares_cores_among_ranks_of_a_node(ranks: int, cores: int, expected: float) -> None:
    graph = _compute_graph(ranks, 1.0)
    result = Engine(graph, cost_fixed(graph), gpus_per_node=ranks, cores_per_node=cores).run()
    assert float(result.end_s.max()) == pytest.approx(expected)


def test_without_cores_ranks_run_in_parallel() -> None:
    graph = _compute_graph(8, 1.0)
    assert float(Engine(graph, cost_fixed(graph)).run().end_s.max()) == pytest.approx(1.0)


def _cpu_job(ranks: int, **device: float):  # type: ignore[no-untyped-def]
    job = resolve_job({"model": "small", "cluster": "cpu-host", "gpus_per_node": ranks, "dp": ranks,
                       "global_batch": 2 * ranks, "dtype": "fp32", "full": True})
    return dataclasses.replace(job, cluster=dataclasses.replace(
        job.cluster, device=job.cluster.device.with_overrides(device),
        host=job.cluster.host.with_overrides({"cpu_cores": 2})))


def test_more_ranks_than_cores_slow_each_rank_down() -> None:
    two, four = simulate(_cpu_job(2)), simulate(_cpu_job(4))
    busy2 = two.metrics.per_rank["compute_s"].mean()
    busy4 = four.metrics.per_rank["compute_s"].mean()
    assert busy4 == pytest.approx(2 * busy2, rel=0.02)  # same work per rank, half the core each


def test_host_time_between_ops_is_idle_time() -> None:
    host_s = 1e-3
    result = simulate(_cpu_job(1, host_overhead_s=host_s, kernel_overhead_s=0.0))
    tl = result.timeline
    host = tl.spans[tl.spans["lane"].astype(str) == "host"]
    compute_ops = tl.spans[tl.spans["lane"].astype(str) == "compute"]
    assert len(host) == len(compute_ops)
    assert (host["end_s"] - host["start_s"]).to_numpy() == pytest.approx(host_s)
    m = step_metrics(tl)
    assert m.bubble_fraction == pytest.approx(len(host) * host_s / m.step_time_s, rel=1e-6)


def test_memory_streams_share_the_nodes_bandwidth() -> None:
    env = simpy.Environment()
    cores = SharedCores(env, capacity=4, memory_capacity=1)
    done = []

    def job(resource: str):  # type: ignore[no-untyped-def]
        yield cores.run(1.0, 0, resource=resource)
        done.append((resource, env.now))

    for resource in ("memory", "memory", "core", "core"):
        env.process(job(resource))
    env.run()
    assert sorted(done) == [("core", pytest.approx(1.0)), ("core", pytest.approx(1.0)),
                            ("memory", pytest.approx(2.0)), ("memory", pytest.approx(2.0))]


def test_waiting_inside_a_compute_task_uses_no_core() -> None:
    from sim.costing import CostedTask

    graph = _compute_graph(2, 1.0)
    costs = [CostedTask(1.0, (), wait_s=0.5) for _ in graph.tasks]  # half of each task waits in comm
    result = Engine(graph, costs, gpus_per_node=2, cores_per_node=1).run()
    # core work 0.5 each on one core: both done at 1.0, then 0.5 of waiting in parallel
    assert float(result.end_s.max()) == pytest.approx(1.5)


def _collective_beside_compute(compute_s: float) -> tuple[float, float]:
    """Two ranks on one two-core node: each computes ``compute_s`` while the two run a 1 s
    all-reduce (as priced alone). Returns (all-reduce end, compute end)."""
    graph = TaskGraphBuilder()
    for rank in (0, 1):
        graph.add(Task(rank=rank, lane=Lane.COMPUTE, kind=Kind.BWD, name="bwd",
                       ops=(Op(Lane.COMPUTE, Kind.BWD, "bwd", OpClass.FIXED, duration_s=compute_s),)))
        graph.add(Task(rank=rank, lane=Lane.DP, kind=Kind.ALL_REDUCE, name="ar", group="ar",
                       ops=(Op(Lane.DP, Kind.ALL_REDUCE, "ar", OpClass.FIXED, duration_s=1.0),)))
    built = graph.build()
    result = Engine(built, cost_fixed(built), gpus_per_node=2, cores_per_node=2).run()
    return float(result.end_s[1]), float(result.end_s[0])


def test_a_collective_alone_takes_its_priced_time() -> None:
    assert _collective_beside_compute(0.0)[0] == pytest.approx(1.0)


def test_a_collective_and_compute_share_the_cores() -> None:
    """Four busy threads (two ranks' compute, two gloo workers) on two cores run at half speed:
    1 s of compute and the 1 s all-reduce both end at 2 s, where each alone would take 1 s."""
    assert _collective_beside_compute(1.0) == (pytest.approx(2.0), pytest.approx(2.0))


def test_fsdp2_prefetch_blocks_the_backward_on_gloo() -> None:
    """FSDP2 issues its backward prefetch all-gather without ``async_op``; gloo returns when it
    is done (the committed dp2-zero3 trace shows it inside the block's first autograd node), so
    on a CPU host no backward compute of a block overlaps the gather it prefetched. On GPUs
    (NCCL, stream-ordered) the same graph overlaps them."""
    job = resolve_job({"model": "small", "cluster": "cpu-host", "gpus_per_node": 2, "dp": 2, "zero": 3,
                       "global_batch": 4, "dtype": "fp32", "full": True})
    job = dataclasses.replace(job, detail="op", plan=dataclasses.replace(job.plan, framework="torch"))
    spans = simulate(job).timeline.spans
    spans = spans[(spans["rank"] == 0) & (spans["step"] == 0)]
    gathers = spans[(spans["lane"] == "comm.dp") & (spans["kind"] == "all_gather")]
    backward = spans[(spans["lane"] == "compute") & (spans["kind"] == "bwd")
                     & spans["name"].astype(str).str.contains("grad")]  # the blocks' dgrad/wgrad ops
    prefetches = gathers[gathers["start_s"] > backward["start_s"].min()]
    assert len(prefetches) >= 2
    for g in prefetches.itertuples():
        overlapping = backward[(backward["start_s"] < g.end_s - 1e-9) & (backward["end_s"] > g.start_s + 1e-9)]
        assert overlapping.empty, (g.name, overlapping["name"].tolist())
