"""Failures that only slow a rank (issue 27): the straggler model's slowed step, the cost until the
rank is swapped, closed form against Monte Carlo, and no change when no class slows."""

import dataclasses

import pytest

from sim.job import DEFAULT_JOB, Job, resolve_job
from sim.run.failures import failure_draws
from sim.run.inputs import ClassRate, FailureClass
from sim.run.montecarlo import simulate_runs
from sim.run.plan_run import build_run_model
from sim.run.predict import run_samples
from sim.run.presets import get_reliability
from sim.run.slow_ranks import pace_factor, simulated_slow_steps
from sim.simulate import simulate
from topo.variability import slowest_gpu_factor

HOUR = 3600.0


def _job() -> Job:
    return resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 2, "tp": 2, "pp": 2, "global_batch": 16},
                       defaults=DEFAULT_JOB)


def _slowing(rate: float, slowdown: float = 1.5, detect_s: float = HOUR, repair_s: float = 0.0):
    slow = ClassRate(cls=FailureClass.NVLINK, per_1000_node_days=rate, kills_job=False, slowdown=slowdown,
                     detect_s=detect_s, repair_s=repair_s)
    base = get_reliability("meta-rsc1")
    return dataclasses.replace(base, classes=(*base.classes, slow))


@pytest.fixture(scope="module")
def job() -> Job:
    return _job()


def _compute_s(result) -> float:
    return float(result.metrics.per_rank["compute_s"].sum())


def test_slowed_step_comes_from_the_straggler_model(job):
    """Compute runs at the degraded GPU's pace: every compute second scales by the pace factor,
    communication does not, so the step grows by less than the bound step x factor."""
    base, factor = simulate(job), pace_factor(job, 1.5)
    pace = slowest_gpu_factor(job.cluster.device.speed_cv, job.plan.world_size)
    assert factor == pytest.approx(1.5 / pace)
    slowed = simulate(job, slow_pace=factor)
    assert _compute_s(slowed) == pytest.approx(factor * _compute_s(base), rel=1e-9)
    step, slow_step = base.metrics.step_time_s, slowed.metrics.step_time_s
    assert step < slow_step <= factor * step * (1 + 1e-9)
    assert simulated_slow_steps(job, _slowing(1.0)) == {1.5: pytest.approx(slow_step, rel=1e-12)}


def test_a_gpu_no_slower_than_the_jobs_slowest_costs_nothing(job):
    pace = slowest_gpu_factor(job.cluster.device.speed_cv, job.plan.world_size)
    assert pace_factor(job, pace) == 1.0 and pace_factor(job, 1.0) == 1.0


def test_cost_per_event_is_slowed_training_plus_the_swap(job):
    step, slowed = 10.0, 12.5
    model = build_run_model(job, _slowing(5.0, detect_s=HOUR), step_s=step, rank_bytes=1e9, tokens=1e12,
                            slowed_step_s={1.5: slowed})
    swap = model.checkpoint.blocking_s + model.costs.restart_s
    assert model.slow.slowed_s == pytest.approx(HOUR * (1 - step / slowed))
    assert model.slow.cost_s == pytest.approx(HOUR * (1 - step / slowed) + swap)
    assert model.slow.rate_s == pytest.approx(job.cluster.nodes * 5.0 / 1000 / 86400)
    plain = build_run_model(job, get_reliability("meta-rsc1"), step_s=step, rank_bytes=1e9, tokens=1e12)
    assert model.expected_wall_s == pytest.approx(plain.expected_wall_s / (1 - model.slow.share), rel=1e-12)
    assert sum(model.breakdown.shares().values()) == pytest.approx(1.0)
    assert model.breakdown.slow_rank == pytest.approx(model.slow.share)


def test_longer_detection_and_worse_slowdown_cost_more(job):
    def wall(**kw):
        return build_run_model(job, _slowing(5.0, **kw), step_s=10.0, rank_bytes=1e9, tokens=1e12).expected_wall_s
    assert wall(detect_s=HOUR) < wall(detect_s=4 * HOUR)
    assert wall(slowdown=1.2) < wall(slowdown=2.0)


def test_no_slowing_class_changes_nothing(job):
    plain = get_reliability("meta-rsc1")
    counted_only = _slowing(5.0, slowdown=1.0)
    a = build_run_model(job, plain, step_s=10.0, rank_bytes=1e9, tokens=1e12)
    b = build_run_model(job, counted_only, step_s=10.0, rank_bytes=1e9, tokens=1e12)
    assert a.breakdown == b.breakdown and b.slow.share == 0.0
    runs = simulate_runs(work_s=a.work_s, interval_s=a.interval_s, blocking_s=a.checkpoint.blocking_s,
                         rate_s=a.rate_s, draws=a.draws, samples=200, seed=0)
    assert run_samples(a, plain, 200).wall_s.tobytes() == runs.wall_s.tobytes()


@pytest.mark.slow  # 2,000 Monte Carlo runs of an 8,192-GPU job, ~10 s; the closed form's pieces stay quick above
def test_closed_form_and_monte_carlo_agree_with_slow_ranks():
    big = resolve_job({"model": "small", "cluster": "dgx-h100", "nodes": 1024, "tp": 8, "pp": 4,
                       "global_batch": 2048}, defaults=DEFAULT_JOB)
    inputs = _slowing(3.0, detect_s=2 * HOUR, repair_s=4 * HOUR)
    model = build_run_model(big, inputs, step_s=5.0, rank_bytes=1e9, tokens=2e13, slowed_step_s={1.5: 6.0})
    runs = run_samples(model, inputs, 1000)
    assert model.slow.share > 0.02  # the slowing failures matter here
    assert runs.wall_s.mean() == pytest.approx(model.expected_wall_s, rel=0.02)
    assert run_samples(model, inputs, 1000).wall_s.tobytes() == runs.wall_s.tobytes()


def test_swapped_nodes_count_against_spares():
    from sim.run.failures import wait_probability

    inputs = dataclasses.replace(_slowing(50.0, repair_s=24 * HOUR), spare_nodes=2)
    base = dataclasses.replace(get_reliability("meta-rsc1"), spare_nodes=2)
    assert wait_probability(inputs, 512) > wait_probability(base, 512)
    assert failure_draws(inputs, 512, 300.0, 0.0).wait_probability == wait_probability(inputs, 512)


def test_docs_slow_gpu_file_loads():
    from pathlib import Path

    from sim.run.reliability_file import load_reliability

    path = Path(__file__).resolve().parents[3] / "docs" / "reliability" / "llama3-slow-gpus.toml"
    (slow,) = load_reliability(path).slowing()
    assert slow.cls is FailureClass.NVLINK and slow.slowdown == 1.5 and slow.detect_s == HOUR


def test_energy_counts_slowed_training_busy_and_the_swap_idle(job):
    from sim.run.predict import predict_run

    result = simulate(job)
    for detect_s in (0.0, HOUR):
        run = predict_run(result, _slowing(5000.0, detect_s=detect_s), 1e10)
        b, wall, world, p = run.model.breakdown, run.model.expected_wall_s, job.plan.world_size, run.profile
        assert b.slow_rank > 0.01
        slowed = b.slow_rank * run.model.slow.slowed_s / run.model.slow.cost_s
        assert (slowed == 0.0) == (detect_s == 0.0)
        gpus_j = wall * world * ((b.productive + b.lost_work + slowed) * run.wave.mean_gpu_w()
                                 + b.checkpoint * p.comm_w + (b.restart + b.repair_wait + b.slow_rank - slowed) * p.idle_w)
        assert run.json["energy_gpus_mwh"] == pytest.approx(gpus_j / 3.6e9, rel=1e-6)
