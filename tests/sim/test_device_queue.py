"""One hardware work queue per GPU (CUDA_DEVICE_MAX_CONNECTIONS=1): kernels start in the host's
issue order across streams (NVIDIA/Megatron-LM#533: "It enforces the order of kernel execution on
GPU as the kernel queuing order from host"; alibaba/Megatron-LLaMA#26: kernels on other streams
wait for the DP communication). Both engines enforce it and agree."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from schedules.model_presets import get_model
from schedules.plan import ParallelPlan
from sim.costing import cost_fixed
from sim.device_queue import issue_pairs
from sim.engine import Engine
from sim.job import Job, resolve_job
from sim.list_engine import ListEngine
from sim.simulate import build_priced, run_engine, simulate
from topo import get_cluster


def _task(lane: Lane, name: str, seconds: float, rank: int = 0) -> Task:
    kind = Kind.FWD if lane == Lane.COMPUTE else Kind.REDUCE_SCATTER
    return Task(rank=rank, lane=lane, kind=kind, name=name, ops=(Op(lane, kind, name, OpClass.FIXED, duration_s=seconds),))


def _backward_with_buckets(single_queue: bool) -> TaskGraph:
    """Compute A (1 s), bucket reduce-scatter X0 after it (2 s), compute B (0.5 s), X1 after B (2 s,
    queued behind X0 on the DP stream), compute C (1 s): host order A, X0, B, X1, C."""
    tasks = [_task(Lane.COMPUTE, "A", 1.0), _task(Lane.DP, "X0", 2.0), _task(Lane.COMPUTE, "B", 0.5),
             _task(Lane.DP, "X1", 2.0), _task(Lane.COMPUTE, "C", 1.0)]
    return dataclasses.replace(TaskGraph.of(tasks, [(), (0,), (), (2,), ()]), single_queue=single_queue)


def _times(graph: TaskGraph) -> list[tuple[np.ndarray, np.ndarray]]:
    costs = cost_fixed(graph)
    return [(r.start_s, r.end_s) for r in (Engine(graph, costs).run(), ListEngine(graph, costs).run())]


def test_issue_order_puts_a_side_stream_task_after_its_latest_dependency() -> None:
    earlier, later = issue_pairs(_backward_with_buckets(True))
    assert list(zip(earlier.tolist(), later.tolist(), strict=True)) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_compute_issued_after_a_queued_collective_starts_when_it_starts() -> None:
    for start, end in _times(_backward_with_buckets(True)):
        # X1 waits for X0 (its stream) until 3 s; C, issued after X1, cannot start before it
        assert start[3] == pytest.approx(3.0)
        assert start[4] == pytest.approx(start[3])
        assert end.max() == pytest.approx(5.0)
        assert start[2] == pytest.approx(1.0)  # B only waits for X0 to start, not to end


def test_many_connections_let_the_compute_run_ahead() -> None:
    for start, end in _times(_backward_with_buckets(False)):
        assert start[4] == pytest.approx(1.5)
        assert end[4] == pytest.approx(2.5)


def test_prefetch_without_dependencies_is_issued_before_its_first_user() -> None:
    # two parameter all-gathers (no dependencies) feeding compute F0, F1: host order G0, F0, G1, F1
    tasks = [_task(Lane.DP, "G0", 1.0), _task(Lane.DP, "G1", 1.0), _task(Lane.COMPUTE, "F0", 1.0),
             _task(Lane.COMPUTE, "F1", 1.0)]
    graph = dataclasses.replace(TaskGraph.of(tasks, [(), (), (0,), (1,)]), single_queue=True)
    earlier, later = issue_pairs(graph)
    assert list(zip(earlier.tolist(), later.tolist(), strict=True)) == [(0, 2), (2, 1), (1, 3)]


def test_ranks_have_their_own_queues() -> None:
    tasks = [_task(Lane.DP, "X", 5.0, rank=0), _task(Lane.COMPUTE, "A", 1.0, rank=0),
             _task(Lane.COMPUTE, "B", 1.0, rank=1)]
    graph = dataclasses.replace(TaskGraph.of(tasks, [(), (), ()]), single_queue=True)
    assert issue_pairs(graph)[0].tolist() == [0]
    for start, _ in _times(graph):
        assert start.tolist() == [0.0, 0.0, 0.0]


def test_auto_resolves_as_megatron_asserts() -> None:
    # arguments.py@d98e8a6 l.1451-1479: tp or cp > 1 on arch < 10 asserts CUDA_DEVICE_MAX_CONNECTIONS == "1"
    plan = ParallelPlan(tp=2, dp=2, global_batch=2, device_connections="auto")
    assert plan.single_device_queue(90) and plan.single_device_queue(80)
    assert not plan.single_device_queue(100)  # "requirement no longer exists since the Blackwell architecture"
    assert not plan.single_device_queue(0)  # no CUDA device (CPU processes)
    assert ParallelPlan(cp=2, dp=2, global_batch=2, device_connections="auto").single_device_queue(90)
    assert not ParallelPlan(dp=4, global_batch=4, device_connections="auto").single_device_queue(90)
    assert not ParallelPlan(tp=2, dp=2, global_batch=2, framework="torch", device_connections="auto").single_device_queue(90)
    assert ParallelPlan(dp=4, global_batch=4, device_connections="1").single_device_queue(100)
    assert not ParallelPlan(tp=2, dp=2, global_batch=2).single_device_queue(90)  # default: many (opt-in)


def test_an_unknown_setting_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="device_connections.*auto.*1.*many"):
        ParallelPlan(device_connections="8")


@pytest.mark.parametrize("settings", [
    dict(model="gpt3-1.7b", tp=2, pp=2, zero=1, global_batch=16),
    dict(tp=2, pp=2, schedule="interleaved", vpp=2, zero=1, pipeline_p2p="async"),
    dict(tp=2, pp=2, cp=2, nodes=4, zero=1, sequence_parallel=True),
])
def test_engines_agree_with_one_queue_on_real_graphs(settings: dict[str, Any]) -> None:
    job = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 2, "global_batch": 64,
                       "device_connections": "1", **settings})
    p = build_priced(job)
    assert p.graph.single_queue
    a = run_engine(job, p.graph, p.costs, p.coster, "simpy").run(detail="task")
    b = run_engine(job, p.graph, p.costs, p.coster, "list").run(detail="task")
    step = float(np.nanmax(a.end_s))
    assert np.abs(a.start_s - b.start_s).max() <= 1e-9 * step
    assert np.abs(a.end_s - b.end_s).max() <= 1e-9 * step


def test_one_queue_exposes_the_bucket_collectives_of_a_real_step() -> None:
    # gpt3-1.7b, TP 2, PP 2, DP 4 on two Hopper nodes: auto is one queue (Megatron's assert) and the
    # step is slower than with independent streams
    plans = {dc: ParallelPlan(tp=2, pp=2, dp=4, global_batch=16, zero=1, device_connections=dc) for dc in ("auto", "many")}
    steps = {dc: simulate(Job(model=get_model("gpt3-1.7b"), plan=plan, cluster=get_cluster("dgx-h100", nodes=2)))
             .metrics.step_time_s for dc, plan in plans.items()}
    assert steps["auto"] > steps["many"] * 1.002
