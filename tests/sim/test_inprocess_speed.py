"""The fixed costs cut from a small simulation: numpy's BLAS on one thread in a `trainsim`
process (its thread pool was ~45 ms of CPU of every start), one collective model per cluster
per process (its routes and NCCL candidates reused by the next simulation on that cluster), a
job's pricer and a (model, plan)'s ops kept for the next simulation of them: the same results."""

from __future__ import annotations

import os

import numpy as np
import pytest

import sim.cli.main
from schedules.work import model_work
from sim.cli import entry
from sim.job import DEFAULT_JOB, resolve_job
from sim.simulate import SimulationResult, collective_model, job_coster, simulate


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_the_entry_point_runs_blas_on_one_thread_unless_told(monkeypatch: pytest.MonkeyPatch, given: str | None,
                                                              expected: str) -> None:
    monkeypatch.delenv(entry.BLAS_THREADS, raising=False)
    if given is not None:
        monkeypatch.setenv(entry.BLAS_THREADS, given)
    monkeypatch.setattr(sim.cli.main, "main", lambda: 0)
    assert entry.main() == 0
    assert os.environ[entry.BLAS_THREADS] == expected


def test_one_collective_model_per_cluster_and_the_same_simulation_twice() -> None:
    job = resolve_job({}, defaults=DEFAULT_JOB)  # trainsim simulate's default job
    cluster = job.cluster
    assert collective_model(cluster, False) is collective_model(cluster, False)
    assert collective_model(cluster, True) is not collective_model(cluster, False)
    collective_model.cache_clear()
    first = simulate(job)  # a new model: its caches empty
    again = simulate(job)  # the same model, its caches full
    assert first.metrics.step_time_s == again.metrics.step_time_s > 0
    for column in ("rank", "start_s", "end_s", "bytes"):
        assert np.array_equal(first.timeline.column(column), again.timeline.column(column))


def _same(a: SimulationResult, b: SimulationResult) -> bool:
    return a.metrics == b.metrics and all(np.array_equal(a.timeline.column(c), b.timeline.column(c))
                                          for c in ("rank", "start_s", "end_s", "bytes", "flops"))


def test_a_job_simulated_again_reuses_its_pricer_and_ops_and_gives_the_same_result() -> None:
    job = resolve_job({"pp": 2, "tp": 2, "microbatches": 8}, defaults=DEFAULT_JOB)
    other = resolve_job({"pp": 4, "tp": 1, "microbatches": 8}, defaults=DEFAULT_JOB)
    job_coster.cache_clear()
    model_work.cache_clear()
    first = simulate(job)
    assert job_coster.cache_info().currsize == 1 and model_work.cache_info().currsize >= 1
    simulate(other)
    again = simulate(job)
    assert job_coster.cache_info().hits >= 1 and model_work.cache_info().hits >= 1
    assert _same(first, again)


def test_a_slower_pace_is_not_compounded_by_a_kept_pricer() -> None:
    job = resolve_job({"microbatches": 4}, defaults=DEFAULT_JOB)
    slow = [simulate(job, slow_pace=1.5).metrics.step_time_s for _ in range(2)]
    assert slow[0] == slow[1] > simulate(job).metrics.step_time_s
