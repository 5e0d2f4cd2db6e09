"""GPT-OSS's YaRN RoPE, which Megatron-Core runs unfused under Megatron-Bridge
(schedules/moe_ops.py ``MoEShape.rope``): where the op sits, its bytes against the pass counts
read from rope_utils.py, and where it is absent."""

import dataclasses

import pytest

from schedules.builder import build_task_graph
from schedules.moe import MoESpec
from schedules.moe_kernels import ROPE_FREQ_PASSES, ROPE_PASSES
from schedules.moe_presets import get_moe_model
from schedules.moe_sizes import moe_shape
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan


def _ops(model, plan):
    schedule = build_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.vpp)
    graph = build_task_graph(model, plan, schedule, lambda tp, cp, dp, pp: pp)
    return [op for t in graph.tasks if t.rank == 0 for op in t.ops]


def test_the_rope_passes_restate_the_eager_kernels():
    # forward over q (or k): t*cos 2, -x2 1, cat 2, *sin 2, sum 3, cat with t_pass 2
    assert ROPE_PASSES[0] == 2 + 1 + 2 + 2 + 3 + 2
    # the fp32 frequencies, per tensor: cos and sin (read + write), mscale (read + write), casts
    assert ROPE_FREQ_PASSES == 2 * (2 + 2 + 1.5)


def test_gpt_oss_rope_bytes_follow_the_heads_on_the_rank():
    model = get_moe_model("gpt-oss-120b")
    assert model.moe.rope_scaling == "yarn"
    plan = ParallelPlan(tp=2, dp=4, ep=4, global_batch=8, sequence_parallel=True, microbatch_size=2)
    shape = moe_shape(model, plan, layer=0)
    tokens = 2 * 4096
    q_k = 2 * tokens * (64 / 2 + 8 / 2) * 64  # bf16, 32 query and 4 key heads of 64 on the rank
    freqs = 4 * tokens * 64
    (fwd,) = shape.rope("fwd", 0)
    (bwd,) = shape.rope("bwd", 0, backward=True)
    assert fwd.name == "L0.attn.rope" and bwd.name == "L0.attn.rope.dgrad"
    assert fwd.bytes == pytest.approx(ROPE_PASSES[0] * q_k + 2 * ROPE_FREQ_PASSES * freqs)
    assert bwd.bytes == pytest.approx(ROPE_PASSES[1] * q_k)


def test_the_rope_runs_after_the_qkv_and_its_gradient_before_the_qkv_gradient():
    model = get_moe_model("gpt-oss-120b")
    model = dataclasses.replace(model, num_layers=2, seq_len=512)
    ops = [op.name for op in _ops(model, ParallelPlan(dp=2, ep=2, global_batch=2))]
    for layer in (0, 1):
        forward = ops.index(f"L{layer}.attn.rope")
        assert ops[forward - 1] == f"L{layer}.qkv" and ops[forward + 1] == f"L{layer}.attn"
        backward = ops.index(f"L{layer}.attn.rope.dgrad")
        assert ops.index(f"L{layer}.attn.bwd") < backward < ops.index(f"L{layer}.qkv.dgrad")
    full = [op.name for op in _ops(model, ParallelPlan(dp=2, ep=2, global_batch=2, recompute="full"))]
    assert "L0.attn.rope.recompute" in full


def test_no_rope_op_for_plain_rope_other_runtimes_or_mla():
    plan = ParallelPlan(dp=2, ep=2, global_batch=2)
    gpt_oss = dataclasses.replace(get_moe_model("gpt-oss-120b"), num_layers=2, seq_len=512)
    plain = dataclasses.replace(gpt_oss, moe=dataclasses.replace(gpt_oss.moe, rope_scaling="none"))
    assert not any("rope" in op.name for op in _ops(plain, plan))
    torch = ParallelPlan(dp=2, ep=2, global_batch=2, framework="torch")
    assert not any("rope" in op.name for op in _ops(gpt_oss, torch))
    deepseek = get_moe_model("deepseek-v3")
    mla = dataclasses.replace(deepseek, moe=dataclasses.replace(deepseek.moe, rope_scaling="yarn"))
    assert moe_shape(mla, plan, layer=5).rope("fwd", 5) == ()
    with pytest.raises(ValueError, match="^moe.rope_scaling='ntk' is invalid: expected one of none, yarn$"):
        MoESpec(num_experts=8, top_k=2, expert_ffn_size=64, rope_scaling="ntk")
