"""Graph templates shared between plans: plans of one micro-batch count share a graph whatever
their micro-batch size, and each prices it with its own work (same step as its own graph)."""

import dataclasses

import pytest

from schedules.model_presets import get_model
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.explore.fast_eval import evaluate_plan
from sim.explore.pricing import plan_prices
from sim.explore.template import TemplateCache, template_key
from topo import get_cluster

BASE = dict(tp=2, pp=4, dp=2, zero=1, sequence_parallel=True)
MICROBATCHES = 8


def _plans() -> list[ParallelPlan]:
    return [ParallelPlan(**BASE, microbatch_size=mbs, global_batch=MICROBATCHES * BASE["dp"] * mbs)
            for mbs in (1, 2, 4)]


def _step(model, cluster, plan, cache):
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return evaluate_plan(model, plan, lambda mb: build_schedule(plan.schedule, plan.pp, mb, plan.vpp),
                         plan_prices(model, plan, schedule.split_backward, cluster), cluster.gpus_per_node,
                         templates=cache)


def test_micro_batch_sizes_of_one_count_share_a_key_and_other_counts_do_not():
    model = get_model("llama3-8b")
    keys = {template_key(model, p) for p in _plans()}
    assert len(keys) == 1
    other = dataclasses.replace(_plans()[0], global_batch=2 * MICROBATCHES * BASE["dp"])
    assert template_key(model, other) not in keys


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
def test_a_shared_template_times_each_plan_as_its_own_graph(schedule):
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", nodes=2)
    vpp = 2 if schedule == "interleaved" else 1
    plans = [dataclasses.replace(p, schedule=schedule, vpp=vpp) for p in _plans()]
    shared = TemplateCache()
    steps = [_step(model, cluster, p, shared) for p in plans]
    own = [_step(model, cluster, p, TemplateCache()) for p in plans]
    assert steps == own
    assert len({s.step_time_s for s in steps}) == len(plans)  # the work differs: so do the steps


def test_sequence_parallelism_splits_templates_where_it_decides_the_scatter_gather():
    """With Megatron-LM's scatter/gather (blocking P2P, tp > 1) only the plan without sequence
    parallelism all-gathers each received message: the two plans need their own graphs (a
    shared one timed the second plan 1.42404 s against its own graph's 1.42537 s)."""
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", nodes=2)
    base = ParallelPlan(tp=2, pp=4, dp=2, zero=1, global_batch=16, pipeline_p2p="blocking",
                        pipeline_scatter_gather=True)
    with_sp, without = dataclasses.replace(base, sequence_parallel=True), base
    assert template_key(model, with_sp) != template_key(model, without)
    shared = TemplateCache()
    _step(model, cluster, with_sp, shared)
    assert _step(model, cluster, without, shared) == _step(model, cluster, without, TemplateCache())
    plain = dataclasses.replace(base, pipeline_scatter_gather=False)  # no scatter/gather: SP shares a graph
    assert template_key(model, plain) == template_key(model, dataclasses.replace(plain, sequence_parallel=True))
