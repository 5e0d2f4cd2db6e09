"""MoE layer work in the built task graph: all-to-all volume, expert GEMMs by routing load,
capacity cap, and the plan's expert-parallel errors."""

import dataclasses

import pytest

from core.vocab import Lane
from schedules.builder import build_task_graph
from schedules.flops import moe_ffn_flops
from schedules.model import ModelSpec
from schedules.model_presets import get_model
from schedules.moe import MoESpec, all_to_all_bytes_per_token
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan, check_plan
from sim.job import resolve_job
from sim.simulate import simulate


def _tiny_moe(**moe):
    spec = dict(num_experts=8, top_k=2, expert_ffn_size=128)
    spec.update(moe)
    return ModelSpec(name="tiny-moe", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2,
                     ffn_hidden_size=176, ffn_kind="swiglu", vocab_size=256, seq_len=32, norm="rmsnorm",
                     position_embedding="rope", bias=False, dropout=False, moe=MoESpec(**spec))


def _graph(model, plan):
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    return build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)


def _ops(graph, pred):
    return [op for t in graph.tasks for op in t.ops if pred(op)]


@pytest.mark.parametrize("ep", [2, 4, 8])
def test_all_to_all_bytes_per_token_match_the_closed_form(ep):
    model = _tiny_moe()
    plan = ParallelPlan(dp=8, ep=ep, global_batch=8)
    graph = _graph(model, plan)
    a2a = _ops(graph, lambda op: op.lane == Lane.EP and op.op_class == "all_to_all")
    tokens = plan.microbatch_size * model.seq_len
    # 4 layers x (dispatch + combine) forward and the same two backward
    assert len(a2a) == 4 * 4
    for op in a2a:
        crossing = op.bytes * (ep - 1) / ep  # the all-to-all model: (n-1)/n of a send buffer leaves
        assert crossing / tokens == pytest.approx(
            all_to_all_bytes_per_token(model.moe, hidden_size=64, ep=ep, bytes_per_element=2))
        assert crossing / tokens == pytest.approx(2 * 64 * 2 * (ep - 1) / ep)
        assert str(op.dim) == f"ep:{ep}:1"


def test_no_all_to_all_without_expert_parallelism():
    graph = _graph(_tiny_moe(), ParallelPlan(dp=2, global_batch=2))
    assert not _ops(graph, lambda op: op.lane == Lane.EP)


def _expert_flops(model, plan):
    graph = _graph(model, plan)
    return sum(op.flops for op in _ops(graph, lambda op: ".experts.fc" in op.name and op.kind == "fwd"))


def test_even_routing_gives_every_rank_its_share_of_the_expert_work():
    model = _tiny_moe()
    for ep in (1, 2, 4):
        plan = ParallelPlan(dp=4, ep=ep, global_batch=4)
        per_rank = _expert_flops(model, plan)
        total = moe_ffn_flops(model, model.seq_len).routed_experts * 4  # 4 MoE layers, one micro-batch
        # the ep ranks hold ep micro-batches' tokens; each rank's E/ep experts get their even share
        # (T·top_k copies), so a rank computes one micro-batch's routed FLOPs whatever ep
        assert per_rank == pytest.approx(total)


def test_imbalance_one_is_identical_to_no_imbalance_and_more_is_more_work():
    model = _tiny_moe()
    base = _expert_flops(model, ParallelPlan(dp=4, ep=4, global_batch=4))
    assert _expert_flops(model, ParallelPlan(dp=4, ep=4, global_batch=4, moe_imbalance=1.0)) == base
    flops = [_expert_flops(model, ParallelPlan(dp=4, ep=4, global_batch=4, moe_imbalance=x))
             for x in (1.0, 1.5, 2.0, 4.0, 8.0)]
    assert flops == sorted(flops) and flops[-1] == flops[-2]  # capped at ep
    assert flops[2] == pytest.approx(2 * base)


def test_capacity_factor_caps_the_most_loaded_rank():
    capped = _tiny_moe(capacity_factor=1.25)
    free = _tiny_moe()
    plan = ParallelPlan(dp=4, ep=4, global_batch=4, moe_imbalance=3.0)
    assert _expert_flops(capped, plan) == pytest.approx(_expert_flops(free, plan) * 1.25 / 3.0)


def _step_s(imbalance, ep=8):
    job = resolve_job(dict(model="qwen3-235b-a22b", cluster="dgx-h100", nodes=2, pp=2, dp=8, global_batch=32,
                           recompute="full", zero=1))
    job = dataclasses.replace(job, plan=dataclasses.replace(job.plan, ep=ep, moe_imbalance=imbalance))
    return simulate(job).metrics.step_time_s


@pytest.mark.slow
def test_more_imbalance_never_speeds_a_step_up():
    times = [_step_s(x) for x in (1.0, 1.3, 2.0, 8.0)]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))
    assert times[2] > times[0]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"dp": 4, "ep": 3, "global_batch": 4}, "ep"),            # ep must divide dp
    ({"dp": 16, "ep": 16, "global_batch": 16}, "ep"),         # 16 does not divide 8 experts
    ({"tp": 2, "etp": 4}, "etp"),                              # etp must divide tp
    ({"tp": 2}, "sequence_parallel"),                          # MoE + TP needs SP
    ({"moe_imbalance": 0.9}, "moe_imbalance"),
    ({"moe_overlap": "maybe"}, "moe_overlap"),
])
def test_plan_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}=") as err:
        check_plan(_tiny_moe(), ParallelPlan(**kwargs))
    assert "\n" not in str(err.value)


def test_expert_parallelism_on_a_dense_model_is_an_error():
    with pytest.raises(ValueError, match="^ep=2 is invalid: model 'llama3-8b' is dense"):
        check_plan(get_model("llama3-8b"), ParallelPlan(dp=2, ep=2, global_batch=2))


def test_eager_expert_bias_and_clamp_passes_follow_megatron_core():
    """Megatron-Core's TEGroupedMLP adds the fc2 bias per expert in eager PyTorch (t + b * p, then
    torch.cat: 6 passes over the fc2 output forward, 8 backward) and clamps the fc1 output's halves
    eagerly before its fused activation (4 forward, 5 backward over the fc1 output); a model with
    neither has no such op."""
    from schedules.moe_kernels import CLAMP_PASSES, FC2_BIAS_PASSES

    assert (FC2_BIAS_PASSES, CLAMP_PASSES) == ((6.0, 8.0), (4.0, 5.0))
    model = _tiny_moe(expert_bias=True, activation_clamp=7.0)
    plan = ParallelPlan(dp=2, ep=2, global_batch=2)
    graph = _graph(model, plan)
    rows = plan.microbatch_size * model.seq_len * 2  # T x top_k, even routing
    up_f = 2 * 128  # SwiGLU fc1 output
    expected = {"experts.fc2_bias": 6 * 2 * rows * 64, "experts.fc2_bias.dgrad": 8 * 2 * rows * 64,
                "experts.act_clamp": 4 * 2 * rows * up_f, "experts.act_clamp.dgrad": 5 * 2 * rows * up_f}
    for name, nbytes in expected.items():
        ops = _ops(graph, lambda op, name=name: op.name == f"L1.{name}")
        assert ops and all(op.bytes == pytest.approx(nbytes) for op in ops), name
    plain = _graph(_tiny_moe(), plan)
    assert not _ops(plain, lambda op: "fc2_bias" in op.name or "act_clamp" in op.name)


def test_the_eager_epilogue_slows_a_step_and_the_gpt_oss_preset_clamps():
    from schedules.moe_presets import get_moe_model

    moe = get_moe_model("gpt-oss-120b").moe
    assert moe is not None and moe.activation_clamp == 7.0 and moe.expert_bias  # HF config swiglu_limit 7.0
    job = resolve_job(dict(model="gpt-oss-120b", cluster="dgx-h100", nodes=1, dp=8, ep=8, global_batch=8, zero=1))
    bare = dataclasses.replace(moe, activation_clamp=None, expert_bias=False)
    plain = dataclasses.replace(job, model=dataclasses.replace(job.model, moe=bare))
    assert simulate(job).metrics.step_time_s > simulate(plain).metrics.step_time_s


@pytest.mark.parametrize("value", [0, -1.0, True, "7"])
def test_a_bad_activation_clamp_is_refused(value):
    with pytest.raises(ValueError, match="^moe.activation_clamp=.* is invalid: expected a number > 0"):
        MoESpec(num_experts=8, top_k=2, expert_ffn_size=64, activation_clamp=value)


def test_megatron_sorts_received_tokens_by_local_expert_and_back():
    """Megatron-Core's all-to-all dispatcher re-orders the received rows by local expert after the
    dispatch and back before the combine (sort_chunks_by_idxs) when a rank holds more than one
    expert: a read and a write of the rows each way, forward and backward; not with DeepEP, one
    local expert or the torch runtime."""
    model = _tiny_moe()
    plan = ParallelPlan(dp=2, ep=2, global_batch=2)
    rows = plan.microbatch_size * model.seq_len * 2
    sorts = _ops(_graph(model, plan), lambda op: op.name.startswith("L1.experts.") and "sort" in op.name)
    assert sorted({op.name for op in sorts}) == ["L1.experts.sort", "L1.experts.sort.dgrad", "L1.experts.unsort",
                                                 "L1.experts.unsort.dgrad"]
    assert all(op.bytes == pytest.approx(2 * 2 * rows * 64) for op in sorts)
    for other in (dataclasses.replace(plan, moe_dispatcher="deepep"), dataclasses.replace(plan, ep=8, dp=8, global_batch=8),
                  dataclasses.replace(plan, framework="torch")):
        assert not _ops(_graph(model, other), lambda op: "sort" in op.name), other


def test_layernorm_moe_act_recompute_redoes_the_norm_and_activation_and_stores_less():
    """Megatron-Core --recompute-modules layernorm moe_act: the pre-MLP norm and the experts'
    activation (with its eager clamp) are recomputed at the start of an MoE layer's backward, a
    dense layer recomputes nothing; the activation's and the norm's outputs are not stored."""
    from schedules.memory import ActivationConfig
    from schedules.moe_memory import moe_layer_activation_bytes

    model = _tiny_moe(activation_clamp=7.0, first_dense_layers=1)
    plan = ParallelPlan(dp=2, ep=2, global_batch=2, recompute="selective", selective_recompute="layernorm-moe-act")
    graph = _graph(model, plan)
    names = {op.name for op in _ops(graph, lambda op: op.name.endswith(".recompute"))}
    assert {"L1.pre_mlp_norm.recompute", "L1.experts.act_clamp.recompute", "L1.experts.act.recompute"} <= names
    assert not any(name.startswith("L0.") for name in names)  # the dense first layer
    fwd_act = _ops(graph, lambda op: op.name == "L1.experts.act")[0]
    assert _ops(graph, lambda op: op.name == "L1.experts.act.recompute")[0].bytes == fwd_act.bytes
    attention = dataclasses.replace(plan, selective_recompute="attention")
    assert not _ops(_graph(model, attention), lambda op: op.name.endswith(".recompute"))
    cfg = ActivationConfig(recompute="selective", flash_attention=True)
    rows, h, ffn, tokens = 32 * 2, 64, 128, 32
    saved = moe_layer_activation_bytes(model, attention, 1, cfg) - moe_layer_activation_bytes(model, plan, 1, cfg)
    assert saved == pytest.approx(2 * rows * ffn + 2 * tokens * h)

