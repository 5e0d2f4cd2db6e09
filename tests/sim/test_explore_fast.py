"""The fast evaluator against the engine: same step time and metrics where no transfers contend,
a lower bound where they do; the static memory estimate against the simulated peak."""

import pytest

from schedules.model import get_model
from schedules.pipeline import build_schedule, peak_inflight
from schedules.plan import ParallelPlan
from sim.explore.fast_eval import evaluate_plan
from sim.explore.memory_estimate import estimate_memory
from sim.explore.pricing import plan_prices
from sim.explore.reference import reference_step
from sim.job import Job
from sim.memory import MemoryModel
from sim.simulate import simulate
from topo import get_cluster

# (model, cluster, nodes, plan): every ZeRO stage, every schedule family, SP/recompute/CP, one and
# several nodes, a send between co-located V stages, uneven stages and non-overlapped gathers.
CASES = [
    ("small", "dgx-h100", 1, dict(tp=2, pp=2, dp=2, global_batch=16)),
    ("small", "dgx-h100", 2, dict(tp=2, pp=2, dp=4, global_batch=16, zero=1, schedule="zb-h1")),
    ("small", "dgx-h100", 2, dict(tp=2, pp=2, dp=4, global_batch=32, zero=3, schedule="interleaved", vpp=2,
                                  sequence_parallel=True)),
    ("small", "dgx-h100", 2, dict(tp=2, pp=2, dp=4, global_batch=32, zero=2, schedule="zbv", vpp=2,
                                  overlap_param_gather=False)),
    ("small", "aws-p4d", 2, dict(tp=1, pp=4, dp=4, global_batch=32, zero=1, schedule="gpipe", recompute="full")),
    ("small", "dgx-h100", 1, dict(tp=2, pp=4, dp=1, global_batch=8, schedule="interleaved-megatron", vpp=2)),
    ("small", "dgx-h100", 2, dict(tp=2, cp=2, pp=2, dp=2, global_batch=16, zero=1, sequence_parallel=True)),
    ("gpt3-3.6b", "dgx-h100", 2, dict(tp=2, pp=4, dp=2, global_batch=16, uneven_stages=True, zero=2)),
    ("llama3-8b", "dgx-h100", 4, dict(tp=4, pp=4, dp=2, global_batch=32, zero=1, schedule="zbv", vpp=2,
                                      sequence_parallel=True, recompute="full")),
    ("llama3-8b", "dgx-h100", 4, dict(tp=2, pp=4, dp=4, global_batch=32, zero=2, schedule="dualpipev", vpp=2,
                                      sequence_parallel=True)),
    ("llama3-8b", "aws-p5", 2, dict(tp=8, pp=1, dp=2, global_batch=16, zero=3, sequence_parallel=True)),
    ("gpt3-1.7b", "dgx-a100", 2, dict(tp=2, pp=2, dp=4, global_batch=64, zero=0, schedule="interleaved-zb", vpp=2)),
]


def _case(model, cluster, nodes, fields):
    m, c, plan = get_model(model), get_cluster(cluster, nodes=nodes), ParallelPlan(**fields)
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return m, c, plan, schedule


def _fast(m, c, plan, schedule):
    return evaluate_plan(plan, schedule, plan_prices(m, plan, schedule.split_backward, c), c.gpus_per_node)


@pytest.mark.parametrize(("model", "cluster", "nodes", "fields"), CASES)
def test_fast_equals_the_builders_graph_timed_the_same_way(model, cluster, nodes, fields):
    # The compact task list against the builder's own TaskGraph priced by sim.pricing: identical.
    m, c, plan, schedule = _case(model, cluster, nodes, fields)
    fast, ref = _fast(m, c, plan, schedule), reference_step(m, plan, schedule, c)
    assert fast.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)
    for key in ("bubble_fraction", "exposed_comm_fraction", "compute_fraction", "idle_fraction"):
        assert getattr(fast, key) == pytest.approx(getattr(ref, key), rel=1e-9, abs=1e-12)
    assert fast.contention == ref.contention


@pytest.mark.parametrize(("model", "cluster", "nodes", "fields"), CASES)
def test_fast_equals_the_engine_without_contention_and_bounds_it_below(model, cluster, nodes, fields):
    m, c, plan, schedule = _case(model, cluster, nodes, fields)
    fast = _fast(m, c, plan, schedule)
    engine = simulate(Job(model=m, plan=plan, cluster=c)).metrics
    if fast.contention:
        # The engine shares a node's network between a send and a DP transfer; durations only grow.
        assert engine.step_time_s >= fast.step_time_s * (1 - 1e-12)
        assert engine.step_time_s <= fast.step_time_s * 1.05
        return
    assert fast.step_time_s == pytest.approx(engine.step_time_s, rel=1e-9)
    assert fast.bubble_fraction == pytest.approx(engine.bubble_fraction, rel=1e-6, abs=1e-9)
    assert fast.exposed_comm_fraction == pytest.approx(engine.exposed_comm_fraction, rel=1e-6, abs=1e-9)


def test_contention_is_flagged_and_costs_the_engine_time():
    # 70B-class shape, shrunk: DP gradient reduce-scatters of the last micro-batch overlap
    # backward sends between nodes, and the engine slows both.
    m, c, plan, schedule = _case("llama3-8b", "aws-p5", 4, dict(tp=8, pp=2, dp=2, global_batch=32, zero=2,
                                                                sequence_parallel=True))
    fast = _fast(m, c, plan, schedule)
    engine = simulate(Job(model=m, plan=plan, cluster=c)).metrics
    assert fast.contention
    assert engine.step_time_s > fast.step_time_s


@pytest.mark.parametrize(("model", "cluster", "nodes", "fields"), CASES)
def test_memory_estimate_equals_the_simulated_peak(model, cluster, nodes, fields):
    m, c, plan, schedule = _case(model, cluster, nodes, fields)
    result = simulate(Job(model=m, plan=plan, cluster=c))
    est = estimate_memory(m, plan, schedule)
    assert est.peak.total == pytest.approx(result.memory[result.peak_rank].total, rel=1e-12)
    for rank, mem in result.memory.items():
        pp = result.timeline.meta["rank_pp"][rank]
        assert est.per_rank[pp].activations == pytest.approx(mem.activations, rel=1e-12)


def test_memory_estimate_is_peak_inflight_times_the_stage_activations_for_even_stages():
    m = get_model("small")
    for name, vpp in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        plan = ParallelPlan(tp=1, pp=4, dp=1, vpp=vpp, schedule=name, global_batch=8)
        schedule = build_schedule(name, 4, 8, vpp)
        model = MemoryModel(m, plan, schedule)
        middle = model.stage_activation_bytes(model.stages[1])  # no embedding or head
        est = estimate_memory(m, plan, schedule)
        assert est.per_rank[1].activations == pytest.approx(peak_inflight(schedule)[1] * middle)
