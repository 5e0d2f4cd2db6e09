"""Activation memory under torchtitan's per-op SAC and torch's fp32 loss, against closed forms.

The closed forms follow the framework behaviour cited in schedules/memory.py: torchtitan
parallelize_llama.py @ 9dec370 ``_save_list`` / ``_custom_policy`` (save aten.mm outputs except
every second one, the SDPA kernel's outputs and TP reduce-scatters; the checkpoint keeps the block
input), and torchtitan train.py ``loss_fn`` (F.cross_entropy on ``.float()`` logits).
"""

from __future__ import annotations

import dataclasses

import pytest

from schedules.layer_ops import layer_shape, recompute_ops
from schedules.memory import (
    ActivationConfig,
    alternate_matmul_stored_bytes,
    block_matmul_output_bytes,
    head_activation_bytes,
    head_working_bytes,
    layer_activation_bytes,
    recompute_working_bytes,
)
from schedules.model import ModelSpec
from schedules.pipeline import build_schedule
from schedules.plan import ParallelPlan
from sim.memory import MemoryModel

# Llama 3.1 8B at the published torchtitan runs' shape: micro-batch 2, sequence 8192.
LLAMA8B = ModelSpec(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
                    ffn_kind="swiglu", vocab_size=128256, seq_len=8192, norm="rmsnorm", position_embedding="rope",
                    bias=False, dropout=False)
B = 2
S, H, KV, F, A, V = 8192, 4096, 1024, 14336, 32, 128256
TORCH_SAC = ActivationConfig(recompute="selective", selective="alternate-matmul", framework="torch",
                             flash_attention=True)
GIB = 1024**3


def test_llama8b_block_stores_input_q_v_w1_w2_and_the_flash_outputs():
    sb = S * B
    # input 2sbh, q 2sbh, v 2sb·kv, w1 2sbf, w2's output 2sbh, SDPA output 2sbh, fp32 lse 4·a·sb
    want = 2 * sb * H + 2 * sb * H + 2 * sb * KV + 2 * sb * F + 2 * sb * H + 2 * sb * H + 4 * A * sb
    got = layer_activation_bytes(LLAMA8B, B, TORCH_SAC)
    assert got == pytest.approx(want, rel=1e-12)
    assert got / GIB == pytest.approx(0.970703125, abs=1e-9)  # 16384 x 63616 bytes
    # well under the Korthikanti set without recomputation (2.127 GiB at this shape)
    assert got < 0.5 * layer_activation_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, recompute="none"))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel_split(t):
    sb = S * B
    cfg = dataclasses.replace(TORCH_SAC, tp=t, sequence_parallel=True)
    # input sharded by SP; q, v, w1 column-parallel (/t); w2's output a full-width partial sum;
    # SDPA outputs on the rank's heads (/t); two reduce-scatter outputs (2sbh/t each)
    want = (2 * sb * H / t + 2 * sb * H / t + 2 * sb * KV / t + 2 * sb * F / t + 2 * sb * H
            + (2 * sb * H + 4 * A * sb) / t + 2 * 2 * sb * H / t)
    assert alternate_matmul_stored_bytes(LLAMA8B, B, cfg) == pytest.approx(want, rel=1e-12)
    # without SP the TP collective is an all-reduce (not in _save_list) and the input is replicated
    no_sp = dataclasses.replace(cfg, sequence_parallel=False)
    assert alternate_matmul_stored_bytes(LLAMA8B, B, no_sp) == pytest.approx(
        want - 2 * 2 * sb * H / t - 2 * sb * H / t + 2 * sb * H, rel=1e-12)


def test_fused_projections_gelu_and_unfused_attention():
    sb = S * B
    # Megatron's runtime fuses q/k/v and gate/up: matmuls qkv, proj, fc1, fc2 -> qkv and fc1 kept
    fused = dataclasses.replace(TORCH_SAC, framework="megatron")
    want = 2 * sb * H + 2 * sb * (H + 2 * KV) + 2 * sb * 2 * F + 2 * sb * H + 4 * A * sb
    assert layer_activation_bytes(LLAMA8B, B, fused) == pytest.approx(want, rel=1e-12)
    # GELU, q/k/v apart: q, k, v, proj, fc1, fc2 -> q, v, fc1 kept
    gelu = dataclasses.replace(LLAMA8B, ffn_kind="gelu")
    want = 2 * sb * H + 2 * sb * H + 2 * sb * KV + 2 * sb * F + 2 * sb * H + 4 * A * sb
    assert layer_activation_bytes(gelu, B, TORCH_SAC) == pytest.approx(want, rel=1e-12)
    # attention without a fused kernel runs bmm/softmax, which the policy does not save
    math = dataclasses.replace(TORCH_SAC, flash_attention=False)
    assert layer_activation_bytes(LLAMA8B, B, math) == pytest.approx(
        layer_activation_bytes(LLAMA8B, B, TORCH_SAC) - 2 * sb * H - 4 * A * sb, rel=1e-12)


@pytest.mark.parametrize("framework,tp", [("torch", 1), ("torch", 4), ("megatron", 2)])
def test_saved_matmuls_are_the_ones_the_compute_model_does_not_recompute(framework, tp):
    plan = ParallelPlan(tp=tp, dp=1, microbatch_size=B, global_batch=B, recompute="selective",
                        selective_recompute="alternate-matmul", framework=framework, sequence_parallel=tp > 1)
    shape = layer_shape(LLAMA8B, plan)
    matmuls = (*shape.qkv, shape.out, *shape.ffn.matmuls())
    cfg = dataclasses.replace(TORCH_SAC, tp=tp, framework=framework, sequence_parallel=tp > 1)
    outputs = block_matmul_output_bytes(LLAMA8B, B, cfg)
    assert outputs == pytest.approx(tuple(2 * mm.m * mm.n for mm in matmuls), rel=1e-3)  # whole-element rounding
    recomputed = {op.name.removesuffix(".recompute") for op in recompute_ops(plan, shape, 0) if op.op_class == "gemm"}
    assert recomputed == {f"L0.{mm.name}" for mm in matmuls[1::2]}


def test_recompute_working_set_is_the_full_set_less_the_stored_one():
    full = layer_activation_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, recompute="none"))
    stored = layer_activation_bytes(LLAMA8B, B, TORCH_SAC)
    assert recompute_working_bytes(LLAMA8B, B, TORCH_SAC) == pytest.approx(full - stored, rel=1e-12)
    assert recompute_working_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, recompute="full")) == pytest.approx(full)
    assert recompute_working_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, selective="attention")) == 0.0
    assert recompute_working_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, recompute="none")) == 0.0


def test_torch_loss_backward_holds_two_more_fp32_logit_tensors():
    sb = S * B
    assert head_working_bytes(LLAMA8B, B, TORCH_SAC) == pytest.approx(2 * 4 * sb * V, rel=1e-12)
    assert head_working_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, tp=4)) == pytest.approx(2 * sb * V)
    assert head_working_bytes(LLAMA8B, B, dataclasses.replace(TORCH_SAC, framework="megatron")) == 0.0
    # stored: final-norm input and log_softmax's fp32 output, 4·s·b·V; the backward peak is 3x that
    stored_logits = head_activation_bytes(LLAMA8B, B, TORCH_SAC) - 2 * sb * H
    assert stored_logits + head_working_bytes(LLAMA8B, B, TORCH_SAC) == pytest.approx(3 * 4 * sb * V)


def test_workspace_is_the_loss_working_set_on_the_last_stage_only():
    plan = ParallelPlan(pp=2, dp=1, microbatch_size=B, global_batch=4 * B, recompute="selective",
                        selective_recompute="alternate-matmul", framework="torch")
    memory = MemoryModel(LLAMA8B, plan, build_schedule("1f1b", 2, 4, 1))
    cfg = dataclasses.replace(TORCH_SAC)
    assert memory.workspace(0) == pytest.approx(recompute_working_bytes(LLAMA8B, B, cfg), rel=1e-12)
    assert memory.workspace(1) == pytest.approx(head_working_bytes(LLAMA8B, B, cfg), rel=1e-12)
    assert memory.buffers(1) - memory.buffers(0) == pytest.approx(memory.workspace(1) - memory.workspace(0))
