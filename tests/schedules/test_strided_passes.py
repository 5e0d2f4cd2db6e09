"""Which element-wise ops carry strided bytes (``Op.strided_bytes``, :mod:`topo.strided_rate`).

Ground truth, per stack (the sources in schedules/elementwise.py ``STRIDED_PASSES`` and
schedules/moe_kernels.py): an eager RMSNorm multiplies a 16-bit [tokens, h] by its [h] weight
(torchtitan norms.py ``output * self.weight``), 2 passes forward and 2 backward; Megatron-Core's
eager YaRN RoPE multiplies by [s, 1, 1, d] tables and negates a ``torch.chunk`` half (5 of its 12
passes forward, 5 of 10 backward); its GPT-OSS clamp clamps the two chunk halves (2 of 4, 3 of 5);
NeMo AutoModel's eager attention glue copies transposed (strided) q, k, v and output (FlexAttention
with sinks) or the strided MLA value. Fused kernels and fp32 activations carry none.
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
    flex_sink_glue_strided_bytes,
    mla_glue_strided_bytes,
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


def test_automodel_glue_copies_of_transposes_are_strided() -> None:
    """FlexAttention-with-sinks glue: per query element the q and output transposes made
    contiguous (4 + 4 bytes forward) and q's gradient copied back (4), k and v 4 each way; the
    sinks' fp32 rescale none. MLA: Transformer Engine's copy of the strided value (2e x d_v)."""
    assert flex_sink_glue_strided_bytes(2, 1.0, 0.0) == (8.0, 4.0)
    assert flex_sink_glue_strided_bytes(2, 0.0, 1.0) == (8.0, 8.0)
    assert mla_glue_strided_bytes(2, 128) == (512.0, 0.0)
    model = get_moe_model("gpt-oss-120b")
    plan = ParallelPlan(framework="torch", elementwise="fused", dp=8, ep=8, global_batch=8)
    shape = moe_shape(model, plan, layer=0)
    (glue, *_) = shape.rope(Kind.FWD, 0)
    assert glue.name == "L0.attn.glue" and 0 < glue.strided_bytes < glue.bytes
    assert glue.strided_bytes == pytest.approx(shape.attn_glue_strided[0])
