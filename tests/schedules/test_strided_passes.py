"""Which element-wise ops carry strided bytes (``Op.strided_bytes``, :mod:`topo.strided_rate`).

Ground truth, per stack (the sources in schedules/elementwise.py ``STRIDED_PASSES`` and
schedules/moe_kernels.py): an eager RMSNorm multiplies a 16-bit [tokens, h] by its [h] weight
(torchtitan norms.py ``output * self.weight``), 2 passes forward and 2 backward; Megatron-Core's
eager YaRN RoPE multiplies by [s, 1, 1, d] tables and negates a ``torch.chunk`` half (5 of its 12
passes forward, 5 of 10 backward); its GPT-OSS clamp clamps the two chunk halves (2 of 4, 3 of 5).
Fused kernels and fp32 activations carry none.
"""

from __future__ import annotations

import pytest

from core.vocab import Kind
from schedules.layer_ops import layer_shape
from schedules.model_presets import get_model
from schedules.moe_kernels import (
    CLAMP_PASSES,
    CLAMP_STRIDED_PASSES,
    ROPE_PASSES,
    ROPE_STRIDED_PASSES,
)
from schedules.moe_presets import get_moe_model
from schedules.moe_sizes import moe_shape
from schedules.plan import ParallelPlan
from topo.compute import compute_time_s
from topo.device_presets import get_device


def test_eager_rmsnorm_weight_multiply_is_strided() -> None:
    model = get_model("llama3-8b")
    plan = ParallelPlan(framework="torch", global_batch=8)
    hidden = plan.element_bytes * plan.microbatch_size * model.seq_len * model.hidden_size
    shape = layer_shape(model, plan)
    assert shape.elementwise_strided_bytes == pytest.approx(2 * 2 * hidden)  # two norms x 2 passes
    assert shape.elementwise_bwd_strided_bytes == pytest.approx(2 * 2 * hidden)
    op = shape.elementwise_op(Kind.FWD, "L0.norm_res", 0)
    assert op.strided_bytes == pytest.approx(shape.elementwise_strided_bytes / 2)
    assert op.bytes == pytest.approx(shape.elementwise_bytes / 2)


@pytest.mark.parametrize("plan", [ParallelPlan(framework="megatron", global_batch=8),
                                  ParallelPlan(framework="torch", dtype="fp32", global_batch=8)],
                         ids=["fused", "fp32"])
def test_fused_kernels_and_fp32_carry_no_strided_bytes(plan: ParallelPlan) -> None:
    shape = layer_shape(get_model("llama3-8b"), plan)
    assert shape.elementwise_strided_bytes == 0 and shape.elementwise_bwd_strided_bytes == 0


def test_megatron_yarn_rope_and_clamp_are_partly_strided() -> None:
    model = get_moe_model("gpt-oss-120b")
    plan = ParallelPlan(framework="megatron", tp=2, dp=4, ep=4, global_batch=8, sequence_parallel=True)
    shape = moe_shape(model, plan, layer=0)
    (fwd,) = shape.rope(Kind.FWD, 0)
    (bwd,) = shape.rope(Kind.BWD_INPUT, 0, backward=True)
    assert fwd.strided_bytes == pytest.approx(ROPE_STRIDED_PASSES[0] * shape.rope_bytes)
    assert bwd.strided_bytes == pytest.approx(ROPE_STRIDED_PASSES[1] * shape.rope_bytes)
    assert bwd.bytes == pytest.approx(ROPE_PASSES[1] * shape.rope_bytes)
    (clamp,) = shape._epilogue(Kind.FWD, 0, "act_clamp", backward=False)
    assert clamp.strided_bytes == pytest.approx(clamp.bytes * CLAMP_STRIDED_PASSES[0] / CLAMP_PASSES[0])
    assert 0 < fwd.strided_bytes < fwd.bytes


def test_strided_bytes_cost_twice_as_long_on_a_gpu_and_nothing_more_on_a_cpu() -> None:
    gpu, cpu = get_device("h100-sxm"), get_device("cpu-host")
    nbytes = 1e9
    base = compute_time_s(gpu, "activation", 0.0, nbytes, "bf16") - gpu.kernel_overhead_s
    strided = compute_time_s(gpu, "activation", 0.0, nbytes, "bf16", strided_bytes=nbytes) - gpu.kernel_overhead_s
    assert strided == pytest.approx(2 * base)
    assert compute_time_s(cpu, "activation", 0.0, nbytes, "fp32", strided_bytes=nbytes) == pytest.approx(
        compute_time_s(cpu, "activation", 0.0, nbytes, "fp32"))
