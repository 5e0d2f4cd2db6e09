"""Sends waited at the end of the step (torch's runtime pipeline schedules) no longer stop the
steady state: their end moves with what they hold on (sim/steady_holds.py), and the extended step
equals the full simulation span for span."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

import numpy as np
import pytest

from sim.job import resolve_job
from sim.simulate import build_priced, simulate, timed_costs
from sim.steady_holds import late_holds, period_ends
from sim.summary import summarize
from tests.sim.plan_sample import wide_plan
from tests.sim.test_steady_state import assert_same_step

SMALL = {"model": "small", "cluster": "dgx-h100", "nodes": 1, "tp": 2, "pp": 2, "global_batch": 64, "framework": "torch"}


@pytest.mark.parametrize(("schedule", "vpp"), [("interleaved", 2), ("zb-h1", 1), ("dualpipev", 2)])
def test_runtime_schedules_extend_and_equal_the_full_simulation(schedule: str, vpp: int) -> None:
    job = resolve_job(dict(SMALL, schedule=schedule, vpp=vpp))
    fast, full = simulate(job), simulate(dataclasses.replace(job, exact=True))
    assert fast.steady_state is not None, fast.steady_fallback
    assert fast.steady_state.simulated_microbatches < job.plan.num_microbatches
    assert_same_step(fast, full)


def test_late_holds_are_the_sends_waited_at_the_step_end() -> None:
    """In the full step of torch's interleaved 1F1B every pipeline send is held until the rank's
    last compute: each is marked, with that task, and the checks read its start for its end."""
    job = resolve_job(dict(SMALL, schedule="interleaved", vpp=2, exact=True))
    result = simulate(job)
    assert result.steady_state is None
    priced = build_priced(job)
    start, end, _ = timed_costs(job, priced, "list")
    graph = priced.graph
    target = late_holds(graph, end, job.plan.num_microbatches, job.plan.pp, 1e-9 * float(end.max() - start.min()))
    sends = np.array([t.kind == "send" for t in graph.tasks])
    assert (target[sends] >= 0).all() and (target[~sends] < 0).all()
    for i in np.flatnonzero(sends):
        held_on = graph.tasks[target[i]]
        assert held_on.lane == "compute" and held_on.rank == graph.tasks[i].rank and end[i] == end[target[i]]
    assert np.array_equal(period_ends(start, end, target), np.where(sends, start, end))


def _numbers(obj: object, path: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _numbers(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _numbers(value, f"{path}[{i}]")
    else:
        yield path, obj


@pytest.mark.slow
def test_seeded_sample_extends_to_the_exact_step() -> None:
    """40 seeded plans over every pipeline family on both runtimes (tests/sim/plan_sample.py
    ``wide_plan``): each --json figure of the default (extended) simulation equals --exact's to
    1e-7, and the runtime schedules that wait their sends at the step's end extend too."""
    extended_torch = 0
    for seed in range(40):
        try:
            job = resolve_job(wide_plan(random.Random(seed)))
        except ValueError:
            continue  # a drawn plan the simulator refuses (layers, batch or GPUs do not divide)
        fast, exact = summarize(simulate(job)), summarize(simulate(dataclasses.replace(job, exact=True)))
        want = dict(_numbers(exact))
        for path, value in _numbers(fast):
            if path.startswith((".simulation", ".error_band", ".fidelity")):
                continue
            if isinstance(value, float):
                assert value == pytest.approx(want[path], rel=1e-7, abs=1e-12), (seed, path)
            else:
                assert value == want[path], (seed, path)
        extended_torch += job.plan.framework == "torch" and fast["simulation"]["steady_state"]["copies"] > 0
    assert extended_torch >= 3
