"""The list engine computes the SimPy engine's schedule: every task's start and end agree to
1e-9 (relative to the step) on jobs covering every schedule family, ZeRO stage, framework,
offload, folded and full graphs, rendezvous collectives and shared network channels."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from core.taskgraph import Op, Task, TaskGraph
from core.vocab import Kind, Lane, OpClass
from sim.costing import cost_fixed
from sim.engine import Engine
from sim.job import resolve_job
from sim.list_engine import ListEngine
from sim.simulate import build_priced, engine_name, run_engine, simulate

SMALL = {"model": "small", "cluster": "dgx-h100", "nodes": 2, "global_batch": 64}
CASES: list[dict[str, Any]] = [
    dict(SMALL, tp=2, pp=2),
    dict(SMALL, tp=1, pp=4, schedule="interleaved", vpp=2, zero=1),
    dict(SMALL, tp=2, pp=2, schedule="zb-h1", zero=2),
    dict(SMALL, tp=1, pp=2, schedule="zbv", vpp=2, zero=3),
    dict(SMALL, tp=1, pp=2, schedule="dualpipev", vpp=2, zero=1, overlap_param_gather=False),
    dict(SMALL, tp=2, pp=2, schedule="gpipe", zero=0, overlap_grad_reduce=False),
    dict(SMALL, tp=1, pp=2, zero=3, offload="params", offload_device="nvme"),
    dict(SMALL, tp=1, pp=2, zero=1, offload="optimizer", offload_activations=True),
    dict(SMALL, tp=2, pp=2, framework="torch", zero=3),
    dict(SMALL, tp=1, pp=2, framework="torch", zero=1, schedule="interleaved", vpp=2),
    dict(SMALL, tp=1, pp=2, framework="torch", zero=2, offload="optimizer"),
    dict(SMALL, tp=2, pp=2, cp=2, nodes=4, zero=1, sequence_parallel=True, steps=2),
    {"model": "llama3-8b", "cluster": "aws-p4d", "nodes": 4, "tp": 8, "pp": 2, "global_batch": 32, "zero": 1},
]


def _both(settings: dict[str, Any], full: bool) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    job = dataclasses.replace(resolve_job(settings), folded=not full)
    p = build_priced(job)
    a = run_engine(job, p.graph, p.costs, p.coster, "simpy").run(detail="task")
    b = run_engine(job, p.graph, p.costs, p.coster, "list").run(detail="task")
    return p.graph, a.start_s, a.end_s, b.start_s, b.end_s


@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)])  # every rank: full suite only
@pytest.mark.parametrize("case", range(len(CASES)))
def test_list_engine_times_every_task_as_simpy_does(case: int, full: bool) -> None:
    settings = CASES[case]
    if full and settings["nodes"] > 2 and settings.get("cp", 1) > 1:
        pytest.skip("covered folded; the full graph is large")
    _, s0, e0, s1, e1 = _both(settings, full)
    step = float(np.nanmax(e0))
    assert np.abs(s0 - s1).max() <= 1e-9 * step
    assert np.abs(e0 - e1).max() <= 1e-9 * step


def test_shared_channel_splits_bandwidth_between_streams() -> None:
    # two transfers of different streams on one node's channel, 1 s alone each, start together:
    # both progress at 1/2 and end at 2 s; a same-stream pair does not slow down (both 1 s)
    lanes = (Lane.DP, Lane.PP, Lane.DP)
    g = TaskGraph.of([Task(rank=1 if i == 2 else 0, lane=lane, kind=Kind.SEND, name=lane,
                           ops=(Op(lane, Kind.SEND, lane, OpClass.FIXED, duration_s=1.0),), ordered=False)
                      for i, lane in enumerate(lanes)], [()] * 3)
    costs = [dataclasses.replace(c, crosses_nodes=True) for c in cost_fixed(g)]
    for engine in (Engine(g, costs, gpus_per_node=8), ListEngine(g, costs, gpus_per_node=8)):
        end = engine.run().end_s
        assert end.tolist() == pytest.approx([2.0, 2.0, 2.0])


def test_simpy_runs_what_only_it_models() -> None:
    assert engine_name(resolve_job(dict(SMALL, tp=2, pp=2))) == "list"
    assert engine_name(resolve_job(dict(SMALL, tp=2, pp=2, jitter_cv=0.01))) == "simpy"
    assert engine_name(resolve_job(dict(SMALL, tp=2, pp=2, fidelity="flow"))) == "simpy"
    assert engine_name(resolve_job({"model": "tiny", "cluster": "cpu-host", "tp": 2, "global_batch": 2})) == "simpy"
    with pytest.raises(ValueError, match="engine='list' is invalid"):
        engine_name(resolve_job(dict(SMALL, tp=2, pp=2, jitter_cv=0.01)), "list")


def test_simulate_reports_the_same_metrics_with_either_engine() -> None:
    job = resolve_job(dict(SMALL, tp=2, pp=2, zero=1))
    a, b = simulate(job, engine="simpy").metrics, simulate(job, engine="list").metrics
    for field in ("step_time_s", "bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9, abs=1e-12)
