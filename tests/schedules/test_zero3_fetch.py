"""DeepSpeed ZeRO-3 module fetches against the coordinator's documented rules
(deepspeed/runtime/zero/partitioned_param_coordinator.py @v0.6.2, defaults from constants.py):
prefetch only while the live parameters are under stage3_max_live_parameters, release unless
reused within stage3_max_reuse_distance, and the compute stream waits for what was not prefetched."""

from __future__ import annotations

import pytest

from schedules.builder import BuildOptions, build_task_graph
from schedules.model import ModelSpec
from schedules.passes.zero3_fetch import layer_modules, module_fetches
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.job import resolve_job
from sim.simulate import simulate


def _gpt(hidden: int) -> ModelSpec:
    return ModelSpec(num_layers=4, hidden_size=hidden, num_heads=32, vocab_size=50257, seq_len=1024)


def _plan(**extra) -> ParallelPlan:
    return ParallelPlan(dp=8, global_batch=8, zero=3, zero3_unit="module", recompute="full", **extra)


def _names(fetches) -> list[tuple[str, bool]]:
    return [(f.name, f.prefetched) for f in fetches]


def test_defaults_are_deepspeeds():
    p = ParallelPlan()
    assert (p.zero3_max_live_params, p.zero3_max_reuse_distance, p.zero3_prefetch_bucket_params) == (1e9, 1e9, 5e7)


def test_gpt3_175b_prefetches_every_module_and_regathers_what_the_recompute_released():
    # h = 12288: qkv 453M, proj 151M, fc1 = fc2 604M elements, all under the 1e9 live limit, so each
    # fetch prefetches the next weight. After the recomputation fc2 is used again at once (kept);
    # fc1's next use lies beyond fc2 twice (1.2e9 > 1e9 reuse distance): released, as proj and qkv
    fetches = module_fetches(_gpt(12288), _plan(), "F")
    assert _names(fetches) == [("qkv", True), ("proj", True), ("fc1", True), ("fc2", True)]
    back = module_fetches(_gpt(12288), _plan(), "B")
    assert [f.name for f in back] == ["qkv.recompute", "proj.recompute", "fc1.recompute", "fc2.recompute",
                                      "fc1", "proj", "qkv"]
    assert all(f.prefetched for f in back)


def test_a_reuse_distance_spanning_the_layer_keeps_every_recomputed_weight():
    # 2 x (proj + fc1 + fc2) = 2.7e9 <= 3e9: qkv's backward use is within reach, nothing is gathered again
    back = module_fetches(_gpt(12288), _plan(zero3_max_reuse_distance=3e9), "B")
    assert [f.name for f in back] == ["qkv.recompute", "proj.recompute", "fc1.recompute", "fc2.recompute"]


def test_weights_over_the_live_limit_are_never_prefetched():
    # h = 32768 (the 2T GPT): every weight is >= 1.07e9 elements, over the 1e9 live limit by itself
    assert not any(f.prefetched for phase in ("F", "B") for f in module_fetches(_gpt(32768), _plan(), phase))
    # h = 20480: only proj (4.2e8) leaves room, so only fc1 comes prefetched in the forward
    assert _names(module_fetches(_gpt(20480), _plan(), "F")) == [
        ("qkv", False), ("proj", False), ("fc1", True), ("fc2", False)]


def test_small_weights_prefetch_up_to_the_bucket():
    # h = 1024: 1-4M-element weights under a 5e7 bucket: a fetch prefetches several modules ahead
    assert all(f.prefetched for f in module_fetches(_gpt(1024), _plan(), "F"))
    # a zero bucket turns prefetching off: every fetch waits
    assert not any(f.prefetched for f in module_fetches(_gpt(1024), _plan(zero3_prefetch_bucket_params=0), "F"))


def test_bad_limits_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^zero3_max_live_params=-1 is invalid: expected a number in \[0, "):
        _plan(zero3_max_live_params=-1)


H, LAYERS = 2048, 4  # qkv 12.6M, proj 4.2M, fc1 = fc2 16.8M elements


def _job(**extra):
    return resolve_job({"layers": LAYERS, "hidden": H, "heads": 16, "vocab": 1000, "seq_len": 512,
                        "cluster": "dgx-a100", "nodes": 4, "tp": 1, "pp": 1, "dp": 32, "global_batch": 32,
                        "zero": 3, "zero3_unit": "module", "recompute": "full", "flash_attention": False, **extra})


def _gathers(job) -> list:
    """Rank 0's first-step layer all-gather tasks."""
    plan = job.plan
    graph = build_task_graph(job.model, plan, build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp),
                             lambda tp, cp, dp, pp: dp, BuildOptions(folded=True))
    return [t for t in graph.tasks if t.rank == 0 and t.step == 0 and t.lane == "comm.dp"
            and t.kind == "all_gather" and t.name.endswith("_ag")]  # not the embedding's and head's


def test_every_fetch_is_a_gather_and_the_unprefetched_ones_start_after_the_block_before():
    tight = _job(zero3_max_live_params=1.5e7)  # room after proj and qkv only
    expected = {phase: module_fetches(tight.model, tight.plan, phase) for phase in ("F", "B")}
    assert {f.prefetched for fs in expected.values() for f in fs} == {True, False}
    gathers = _gathers(tight)
    assert len(gathers) == LAYERS * sum(len(fs) for fs in expected.values())
    result = simulate(tight)
    spans = result.timeline.spans
    s0 = spans[(spans["rank"] == 0) & (spans["step"] == spans["step"].min())]
    compute = s0[s0["lane"] == "compute"].sort_values("start_s")
    waiting = s0[(s0["lane"] == "comm.dp") & s0["name"].astype(str).str.contains(r"\.qkv_ag$")]
    assert len(waiting)  # qkv (12.6M) is never prefetched: fc2 before it leaves no room under 1.5e7
    waiting = waiting[waiting["start_s"] > compute["start_s"].min()]  # the step's first has no block before it
    assert len(waiting)
    for _, g in waiting.iterrows():  # it starts only once an earlier compute block has ended
        before = compute[compute["end_s"] <= g["start_s"] + 1e-12]
        assert len(before) and not ((compute["start_s"] < g["start_s"]) & (compute["end_s"] > g["start_s"] + 1e-12)).any()


def test_waiting_for_gathers_never_speeds_a_step_up():
    steps = [simulate(_job(zero3_max_live_params=live)).metrics.step_time_s for live in (0, 1.5e7, 1e9)]
    assert steps[0] >= steps[1] >= steps[2]
    assert steps[0] > steps[2]  # the gathers are long enough here to show
    assert max(p for _, p in layer_modules(_job().model, 1)) < 1e9


def test_a_pass_holds_at_most_the_weight_in_use_and_the_one_arriving():
    # release_sub_module frees a weight after its submodule: of a layer pass's gathers (7 in a
    # backward with recomputation) at most two are alive, beside one reduce-scatter's buffer
    # and the embedding's and head's gathers
    job = _job(zero3_max_live_params=0)
    result = simulate(job)
    model, plan = job.model, job.plan
    weights = [p for _, p in layer_modules(model, 1)]
    spans = result.timeline.spans
    largest_reduction = spans.loc[spans["kind"].astype(str) == "reduce_scatter", "bytes"].max()
    two_weights = plan.element_bytes * 2 * max(weights)
    bound = two_weights + largest_reduction + plan.element_bytes * 2 * (model.vocab_size + model.seq_len) * H
    held = max(mt.bytes["comm_buffers"].max() for mt in result.memory_timelines.values())
    assert held <= bound
    assert plan.element_bytes * sum(f.params for f in module_fetches(model, plan, "B")) > two_weights
