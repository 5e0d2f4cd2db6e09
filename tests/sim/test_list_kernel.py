"""The compiled list-engine kernel (sim.list_kernel, numba) times every task as the reference
pass (sim.list_engine) does: starts and ends to 1e-9 of the step (they agree bit for bit), and
a simulation run on it has the same step time and span table. Fast: the list engine's cases
(every schedule family, ZeRO stage, framework, offload, shared network channels, folded and
full); slow: the bench's published configurations and a seeded sample of 200 random plans."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest

from core.taskgraph import TaskGraph
from sim.costing import CostedTask
from sim.job import resolve_job
from sim.list_engine import compile_graph, run_times
from sim.list_passes import program_of
from sim.simulate import build_priced, simulate

pytest.importorskip("numba")
from sim.list_kernel import run_compiled  # noqa: E402  (after the skip: numba is optional)
from tests.sim.plan_sample import random_plan as _random_plan  # noqa: E402
from tests.sim.test_list_engine import CASES  # noqa: E402

BENCH = [  # bench/simulate_speed.py's folded published configurations (Narayanan et al. 2021, Table 1)
    {"model": "gpt3-175b", "cluster": "dgx-a100", "nodes": 128, "tp": 8, "pp": 8, "dp": 16, "global_batch": 1536,
     "sequence_parallel": True},
    {"model": "gpt3-530b", "cluster": "dgx-a100", "nodes": 280, "tp": 8, "pp": 35, "dp": 8, "schedule": "interleaved",
     "vpp": 3, "global_batch": 8960, "sequence_parallel": True},
    {"model": "gpt3-1t", "cluster": "dgx-a100", "nodes": 384, "tp": 8, "pp": 64, "dp": 6, "global_batch": 3072,
     "sequence_parallel": True},
]


def _assert_same_times(graph: TaskGraph, costs: list[CostedTask], gpus_per_node: int) -> None:
    dur = [c.duration_s for c in costs]
    crosses = [c.crosses_nodes for c in costs]
    s0, e0 = run_times(compile_graph(graph), dur, crosses, gpus_per_node)
    s1, e1 = run_compiled(program_of(graph), np.array(dur), np.array(crosses), gpus_per_node)
    step = float(np.nanmax(e0))
    assert not np.isnan(e1).any()
    assert np.abs(s0 - s1).max() <= 1e-9 * step
    assert np.abs(e0 - e1).max() <= 1e-9 * step


def _check_job(settings: dict[str, Any], full: bool = False) -> None:
    job = dataclasses.replace(resolve_job(settings), folded=not full)
    p = build_priced(job)
    _assert_same_times(p.graph, p.costs, job.cluster.gpus_per_node)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("case", [0, 2, 4, 8, 11])
def test_kernel_times_every_task_as_the_reference_pass(case: int, full: bool) -> None:
    if full and CASES[case]["nodes"] > 2:
        pytest.skip("covered folded; the full graph is large")
    _check_job(CASES[case], full)


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernel_on_every_list_engine_case(case: int) -> None:
    _check_job(CASES[case], full=CASES[case]["nodes"] <= 2)


def test_simulation_on_the_kernel_has_the_same_span_table(monkeypatch: pytest.MonkeyPatch) -> None:
    job = resolve_job(dict(CASES[11], steps=1))
    monkeypatch.setenv("TRAINSIM_KERNEL", "0")
    ref = simulate(job)
    monkeypatch.setenv("TRAINSIM_KERNEL", "1")
    import sim.list_kernel

    calls = []
    monkeypatch.setattr(sim.list_kernel, "run_compiled", lambda *a: calls.append(1) or run_compiled(*a))
    fast = simulate(job)
    assert calls  # the kernel ran the pass
    assert fast.metrics.step_time_s == ref.metrics.step_time_s
    assert fast.timeline.spans.equals(ref.timeline.spans)


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(BENCH)))
def test_kernel_on_the_published_bench_cases(case: int) -> None:
    _check_job(dict(BENCH[case], microbatch_size=1))


@pytest.mark.slow
def test_kernel_on_a_seeded_sample_of_200_plans() -> None:
    rng, checked = random.Random(29), 0
    while checked < 200:
        settings = _random_plan(rng)
        try:
            job = resolve_job(settings)
        except ValueError:
            continue
        p = build_priced(job)
        _assert_same_times(p.graph, p.costs, job.cluster.gpus_per_node)
        checked += 1
