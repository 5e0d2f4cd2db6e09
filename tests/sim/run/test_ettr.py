"""Closed form vs Monte Carlo, determinism, MTTI scaling and the optimum interval (issue 27)."""

import math

import pytest

from sim.run.ettr import FailureCosts, ettr, ettr_breakdown
from sim.run.failures import expected_costs, failure_draws, poisson_at_least
from sim.run.interval import daly_s, numerical_optimum_s, young_s
from sim.run.montecarlo import simulate_runs
from sim.run.presets import get_reliability

DAY = 86400.0


def _closed_and_mc(nodes: int, seed: int = 0):
    inputs = get_reliability("meta-rsc1")
    rate = inputs.interrupt_rate_s(nodes)
    draws = failure_draws(inputs, nodes, restart_s=600.0, extra_loss_s=0.0)
    costs = expected_costs(draws)
    interval = numerical_optimum_s(rate, 30.0, costs)
    work = 50 * DAY
    b = ettr_breakdown(rate, interval, 30.0, costs)
    runs = simulate_runs(work_s=work, interval_s=interval, blocking_s=30.0, rate_s=rate, draws=draws,
                         samples=1000, seed=seed)
    return work / b.productive, b.interruptions_per_s * work / b.productive, runs


@pytest.mark.parametrize("gpus", [8192, 16384])
def test_closed_form_matches_monte_carlo_within_5_percent(gpus):
    wall, interruptions, runs = _closed_and_mc(gpus // 8)
    assert runs.wall_s.mean() == pytest.approx(wall, rel=0.05)
    assert runs.failures.mean() == pytest.approx(interruptions, rel=0.05)
    assert runs.failures.mean() > 100  # the test means something: many failures per run


def test_same_seed_same_numbers_other_seed_others():
    a, b, c = _closed_and_mc(1024, 7)[2], _closed_and_mc(1024, 7)[2], _closed_and_mc(1024, 8)[2]
    assert a.wall_s.tobytes() == b.wall_s.tobytes()
    assert a.wall_s.tobytes() != c.wall_s.tobytes()


def test_mtti_scales_exactly_as_one_over_nodes():
    inputs = get_reliability("llama3-405b")
    base = inputs.interrupt_rate_s(1)
    for nodes in (2, 128, 2048, 12500):
        assert inputs.interrupt_rate_s(nodes) == pytest.approx(nodes * base, rel=1e-12)


@pytest.mark.parametrize("blocking_s,mtbf_h", [(10.0, 10.0), (5.0, 3.0), (60.0, 24.0)])
def test_numerical_optimum_near_young_and_daly_when_checkpoint_is_cheap(blocking_s, mtbf_h):
    mtbf = mtbf_h * 3600
    best = numerical_optimum_s(1 / mtbf, blocking_s, FailureCosts(restart_s=300.0))
    assert best == pytest.approx(young_s(blocking_s, mtbf), rel=0.10)
    assert best == pytest.approx(daly_s(blocking_s, mtbf), rel=0.10)


def test_numerical_optimum_beats_its_neighbours():
    rate, costs = 1 / 7200, FailureCosts(restart_s=300.0)
    best = numerical_optimum_s(rate, 20.0, costs)
    assert ettr(rate, best, 20.0, costs) >= max(ettr(rate, best * f, 20.0, costs) for f in (0.8, 1.25))


def test_breakdown_sums_to_one_and_no_failures_means_only_checkpoints():
    b = ettr_breakdown(1 / 3600, 600.0, 10.0, FailureCosts(restart_s=120.0, repair_wait_s=60.0, extra_loss_s=5.0))
    assert sum(b.shares().values()) == pytest.approx(1.0)
    assert b.repair_wait > 0 and b.restart > b.repair_wait
    clean = ettr_breakdown(0.0, 600.0, 10.0, FailureCosts(restart_s=120.0))
    assert clean.productive == pytest.approx(600 / 610) and clean.interruptions_per_s == 0


def test_spares_cut_the_repair_wait():
    assert poisson_at_least(2.0, 0) == 1.0
    assert poisson_at_least(2.0, 1) == pytest.approx(1 - math.exp(-2))
    assert poisson_at_least(2.0, 10) < 1e-4
