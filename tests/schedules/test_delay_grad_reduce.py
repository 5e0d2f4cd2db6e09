"""Megatron-Core delays the DP gradient reductions of every pipeline stage but the first to after
its last backward (r0.8.0 ``--no-delay-grad-reduce`` store_false, arguments.py l.1422-1424;
1F1B: "only enable async grad reduction in first pipeline stage. Other pipeline stages do grad
reduction during pipeline bubble", pipeline_parallel/schedules.py l.1483-1506)."""

from __future__ import annotations

from core.taskgraph import TaskGraph
from core.vocab import Kind, Lane
from schedules.frameworks import get_framework
from sim.job import resolve_job
from sim.simulate import build_priced

JOB = {"model": "gpt3-1.7b", "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 2, "zero": 1, "global_batch": 16}


def _reductions_after_last_backward(graph: TaskGraph) -> dict[int, bool]:
    """Per pipeline stage: does every gradient reduction wait for the stage's last compute block of the schedule?"""
    out = {}
    for pp, rank in enumerate(sorted({t.rank for t in graph.tasks})):
        blocks = [i for i, t in enumerate(graph.tasks) if t.rank == rank and t.lane == Lane.COMPUTE
                  and t.kind in (Kind.BWD, Kind.BWD_INPUT, Kind.BWD_WEIGHT)]
        reds = [i for i, t in enumerate(graph.tasks) if t.rank == rank and t.kind == Kind.REDUCE_SCATTER]
        assert reds
        out[pp] = all(blocks[-1] in graph.deps[i] for i in reds)
    return out


def test_stages_after_the_first_reduce_after_their_last_backward() -> None:
    graph = build_priced(resolve_job({**JOB, "delay_grad_reduce": True})).graph
    assert _reductions_after_last_backward(graph) == {0: False, 1: True}


def test_without_the_delay_every_stage_reduces_during_its_last_backward() -> None:
    graph = build_priced(resolve_job({**JOB, "delay_grad_reduce": False})).graph
    assert _reductions_after_last_backward(graph) == {0: False, 1: False}


def test_interleaved_schedules_keep_their_overlap() -> None:
    graph = build_priced(resolve_job({**JOB, "pp": 2, "schedule": "interleaved", "vpp": 2,
                                      "delay_grad_reduce": True})).graph
    assert not any(_reductions_after_last_backward(graph).values())


def test_megatron_core_stacks_delay_and_others_do_not() -> None:
    assert get_framework("megatron-core").value("delay_grad_reduce")
    assert get_framework("nemo").value("delay_grad_reduce")
    assert not get_framework("deepspeed").value("delay_grad_reduce")
